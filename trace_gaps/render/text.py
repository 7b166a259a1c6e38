"""Text: rich tables for a terminal."""

import re
from io import StringIO

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from trace_gaps.analysis.integrity import unreliable_lines
from trace_gaps.records import Report
from trace_gaps.render.kernels import kernel_table
from trace_gaps.render.tables import (
    RIGHT,
    Table,
    candidate_table,
    cross_process_table,
    describe_export,
    describe_steps,
    evidence_lines,
    graph_lines,
    kinds_table,
    ledger_table,
    long_gap_table,
    process_title,
    replay_lines,
    stage_table,
    what_if_table,
)

MAX_NAME = 48


def elide(text: str, limit: int = MAX_NAME) -> str:
    """Shorten a long name in the middle: 'void gemm<...>...kernel'."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return text[:keep] + "…" + text[-(limit - 1 - keep) :]


def plain(text: str) -> Text:
    """A user string (kernel or range name) as literal text: no markup, no emoji, one line."""
    return Text(re.sub(r"[\r\n\v\f\x85\u2028\u2029]", " ", text))


def _rich_table(table: Table) -> RichTable:
    rich = RichTable(title=plain(table.title), title_justify="left", show_lines=False)
    for column, align in zip(table.columns, table.align, strict=True):
        rich.add_column(plain(column), justify="right" if align == RIGHT else "left")
    for row in table.rows:
        rich.add_row(*(plain(elide(cell)) for cell in row))
    return rich


def render_text(report: Report, *, width: int = 160) -> str:
    """Render the Report for a terminal of the given width."""
    buffer = StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False, soft_wrap=False)
    for line in [*describe_export(report), *unreliable_lines(report.unreliable)]:
        console.print(plain(line))
    kinds = kinds_table(report)
    if kinds.rows:
        console.print()
        console.print(_rich_table(kinds))
    for process in report.processes:
        console.print()
        console.rule(plain(process_title(process)))
        console.print(plain(process.headline))
        for line in describe_steps(process):
            console.print(plain(line))
        if process.candidates:
            console.print()
            console.print("Verdict:")
            for candidate in process.candidates[:3]:
                console.print(plain(f"  {candidate.rank}. {candidate.verdict}"))
        tables = (
            what_if_table(process),
            candidate_table(process),
            ledger_table(process),
            stage_table(process),
            long_gap_table(process),
            kernel_table(process),
        )
        for table in tables:
            if table.rows:
                console.print()
                console.print(_rich_table(table))
        for line in replay_lines(process):
            console.print()
            console.print(plain(line))
        graphs = graph_lines(process)
        if graphs:
            console.print()
            console.print("CUDA graphs:")
            for line in graphs:
                console.print(plain(f"  - {line}"))
        for heading, lines in evidence_lines(
            process,
            # Several exports: a process's own export and clock are not this one's.
            export=None if report.other_exports else report.export,
            several_processes=len(report.processes) > 1,
        ):
            console.print()
            console.print(plain(heading))
            for line in lines:
                console.print(plain(f"  - {elide(line, 120)}"))
    slowest = cross_process_table(report)
    if slowest.rows:
        console.print()
        console.print(_rich_table(slowest))
    if report.notes:
        console.print()
        console.print("Integrity notes:")
        for note in report.notes:
            console.print(plain(f"  - {note}"))
    return buffer.getvalue()
