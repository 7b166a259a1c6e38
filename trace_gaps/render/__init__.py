"""Render a Report as text, Markdown, JSON or CSV; the format is chosen in one place."""

from collections.abc import Callable

from trace_gaps.formats import Format
from trace_gaps.render.csv import render_csv
from trace_gaps.render.json import render_json
from trace_gaps.render.markdown import render_markdown
from trace_gaps.render.text import render_text
from trace_gaps.report import Report

__all__ = ["RENDERERS", "Format"]

RENDERERS: dict[Format, Callable[[Report], str]] = {
    Format.TEXT: render_text,
    Format.MD: render_markdown,
    Format.JSON: render_json,
    Format.CSV: render_csv,
}
