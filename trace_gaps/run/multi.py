"""Several exports of one run (one per rank or node), analysed as one.

    exports ─read_side─▶ session start + collective kernels (small)   [a task per export]
            ─align──────▶ one clock offset per export, and its residual
            ─match──────▶ collectives matched across exports: who waits for whom
            ─analyse_side▶ each export's Trace + Analysis, its waits given  [a task per export]
            ─merge_reports▶ one Report: every process, labelled, and the cross-export ranks

The clocks and who is of the run: alignment.py. Exports are one run only when their
collectives say so (alignment.run_apart_reason); any other export is analysed apart, on its
own clock, its collectives matched among its own processes only, with a note naming why
(captures of different runs line up on no collective). The reports made one: merge.py.

The tasks run in this process, or on Dask (tasks.run_tasks with a dask.distributed Client);
a task returns only compact results, never an export's op or call tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trace_gaps.analysis.collectives import CollectiveMatch
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions
from trace_gaps.analysis.note_facts import note_of
from trace_gaps.analysis.ranks import RankSource, build_ranks_across
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.model import END_NS, START_NS, ExportInfo, Trace
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, NoteNumber, Severity
from trace_gaps.records.ranks import RanksView
from trace_gaps.records.report import Report
from trace_gaps.report.build import build_report
from trace_gaps.run.alignment import (
    Alignment,
    ExportSide,
    align,
    match_groups,
    read_side,
    run_apart_reason,
)
from trace_gaps.run.merge import (
    alignment_notes,
    merge_reports,
    merged_views,
    pid_labels,
    timelines_on_one_clock,
)
from trace_gaps.run.one import analyse_export
from trace_gaps.run.tasks import raised, run_tasks


def analyse_side(
    path: Path,
    options: AnalysisOptions,
    collectives: CollectiveMatch,
    timelines: tuple[TimelineRequest, ...] = (),
) -> tuple[Trace, Analysis]:
    """Phase two of an export: its analysis, with the waits found across exports."""
    with about_file(path):
        return analyse_export(path, options, collectives=collectives, timelines=timelines)


@dataclass(frozen=True, slots=True)
class MultiResult:
    """One report over every export that could be analysed, and the ones that failed."""

    report: Report
    failed: list[tuple[Path, str]]
    infos: list[ExportInfo]  # of the exports analysed, in order
    # Of the exports analysed, in order: each one's own Report (before the merge), its
    # timelines on the common clock (perfetto.py draws them on one time axis).
    reports: list[Report] = field(default_factory=list)
    # Of the exports analysed, in order: what analyse_exports' measure made of each (a diff's
    # side: its processes' speeds), or nothing where no measure was asked for.
    measured: list[Any] = field(default_factory=list)


def analyse_exports(
    paths: Sequence[Path],
    options: AnalysisOptions,
    *,
    top: int = 10,
    client: Any = None,
    on_export: Callable[[int, int], None] | None = None,
    timelines: tuple[TimelineRequest, ...] = (),
    measure: Callable[[tuple[Trace, Analysis], Report], Any] | None = None,
) -> MultiResult:
    """Analyse several exports of one run into one Report (see the module docstring).
    measure: made of each export's (Trace, Analysis) and its own report, as a task where
    its analysis is (the analysis is never sent back); MultiResult.measured keeps them."""
    sides_or_errors = run_tasks(
        read_side, [(path, options.collective_patterns) for path in paths], client
    )
    failed = [
        (path, str(result))
        for path, result in zip(paths, sides_or_errors, strict=True)
        if isinstance(result, BaseException)
    ]
    sides = [s for s in sides_or_errors if isinstance(s, ExportSide)]
    if not sides:
        raise TraceGapsError(
            "none of the exports could be read: " + "; ".join(message for _, message in failed)
        )
    plan = plan_run(sides)
    held: list[Any] = []  # each export's (Trace, Analysis), where its report is built
    analysed = _analysed(sides, plan, options, timelines, client, held, on_export, failed)
    reports, ranks = _export_reports(plan, sides, analysed, held, top, client)
    notes = _run_notes(plan, sides, analysed, failed)
    infos = [trace.info for _, (trace, _) in analysed]
    merged = merge_reports(reports, ranks, notes)
    measured = (
        [
            raised(result)
            for result in run_tasks(
                measure,
                [(held[i], report) for (i, _), report in zip(analysed, reports, strict=True)],
                client,
            )
        ]
        if measure is not None
        else []
    )
    apart_files = [sides[i].path.name for i, _ in analysed if i in plan.apart]
    if apart_files:
        merged = replace(merged, apart_exports=apart_files)
    return MultiResult(merged, failed, infos, reports, measured)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """The exports as runs: export 0's run and those apart (with why), their clocks on one,
    and each group's collectives matched (groups: export 0's run, then each apart alone)."""

    run: list[int]
    apart: dict[int, tuple[str, dict[str, NoteNumber]]]
    groups: list[list[int]]
    alignment: Alignment
    matches: list[CollectiveMatch]
    dropped: int  # short cross-export waits, within the clocks' error

    def match_of(self, export: int) -> CollectiveMatch:
        return next(m for g, m in zip(self.groups, self.matches, strict=True) if export in g)


def plan_run(sides: list[ExportSide]) -> RunPlan:
    """Who is of export 0's run, the clock offsets (an export apart keeps its own clock), and
    the collectives matched within each group."""
    apart = {
        i: found for i in range(1, len(sides)) if (found := run_apart_reason(sides[0], sides[i]))
    }
    run = [i for i in range(len(sides)) if i not in apart]
    groups = [run, *([i] for i in sorted(apart))]
    run_alignment = align([sides[i] for i in run])
    offsets = [0] * len(sides)  # an export analysed apart keeps its own clock
    for k, i in enumerate(run):
        offsets[i] = run_alignment.offsets_ns[k]
    alignment = replace(run_alignment, offsets_ns=tuple(offsets))
    matches, dropped = match_groups(sides, groups, alignment)
    return RunPlan(run, apart, groups, alignment, matches, dropped)


def _analysed(
    sides: list[ExportSide],
    plan: RunPlan,
    options: AnalysisOptions,
    timelines: tuple[TimelineRequest, ...],
    client: Any,
    held: list[Any],
    on_export: Callable[[int, int], None] | None,
    failed: list[tuple[Path, str]],
) -> list[tuple[int, tuple[Trace, Analysis]]]:
    """Phase two of every export, by number; the ones that fail appended to failed."""
    offsets = plan.alignment.offsets_ns
    arguments = [
        (side.path, options, plan.match_of(i).of_export(i, offsets[i]), timelines)
        for i, side in enumerate(sides)
    ]
    analysed: list[tuple[int, tuple[Trace, Analysis]]] = []
    results = _analyse_sides(arguments, plan.alignment, client, held)
    for i, result in enumerate(results):
        if isinstance(result, BaseException):
            failed.append((sides[i].path, str(result)))
        else:
            analysed.append((i, result))
        if on_export is not None:
            on_export(i + 1, len(sides))
    if not analysed:
        raise TraceGapsError(
            "none of the exports could be analysed: " + "; ".join(message for _, message in failed)
        )
    return analysed


def _export_reports(
    plan: RunPlan,
    sides: list[ExportSide],
    analysed: list[tuple[int, tuple[Trace, Analysis]]],
    held: list[Any],
    top: int,
    client: Any,
) -> tuple[list[Report], RanksView]:
    """Each export's report, its timelines on the common clock, and the ranks of them all."""
    offsets = plan.alignment.offsets_ns
    labels = pid_labels([(sides[i].path, analysis) for i, (_, analysis) in analysed])
    sources = [
        RankSource(i, analysis, offsets[i], labels[k], sides[i].path.name)
        for k, (i, (_, analysis)) in enumerate(analysed)
    ]
    # The ranks view of each run: the exports of export 0's run together, one apart alone.
    views = [
        build_ranks_across([s for s in sources if s.export in group], match)
        for group, match in zip(plan.groups, plan.matches, strict=True)
    ]
    view_of = {i: view for group, view in zip(plan.groups, views, strict=True) for i in group}
    # Each export's report where its analysis is (on the workers, all at once).
    built = run_tasks(
        report_of,
        [(held[i], top, view_of[i], labels[k]) for k, (i, _) in enumerate(analysed)],
        client,
    )
    reports = [raised(report) for report in built]
    reports = timelines_on_one_clock(reports, [offsets[i] for i, _ in analysed])
    return reports, merged_views(views)


