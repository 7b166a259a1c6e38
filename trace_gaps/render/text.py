"""Text: rich tables for a terminal."""

from io import StringIO

from rich.console import Console

from trace_gaps.notes import unreliable_lines
from trace_gaps.records import Candidate, Report
from trace_gaps.render.console import (
    NOT_A_TERMINAL,
    Terminal,
    new_console,
    plain,
    print_item,
    print_table,
)
from trace_gaps.render.kernels import kernel_table
from trace_gaps.render.tables import (
    candidate_table,
    cross_process_table,
    describe_export,
    describe_steps,
    evidence_lines,
    gpu_metrics_table,
    graph_lines,
    kinds_table,
    ledger_table,
    long_gap_table,
    process_title,
    replay_lines,
    stage_table,
    what_if_table,
)
from trace_gaps.units import format_duration

HEADING = "bold"


def render_text(
    report: Report, terminal: Terminal = NOT_A_TERMINAL, *, export_argument: str | None = None
) -> str:
    """Render the Report for a terminal of the given width, in colour or none;
    export_argument: how the command that draws a gap's step names the export
    (evidence_lines)."""
    buffer = StringIO()
    console = new_console(buffer, terminal)
    for line in [*describe_export(report), *unreliable_lines(report.unreliable)]:
        console.print(plain(line))
    kinds = kinds_table(report)
    if kinds.rows:
        console.print()
        print_table(console, kinds)
    for process in report.processes:
        console.print()
        console.rule(plain(process_title(process)))
        console.print(plain(process.headline))
        for line in describe_steps(process):
            console.print(plain(line))
        if process.candidates:
            console.print()
            console.print("Verdict:", style=HEADING)
            for candidate in process.candidates[:3]:
                print_item(console, candidate.verdict, bullet=f"  {candidate.rank}. ")
        tables = (
            what_if_table(process),
            candidate_table(process),
            ledger_table(process),
            stage_table(process),
            gpu_metrics_table(process),
            long_gap_table(process),
            kernel_table(process),
        )
        for table in tables:
            if table.rows:
                console.print()
                print_table(console, table)
        for line in replay_lines(process):
            console.print()
            console.print(plain(line))
        graphs = graph_lines(process)
        if graphs:
            console.print()
            console.print("CUDA graphs:", style=HEADING)
            for line in graphs:
                print_item(console, line)
        for heading, lines in evidence_lines(
            process,
            # Several exports: a process's own export and clock are not this one's.
            export=None if report.other_exports else report.export,
            several_processes=len(report.processes) > 1,
            export_argument=export_argument,
        ):
            console.print()
            console.print(plain(heading), style=HEADING)
            for line in lines:
                print_item(console, line)
    slowest = cross_process_table(report)
    if slowest.rows:
        console.print()
        print_table(console, slowest)
    if report.notes:
        console.print()
        console.print("Integrity notes:", style=HEADING)
        for note in report.notes:
            print_item(console, note.text)
    print_recap(console, report)
    return buffer.getvalue()


def print_recap(console: Console, report: Report) -> None:
    """The answer again, last: what a terminal shows once the run is done is its bottom
    (the evidence above has scrolled the headline and the verdicts away). A file or a pipe
    reads the same from its top."""
    if not any(process.candidates for process in report.processes):
        return
    console.print()
    console.print("In short (the verdicts in full and the evidence are above):", style=HEADING)
    for process in report.processes:
        if len(report.processes) > 1:
            console.print(plain(process_title(process)))
        print_item(console, process.headline, bullet="  ")
        for candidate in process.candidates[:3]:
            print_item(console, recap_line(candidate), bullet=f"  {candidate.rank}. ")
    if report.notes:
        shown = (
            "1 integrity note" if len(report.notes) == 1 else f"{len(report.notes)} integrity notes"
        )
        print_item(console, f"{shown} above", bullet="  ")


def recap_line(candidate: Candidate) -> str:
    """ "verify_forward idle, launch-bound: 8.43 ms/step; graph saves 7.89 ms/step"."""
    line = (
        f"{candidate.stage} {candidate.bucket}, {candidate.kind.replace('_', '-')}: "
        f"{format_duration(candidate.ns_per_step)}/step"
    )
    if candidate.lever and candidate.saving_ns is not None:
        line += f"; {candidate.lever} saves {format_duration(candidate.saving_ns)}/step"
    return line
