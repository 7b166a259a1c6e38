"""Render a Report, a Diff or an Overview; the format is chosen here, in one registry."""

from collections.abc import Callable
from dataclasses import dataclass

from trace_gaps.diff.build import Diff
from trace_gaps.errors import TraceGapsError
from trace_gaps.formats import Format
from trace_gaps.records.report import Report
from trace_gaps.render.console import NOT_A_TERMINAL, Terminal
from trace_gaps.render.csv import render_csv
from trace_gaps.render.diff import render_diff_json, render_diff_markdown, render_diff_text
from trace_gaps.render.json import json_pieces, render_json
from trace_gaps.render.markdown import render_markdown
from trace_gaps.render.overview import render_overview_json, render_overview_text
from trace_gaps.render.text import render_text
from trace_gaps.report.overview import Overview

__all__ = ["RENDERERS", "Format"]


@dataclass(frozen=True, slots=True)
class Renderers:
    """One format's renderer of each document; None where the document has no such form.
    report_pieces: the report's text in pieces to write one after the other, where the
    format makes it so (None: the whole text is one piece)."""

    report: Callable[[Report], str]
    diff: Callable[[Diff], str] | None = None
    overview: Callable[[Overview], str] | None = None
    report_pieces: Callable[[Report], list[str]] | None = None


RENDERERS: dict[Format, Renderers] = {
    Format.TEXT: Renderers(render_text, render_diff_text, render_overview_text),
    Format.MD: Renderers(render_markdown, render_diff_markdown),
    Format.JSON: Renderers(render_json, render_diff_json, render_overview_json, json_pieces),
    Format.CSV: Renderers(render_csv),
}


def render_report(
    report: Report,
    fmt: Format,
    terminal: Terminal = NOT_A_TERMINAL,
    *,
    export_argument: str | None = None,
) -> str:
    """The Report in the chosen format; text drawn for the terminal. export_argument: the
    export as the command line named it, for the commands the report suggests."""
    if fmt is Format.TEXT:
        return render_text(report, terminal, export_argument=export_argument)
    if fmt is Format.MD:
        return render_markdown(report, export_argument=export_argument)
    return RENDERERS[fmt].report(report)


def report_pieces(
    report: Report,
    fmt: Format,
    terminal: Terminal = NOT_A_TERMINAL,
    *,
    export_argument: str | None = None,
) -> list[str]:
    """render_report's text in pieces, written one after the other (streams.write_output):
    the JSON of a long capture is never one string (json_pieces); one piece otherwise."""
    pieces = RENDERERS[fmt].report_pieces
    if pieces is not None:
        return pieces(report)
    return [render_report(report, fmt, terminal, export_argument=export_argument)]


def render_diff(diff: Diff, fmt: Format, terminal: Terminal = NOT_A_TERMINAL) -> str:
    """The Diff in the chosen format, text drawn for the terminal; diff has no CSV form."""
    if fmt is Format.TEXT:
        return render_diff_text(diff, terminal)
    renderer = RENDERERS[fmt].diff
    if renderer is None:
        raise TraceGapsError(f"diff has no {fmt.value} output; use --format text, md or json.")
    return renderer(diff)


def render_overview(overview: Overview, fmt: Format) -> str:
    """The Overview as text or JSON."""
    renderer = RENDERERS[fmt].overview
    if renderer is None:
        raise TraceGapsError(f"info has no {fmt.value} output; use text or --json.")
    return renderer(overview)