def _run_notes(
    plan: RunPlan,
    sides: list[ExportSide],
    analysed: list[tuple[int, tuple[Trace, Analysis]]],
    failed: list[tuple[Path, str]],
) -> list[NoteFacts]:
    """The run's own notes: its alignment, the exports apart and those not analysed."""
    in_run = [i for i, _ in analysed if i in plan.run]
    notes = alignment_notes(
        plan.alignment,
        [sides[i].path for i in in_run],
        [plan.alignment.offsets_ns[i] for i in in_run],
        plan.dropped,
    )
    notes += [
        note_of(
            NoteCode.EXPORTS_APART,
            Severity.INFO,
            [Figures.WAITS],
            file=sides[i].path.name,
            first=sides[0].path.name,
            reason=reason,
            **numbers,
        )
        for i, (reason, numbers) in sorted(plan.apart.items())
        if any(i == k for k, _ in analysed)
    ]
    notes += [
        note_of(
            NoteCode.EXPORT_NOT_ANALYSED,
            Severity.PARTIAL,
            [Figures.WAITS],
            file=path.name,
            message=message,
        )
        for path, message in failed
    ]
    return notes


def report_of(
    analysed: tuple[Trace, Analysis], top: int, ranks: RanksView, labels: dict[int, str]
) -> Report:
    """An export's report, with the ranks of the whole run (a task of its own)."""
    trace, analysis = analysed
    return build_report(trace, analysis, top=top, ranks=ranks, labels=labels)


