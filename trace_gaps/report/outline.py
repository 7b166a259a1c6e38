"""The report's outline, declared once: its sections in order, each built from the Report as
headings, lines, items and tables that text, Markdown and HTML draw alike.

A renderer walks `outline(report)` and knows only how to draw each kind of block; what the
report says, in what order, and when a section is absent are decided here, so the three
formats cannot drift apart. A few sections are drawn on one medium only (`only`): a terminal's
first screen holds the headline, the verdicts a line each and the step ledger, the verdicts
in full further down, and it ends with `recap` (a terminal shows its bottom once the run is
done); a document (Markdown, HTML), read from its top, has the verdicts in full under the
headline and the ledger after the candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from trace_gaps.records.report import Candidate, ProcessReport, Report
from trace_gaps.report.descriptions import (
    describe_export,
    describe_steps,
    graph_lines,
    process_title,
    replay_lines,
)
from trace_gaps.report.evidence import evidence_lines
from trace_gaps.report.kernels import kernel_table
from trace_gaps.report.notes import unreliable_lines
from trace_gaps.report.rank_tables import cross_process_table
from trace_gaps.report.tables import (
    Table,
    candidate_table,
    gpu_metrics_table,
    kinds_table,
    ledger_table,
    long_gap_table,
    stage_table,
    what_if_table,
)
from trace_gaps.units import format_duration


class Level(StrEnum):
    """How high a heading stands: a part of the document (a process, the notes), a section
    inside one (the verdict, the evidence), or a label over a few items."""

    PART = "part"
    SECTION = "section"
    LABEL = "label"


@dataclass(frozen=True, slots=True)
class Heading:
    text: str
    level: Level


class Tone(StrEnum):
    """What a run of lines is: the one-sentence answer, plain facts (a line each), warnings
    (the figures damaged rows make unreliable), or a remark that stands as its own paragraph."""

    ANSWER = "answer"
    FACTS = "facts"
    WARNING = "warning"
    REMARK = "remark"


@dataclass(frozen=True, slots=True)
class Lines:
    lines: list[str]
    tone: Tone


@dataclass(frozen=True, slots=True)
class Items:
    """A list; marks: each item's mark ("1.", or "" for none) where the list is ordered."""

    items: list[str]
    marks: list[str] | None = None


Block = Heading | Lines | Items | Table


class Medium(StrEnum):
    """What a report is drawn on: a terminal (text) or a document (Markdown, HTML)."""

    TERMINAL = "terminal"
    DOCUMENT = "document"


@dataclass(frozen=True, slots=True)
class Section:
    """One section as built for this report: its name (the same in every format), blocks, and
    the one medium it is drawn on (None: every format)."""

    name: str
    blocks: list[Block]
    only: Medium | None = None


@dataclass(frozen=True, slots=True)
class Scope:
    """What a section is built from: the report, the process (None for the report's own
    sections) and how the command line named the export (for the commands evidence suggests)."""

    report: Report
    process: ProcessReport | None
    export_argument: str | None


@dataclass(frozen=True, slots=True)
class Declared:
    name: str
    build: Callable[[Scope], list[Block]]
    only: Medium | None = None


def _table(make: Callable[[ProcessReport], Table]) -> Callable[[Scope], list[Block]]:
    def build(scope: Scope) -> list[Block]:
        table = make(_process(scope))
        return [table] if table.rows else []

    return build


def _process(scope: Scope) -> ProcessReport:
    assert scope.process is not None, "a process section built for the report"
    return scope.process


def _export(scope: Scope) -> list[Block]:
    return [Lines(describe_export(scope.report), Tone.FACTS)]


def _unreliable(scope: Scope) -> list[Block]:
    lines = unreliable_lines(scope.report.unreliable)
    return [Lines(lines, Tone.WARNING)] if lines else []


def _kinds(scope: Scope) -> list[Block]:
    table = kinds_table(scope.report)
    return [table] if table.rows else []


def _title(scope: Scope) -> list[Block]:
    return [Heading(process_title(_process(scope)), Level.PART)]


def _headline(scope: Scope) -> list[Block]:
    return [Lines([_process(scope).headline], Tone.ANSWER)]


def _steps(scope: Scope) -> list[Block]:
    return [Lines(describe_steps(_process(scope)), Tone.FACTS)]


def _verdict(scope: Scope) -> list[Block]:
    top = _process(scope).candidates[:3]
    if not top:
        return []
    return [
        Heading("Verdict", Level.SECTION),
        Items([c.verdict for c in top], [f"{c.rank}." for c in top]),
    ]


def _verdict_lines(scope: Scope) -> list[Block]:
    """The first three candidates a line each (verdict_line), for a terminal's first screen."""
    top = _process(scope).candidates[:3]
    if not top:
        return []
    return [
        Heading("Verdict", Level.SECTION),
        Items([verdict_line(c) for c in top], [f"{c.rank}." for c in top]),
    ]


def _verdicts_in_full(scope: Scope) -> list[Block]:
    top = _process(scope).candidates[:3]
    if not top:
        return []
    return [
        Heading("Verdict in full", Level.SECTION),
        Items([c.verdict for c in top], [f"{c.rank}." for c in top]),
    ]


def _replay(scope: Scope) -> list[Block]:
    lines = replay_lines(_process(scope))
    return [Lines(lines, Tone.REMARK)] if lines else []


