"""The options of what a command prints and where: --quiet, --no-color, and the terminal
text is drawn for."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.formats import Format
from trace_gaps.streams import write_output

if TYPE_CHECKING:  # rich and the records: not for --help
    from trace_gaps.records.report import Report
    from trace_gaps.render.console import Terminal

QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar and no 'wrote FILE' lines on stderr.")
]
NoColorOpt = Annotated[
    bool,
    typer.Option(
        "--no-color",
        help="No colour in text output, even on a terminal (as NO_COLOR=1 in the environment).",
    ),
]


NARROWEST = 40  # columns


def text_terminal(output: Path | None, *, no_color: bool) -> Terminal:
    """What text output is drawn for: COLUMNS when set, else the terminal's width (rich's
    detection) when stdout is one, else a stable width (a pipe or -o file reads the same
    everywhere); colour only on a terminal, and never with --no-color or NO_COLOR."""
    from rich.console import Console

    from trace_gaps.render.console import NOT_A_TERMINAL, Terminal

    stdout = Console(file=sys.stdout)
    on_terminal = output is None and stdout.is_terminal
    if not on_terminal and not os.environ.get("COLUMNS", "").isdigit():
        return NOT_A_TERMINAL
    color = on_terminal and stdout.color_system is not None
    return Terminal(
        # Narrower than a table's key columns draws nothing readable (COLUMNS=0 included).
        width=max(stdout.width, NARROWEST),
        color=color and not no_color and not os.environ.get("NO_COLOR"),
    )


@dataclass(frozen=True, slots=True)
class DrawnReport:
    """A report drawn for its output: the text in pieces, and whether it holds colour."""

    pieces: list[str]
    styled: bool


@dataclass(frozen=True, slots=True)
class ReportOutput:
    """Where and how a command shows its report: the format, the file (stdout when None),
    --quiet and --no-color."""

    fmt: Format
    output: Path | None
    quiet: bool
    no_color: bool

    def draw(self, report: Report, *, export_argument: str | None = None) -> DrawnReport:
        """The report in the format, drawn for the terminal (or file) it goes to."""
        from trace_gaps.render import report_pieces

        terminal = text_terminal(self.output, no_color=self.no_color)
        pieces = report_pieces(report, self.fmt, terminal, export_argument=export_argument)
        return DrawnReport(pieces, styled=self.fmt is Format.TEXT and terminal.color)

    def write(self, drawn: DrawnReport) -> None:
        write_output(drawn.pieces, self.output, quiet=self.quiet, styled=drawn.styled)