def _analyse_sides(
    arguments: list[tuple[Path, AnalysisOptions, CollectiveMatch, tuple[TimelineRequest, ...]]],
    alignment: Alignment,
    client: Any,
    held: list[Any],
) -> list[tuple[Trace, Analysis] | BaseException]:
    """Phase two of every export. The pictures of one process are the first export's; a
    picture of every rank draws the same step of each: the first export is analysed first,
    and each other export draws the step under the middle of the first export's pick, on the
    common clock (StepPick.AT), not a median of its own. A range of steps (A:B) is the same
    range of each export's step thread, as of each process's within one export."""
    if len(arguments) < 2 or not arguments[0][3]:
        return run_tasks(analyse_side, arguments, client, held)
    first = run_tasks(analyse_side, arguments[:1], client, held)
    middles: dict[TimelineRequest, int] = {}
    if not isinstance(first[0], BaseException):
        middles = {
            request: int((chosen[START_NS].iloc[0] + chosen[END_NS].iloc[0]) // 2)
            for request, chosen in first[0][1].picked_steps
            if request.all_processes and len(chosen)
        }
    rest = [
        (
            path,
            options,
            collectives,
            tuple(
                request
                if request.pick is StepPick.RANGE
                else TimelineRequest(
                    StepPick.AT,
                    all_processes=True,
                    at_ns=middle - alignment.offsets_ns[i],
                    paired_view=request.view,
                )
                for request, middle in middles.items()
            ),
        )
        for i, (path, options, collectives, _) in enumerate(arguments[1:], start=1)
    ]
    return first + run_tasks(analyse_side, rest, client, held)
