"""`trace-gaps info`: what an export holds, before any analysis."""

from __future__ import annotations

from typing import Annotated

import typer

from trace_gaps.commands.arguments import ExportArg
from trace_gaps.commands.output_options import QuietOpt, text_terminal
from trace_gaps.errors import about_file
from trace_gaps.formats import Format, InfoFormat
from trace_gaps.inputs import resolve_export
from trace_gaps.streams import write_output


def info(
    export: ExportArg = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Describe the shipped sample trace.")
    ] = False,
    fmt: Annotated[
        InfoFormat, typer.Option("--format", "-f", help="Output format.")
    ] = InfoFormat.TEXT,
    as_json: Annotated[bool, typer.Option("--json", hidden=True, help="Same as -f json.")] = False,
    include_command: Annotated[
        bool,
        typer.Option(
            "--include-command",
            help="Show the host name, working directory, program path and arguments among "
            "the capture settings (left out by default).",
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """What the export holds: versions, capture settings, GPUs, threads, rows, NVTX ranges."""
    from trace_gaps.nsys.export import count_rows, devices_per_process
    from trace_gaps.nsys.stream import stream_export
    from trace_gaps.render import render_overview
    from trace_gaps.render.console import NOT_A_TERMINAL, fit_lines
    from trace_gaps.report.overview import build_overview

    path = resolve_export(export, demo)
    with about_file(path), stream_export(path) as opened:
        overview = build_overview(
            opened.head,
            count_rows(path),
            calls_per_thread=opened.calls_per_thread(),
            active_pids=opened.sources.known_pids(),
            module_loads=opened.sources.module_loads,
            devices=devices_per_process(path),
            include_command=include_command,
        )
    shown = Format.JSON if as_json or fmt is InfoFormat.JSON else Format.TEXT
    text = render_overview(overview, shown)
    terminal = text_terminal(None, no_color=True)
    if shown is Format.TEXT and terminal != NOT_A_TERMINAL:
        text = fit_lines(text, terminal.width)
    write_output(text, None, quiet=quiet)
