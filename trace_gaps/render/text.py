"""Text: the outline drawn for a terminal, tables through rich."""

from io import StringIO

from rich.console import Console

from trace_gaps.records.report import Report
from trace_gaps.render.console import (
    NOT_A_TERMINAL,
    Terminal,
    new_console,
    plain,
    print_item,
    print_table,
)
from trace_gaps.report.outline import Block, Heading, Items, Level, Lines, Medium, Tone, outline
from trace_gaps.report.tables import Table

HEADING = "bold"


def render_text(
    report: Report, terminal: Terminal = NOT_A_TERMINAL, *, export_argument: str | None = None
) -> str:
    """Render the Report for a terminal of the given width, in colour or none;
    export_argument: how the command that draws a gap's step names the export
    (evidence_lines). The recap closes it: what a terminal shows once the run is done."""
    buffer = StringIO()
    console = new_console(buffer, terminal)
    previous: Block | None = None
    for section in outline(report, Medium.TERMINAL, export_argument=export_argument):
        for block in section.blocks:
            print_block(console, block, after=previous)
            previous = block
    return buffer.getvalue()


def print_block(console: Console, block: Block, *, after: Block | None) -> None:
    """One block; a blank line sets a table, a heading or a remark apart from what is above,
    and lines from a table above (a heading right under a heading, and lines and items under
    a heading or lines, stay with it)."""
    if isinstance(block, Table):
        console.print()
        print_table(console, block)
    elif isinstance(block, Heading):
        if not isinstance(after, Heading):
            console.print()
        if block.level is Level.PART:
            console.rule(plain(block.text))
        elif block.level is Level.SECTION:
            console.print(plain(f"{block.text}:"), style=HEADING)
        else:
            console.print(plain(block.text), style=HEADING)
    elif isinstance(block, Lines):
        if isinstance(after, Table):
            console.print()
        for line in block.lines:
            if block.tone is Tone.REMARK:
                console.print()
            console.print(plain(line))
    else:
        print_items(console, block)


def print_items(console: Console, items: Items) -> None:
    """Each item wrapped under its mark: "  - ", "  1. ", or an indent where the mark is ""."""
    for index, item in enumerate(items.items):
        mark = "-" if items.marks is None else items.marks[index]
        print_item(console, item, bullet=f"  {mark} " if mark else "  ")