def _graphs(scope: Scope) -> list[Block]:
    lines = graph_lines(_process(scope))
    return [Heading("CUDA graphs", Level.LABEL), Items(lines)] if lines else []


def _evidence(scope: Scope) -> list[Block]:
    report = scope.report
    sections = evidence_lines(
        _process(scope),
        # Several exports: a process's own export and clock are not this one's.
        export=None if report.other_exports else report.export,
        several_processes=len(report.processes) > 1,
        export_argument=scope.export_argument,
    )
    if not sections:
        return []
    blocks: list[Block] = [Heading("Evidence", Level.SECTION)]
    for heading, lines in sections:
        blocks += [Heading(heading, Level.LABEL), Items(lines)]
    return blocks


def _ranks(scope: Scope) -> list[Block]:
    table = cross_process_table(scope.report)
    return [table] if table.rows else []


def _notes(scope: Scope) -> list[Block]:
    notes = scope.report.notes
    if not notes:
        return []
    return [Heading("Integrity notes", Level.PART), Items([note.text for note in notes])]


def _recap(scope: Scope) -> list[Block]:
    """The answer again, last: the headline and the first three candidates a line each."""
    report = scope.report
    if not any(process.candidates for process in report.processes):
        return []
    blocks: list[Block] = [
        Heading("In short (the verdicts in full and the evidence are above)", Level.SECTION)
    ]
    for process in report.processes:
        if len(report.processes) > 1:
            blocks.append(Lines([process_title(process)], Tone.FACTS))
        top = process.candidates[:3]
        blocks.append(
            Items(
                [process.headline, *(recap_line(c) for c in top)],
                ["", *(f"{c.rank}." for c in top)],
            )
        )
    if report.notes:
        count = len(report.notes)
        shown = "1 integrity note" if count == 1 else f"{count} integrity notes"
        blocks.append(Items([f"{shown} above"], [""]))
    return blocks


def verdict_line(candidate: Candidate) -> str:
    """ "verify_forward idle 4.23 ms/step — 324 eager launches/step keep the GPU waiting: a CUDA
    graph or fused kernels remove it; graph saves 3.69 ms/step": the stage, bucket and time
    of the verdict, its reason in one clause (the headline's), and the priced lever."""
    line = (
        f"{candidate.stage} {candidate.bucket} {format_duration(candidate.ns_per_step)}/step"
        f" — {candidate.why}"
    )
    if candidate.lever and candidate.saving_ns is not None:
        line += f"; {candidate.lever} saves {format_duration(candidate.saving_ns)}/step"
    return line


def recap_line(candidate: Candidate) -> str:
    """ "verify_forward idle, launch-bound: 8.43 ms/step; graph saves 7.89 ms/step"."""
    line = (
        f"{candidate.stage} {candidate.bucket}, {candidate.kind.replace('_', '-')}: "
        f"{format_duration(candidate.ns_per_step)}/step"
    )
    if candidate.lever and candidate.saving_ns is not None:
        line += f"; {candidate.lever} saves {format_duration(candidate.saving_ns)}/step"
    return line


# The document, top to bottom: the report's head, each process's sections, the report's tail.
HEAD = (
    Declared("export", _export),
    Declared("unreliable", _unreliable),
    Declared("kinds", _kinds),
)
PER_PROCESS = (
    Declared("title", _title),
    Declared("headline", _headline),
    # A terminal's first screen (issue 44): the verdicts a line each and the ledger right
    # under the headline, within 40 lines at 80 columns; the sentences in full come later.
    Declared("verdict", _verdict_lines, Medium.TERMINAL),
    Declared("ledger", _table(ledger_table), Medium.TERMINAL),
    Declared("steps", _steps),
    Declared("verdict", _verdict, Medium.DOCUMENT),
    Declared("what-if", _table(what_if_table)),
    Declared("candidates", _table(candidate_table)),
    # Right under the candidates: it says how their savings were priced.
    Declared("replay", _replay),
    Declared("ledger", _table(ledger_table), Medium.DOCUMENT),
    Declared("stages", _table(stage_table)),
    Declared("gpu metrics", _table(gpu_metrics_table)),
    Declared("long gaps", _table(long_gap_table)),
    Declared("kernels", _table(kernel_table)),
    Declared("graphs", _graphs),
    # Each sentence right above its candidate's evidence.
    Declared("verdict in full", _verdicts_in_full, Medium.TERMINAL),
    Declared("evidence", _evidence),
)
TAIL = (
    Declared("ranks", _ranks),
    Declared("notes", _notes),
    Declared("recap", _recap, Medium.TERMINAL),
)


def outline(
    report: Report, medium: Medium | None = None, *, export_argument: str | None = None
) -> list[Section]:
    """The report's sections in order, those with nothing to show left out; medium: only
    those drawn on it (None: every section of both); export_argument: how the command line
    named the export (evidence_lines)."""
    scopes = [
        *((declared, Scope(report, None, export_argument)) for declared in HEAD),
        *(
            (declared, Scope(report, process, export_argument))
            for process in report.processes
            for declared in PER_PROCESS
        ),
        *((declared, Scope(report, None, export_argument)) for declared in TAIL),
    ]
    sections = [
        Section(declared.name, declared.build(scope), declared.only)
        for declared, scope in scopes
        if medium is None or declared.only in (None, medium)
    ]
    return [section for section in sections if section.blocks]
