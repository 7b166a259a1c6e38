"""Several exports of one run (one per rank or node), analysed as one.

    exports ─read_side─▶ session start + collective kernels (small)   [a task per export]
            ─align──────▶ one clock offset per export, and its residual
            ─match──────▶ collectives matched across exports: who waits for whom
            ─analyse_side▶ each export's Trace + Analysis, its waits given  [a task per export]
            ─merge_reports▶ one Report: every process, labelled, and the cross-export ranks

Each export counts time from its own session start. Clocks are aligned first by the session
starts (wall-clock ns in TARGET_INFO_SESSION_START_TIME), then refined by collective
completions: matched collectives end at the same moment on every participant, so the median
of (reference end - export end) over the instances an export shares with the reference
(export 0) is its correction. The residual is the spread of ends of cross-export instances
after alignment (p50, p99); a wait across exports shorter than the p99 residual is not
attributed (it cannot be told from clock error).

Exports are one run only when their collectives say so (run_apart_reason): an export shares
a collective family with export 0, each shared family has as many instances in both, and
their ends agree after alignment (p50 residual within RUN_END_TOLERANCE_NS). Any other export is
analysed apart, on its own clock, its collectives matched among its own processes only, with
a note naming why (captures of different runs line up on no collective).

The tasks run in this process, or on Dask (`run_tasks` with a dask.distributed Client);
a task returns only compact results, never an export's op or call tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import (
    END_TOLERANCE_NS,
    EXPORT,
    FAMILY,
    INSTANCE,
    PEER_EXPORT,
    PEER_PID,
    WAIT_END_NS,
    CollectiveMatch,
    match_collectives,
    number_instances,
    user_collectives,
)
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions
from trace_gaps.analysis.note_facts import note_of
from trace_gaps.analysis.ranks import RankSource, build_ranks_across
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.model import END_NS, NAME, PID, START_NS, ExportInfo, Trace
from trace_gaps.nsys.stream import stream_export
from trace_gaps.records import Figures, NoteCode, NoteFacts, NoteNumber, RanksView, Report, Severity
from trace_gaps.report.build import build_report, slowest_ranks
from trace_gaps.report.notes import about_export, write_note
from trace_gaps.run.one import analyse_export

T = TypeVar("T")

# Exports are one run only if, once aligned, the median spread of their shared collectives'
# ends is within this. Measured: one run's, 0.12 µs (tp_rank0/tp_rank1, all-reduces) and
# 3.3 µs (mfu_2gpu_before split per process: send/recv pairs, whose ends differ by up to
# 31 µs); different runs' with collectives to pair, 6.7 ms and more.
RUN_END_TOLERANCE_NS = 50_000


@dataclass(frozen=True, slots=True)
class ExportSide:
    """What phase one reads of an export: its session start and its collective kernels."""

    path: Path
    session_start_utc_ns: int | None
    collectives: pd.DataFrame  # start_ns, end_ns, pid, device_id, name (own clock)


@dataclass(frozen=True, slots=True)
class Alignment:
    """Per export, the ns to add to its times to put them on export 0's clock."""

    offsets_ns: tuple[int, ...]
    method: str
    residual_p50_ns: int | None  # spread of ends of cross-export instances, after alignment
    residual_p99_ns: int | None
    shared_instances: int  # cross-export instances the refinement used
    drift_ns_per_s: float | None  # slope of the remaining end mismatch over time, if any


def read_side(path: Path, collective_patterns: tuple[str, ...] = ()) -> ExportSide:
    """Phase one of an export: session start and collectives (one SQL scan, no op tables);
    collective_patterns: the user's (--collective), beside the table's."""
    with about_file(path), stream_export(path) as opened:
        collectives = opened.sources.collectives(user_collectives(collective_patterns))
        return ExportSide(path, opened.head.info.session_start_utc_ns, collectives)


def align(sides: Sequence[ExportSide]) -> Alignment:
    """Offsets by session start, refined by the ends of collectives the exports share."""
    starts = [side.session_start_utc_ns for side in sides]
    have_starts = all(start is not None for start in starts)
    coarse = [int(start - starts[0]) if have_starts else 0 for start in starts]  # type: ignore[operator]
    method = "session start" if have_starts else "none (no session start in some export)"
    if len(sides) < 2:
        return Alignment(tuple(coarse), method, None, None, 0, None)
    frames = _on_clock(sides, coarse)
    ends = _instance_ends(frames)
    offsets = list(coarse)
    shared = 0
    drift = None
    if not ends.empty and 0 in ends.columns:
        for i in range(1, len(sides)):
            if i not in ends.columns:
                continue
            both = ends[[0, i]].dropna()
            if both.empty:
                continue
            delta = both[0] - both[i]
            correction = int(np.median(delta.to_numpy()))
            offsets[i] += correction
            shared += len(both)
            if len(both) >= 10:
                times = both[0].to_numpy(dtype=np.float64) / 1e9
                remaining = delta.to_numpy(dtype=np.float64) - correction
                slope = float(np.polyfit(times - times.mean(), remaining, 1)[0])
                drift = slope if drift is None or abs(slope) > abs(drift) else drift
        method += " + collective ends" if shared else ""
    spread = _instance_spread(_on_clock(sides, offsets))
    p50 = int(np.percentile(spread, 50)) if len(spread) else None
    p99 = int(np.percentile(spread, 99)) if len(spread) else None
    return Alignment(tuple(offsets), method, p50, p99, shared, drift)


def run_apart_reason(
    first: ExportSide, other: ExportSide
) -> tuple[str, dict[str, NoteNumber]] | None:
    """Why `other` is not of `first`'s run, as (reason, numbers), or None when it is: their
    collectives are the same sequence, ending together once aligned.

    reasons: "no_collectives" (one has none), "no_shared_family", "counts" (a shared family
    has more instances in one), "ends" (paired ends disagree after alignment)."""
    if first.collectives.empty or other.collectives.empty:
        empty = first if first.collectives.empty else other
        return "no_collectives", {"without": empty.path.name}
    counts = [_instances_per_family(side) for side in (first, other)]
    shared = sorted(set(counts[0]) & set(counts[1]))
    if not shared:
        return "no_shared_family", {
            "families": tuple(sorted(counts[0])),
            "other_families": tuple(sorted(counts[1])),
        }
    differ = [family for family in shared if counts[0][family] != counts[1][family]]
    if differ:
        family = differ[0]
        return "counts", {
            "family": family,
            "count": counts[0][family],
            "other_count": counts[1][family],
        }
    pair = align([first, other])
    if pair.residual_p50_ns is None or pair.residual_p50_ns > RUN_END_TOLERANCE_NS:
        return "ends", {
            "residual_p50_ns": pair.residual_p50_ns or 0,
            "shared_instances": pair.shared_instances,
            "tolerance_ns": RUN_END_TOLERANCE_NS,
        }
    return None


def _instances_per_family(side: ExportSide) -> dict[str, int]:
    """Per collective family: its instances in the export (the most any participant runs)."""
    found = number_instances(side.collectives)
    return {
        str(family): int(count)
        for family, count in (found.groupby(FAMILY)[INSTANCE].max() + 1).items()
    }


def _on_clock(sides: Sequence[ExportSide], offsets: Sequence[int]) -> pd.DataFrame:
    frames = []
    for i, (side, offset) in enumerate(zip(sides, offsets, strict=True)):
        if len(side.collectives):
            frame = side.collectives.copy()
            frame[START_NS] += offset
            frame[END_NS] += offset
            frame[EXPORT] = i
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[START_NS, END_NS, PID, "device_id", NAME, EXPORT])
    return pd.concat(frames, ignore_index=True)


def _instance_ends(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (family, instance): the first end of each export (columns), on the frame's clock."""
    if frame.empty:
        return pd.DataFrame()
    found = number_instances(frame)
    return found.groupby([FAMILY, INSTANCE, EXPORT])[END_NS].min().unstack(EXPORT)


def _instance_spread(frame: pd.DataFrame) -> np.ndarray:
    """Per cross-export instance: latest end - earliest end."""
    if frame.empty:
        return np.array([], dtype=np.int64)
    found = number_instances(frame)
    grouped = found.groupby([FAMILY, INSTANCE])
    crosses = grouped[EXPORT].nunique() > 1
    spread = (grouped[END_NS].max() - grouped[END_NS].min())[crosses]
    return spread.to_numpy()


def match_across(sides: Sequence[ExportSide], alignment: Alignment) -> tuple[CollectiveMatch, int]:
    """Match every export's collectives on the common clock. A wait across exports that is
    not longer than the p99 residual is dropped; returns the match and how many were."""
    frame = _on_clock(sides, alignment.offsets_ns)
    if frame.empty:
        return match_collectives(frame.iloc[:0]), 0
    match = match_collectives(frame)
    ops = match.ops
    tolerance = max(alignment.residual_p99_ns or 0, END_TOLERANCE_NS)
    crosses = (ops[PEER_EXPORT] >= 0) & (ops[PEER_EXPORT] != ops[EXPORT])
    short = crosses & ((ops[WAIT_END_NS] - ops[START_NS]) <= tolerance)
    if short.any():
        ops = ops.assign(
            **{
                WAIT_END_NS: np.where(short, ops[START_NS], ops[WAIT_END_NS]),
                PEER_PID: np.where(short, -1, ops[PEER_PID]),
                PEER_EXPORT: np.where(short, -1, ops[PEER_EXPORT]),
            }
        )
        match = replace(match, ops=ops)
    return match, int(short.sum())


def analyse_side(
    path: Path,
    options: AnalysisOptions,
    collectives: CollectiveMatch,
    timelines: tuple[TimelineRequest, ...] = (),
) -> tuple[Trace, Analysis]:
    """Phase two of an export: its analysis, with the waits found across exports."""
    with about_file(path):
        return analyse_export(path, options, collectives=collectives, timelines=timelines)


def run_tasks(
    function: Callable[..., T],
    arguments: Sequence[tuple[Any, ...]],
    client: Any = None,
    held: list[Any] | None = None,
) -> list[T | BaseException]:
    """function(*args) for each, here or on a dask.distributed Client; a failed task's
    exception is returned in its place, so the others' results are kept. held: where the
    tasks' results are kept for later tasks (their Dask futures: a later task given one
    runs where that result already is, and it is not sent again), one per task."""
    if client is None:
        results: list[T | BaseException] = []
        for args in arguments:
            try:
                results.append(function(*args))
            except TraceGapsError as error:
                results.append(error)
        if held is not None:
            held.extend(results)
        return results
    futures = [client.submit(function, *args, pure=False) for args in arguments]
    if held is not None:
        held.extend(futures)
    gathered: list[T | BaseException] = []
    for future in futures:
        try:
            gathered.append(future.result())
        except TraceGapsError as error:
            gathered.append(error)
    return gathered


@dataclass(frozen=True, slots=True)
class MultiResult:
    """One report over every export that could be analysed, and the ones that failed."""

    report: Report
    failed: list[tuple[Path, str]]
    infos: list[ExportInfo]  # of the exports analysed, in order
    # Of the exports analysed, in order: each one's own Report (before the merge), its
    # timelines on the common clock (perfetto.py draws them on one time axis).
    reports: list[Report] = field(default_factory=list)


def analyse_exports(
    paths: Sequence[Path],
    options: AnalysisOptions,
    *,
    top: int = 10,
    client: Any = None,
    on_export: Callable[[int, int], None] | None = None,
    timelines: tuple[TimelineRequest, ...] = (),
) -> MultiResult:
    """Analyse several exports of one run into one Report (see the module docstring)."""
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
    matches, dropped = _match_groups(sides, groups, alignment)
    match_of = {i: match for group, match in zip(groups, matches, strict=True) for i in group}
    arguments = [
        (side.path, options, match_of[i].of_export(i, alignment.offsets_ns[i]), timelines)
        for i, side in enumerate(sides)
    ]
    analysed: list[tuple[int, tuple[Trace, Analysis]]] = []
    held: list[Any] = []  # each export's (Trace, Analysis), where its report is built
    results = _analyse_sides(arguments, alignment, client, held)
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
    labels = _labels([(sides[i].path, analysis) for i, (_, analysis) in analysed])
    sources = [
        RankSource(i, analysis, alignment.offsets_ns[i], labels[k], sides[i].path.name)
        for k, (i, (_, analysis)) in enumerate(analysed)
    ]
    # The ranks view of each run: the exports of export 0's run together, one apart alone.
    views = [
        build_ranks_across([s for s in sources if s.export in group], match)
        for group, match in zip(groups, matches, strict=True)
    ]
    view_of = {i: view for group, view in zip(groups, views, strict=True) for i in group}
    ranks = _merged_views(views)
    # Each export's report where its analysis is (on the workers, all at once).
    built = run_tasks(
        report_of,
        [(held[i], top, view_of[i], labels[k]) for k, (i, _) in enumerate(analysed)],
        client,
    )
    reports = [_raised(report) for report in built]
    reports = _timelines_on_one_clock(reports, [alignment.offsets_ns[i] for i, _ in analysed])
    in_run = [i for i, _ in analysed if i in run]
    notes = _alignment_notes(
        alignment,
        [sides[i].path for i in in_run],
        [alignment.offsets_ns[i] for i in in_run],
        dropped,
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
        for i, (reason, numbers) in sorted(apart.items())
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
    infos = [trace.info for _, (trace, _) in analysed]
    merged = merge_reports(reports, ranks, notes)
    apart_files = [sides[i].path.name for i, _ in analysed if i in apart]
    if apart_files:
        merged = replace(merged, apart_exports=apart_files)
    return MultiResult(merged, failed, infos, reports)


def _match_groups(
    sides: Sequence[ExportSide], groups: list[list[int]], alignment: Alignment
) -> tuple[list[CollectiveMatch], int]:
    """Each group's collectives matched among its own exports (match_across), its ops'
    export numbers those of `sides`; and how many short cross-export waits were dropped."""
    matches, dropped = [], 0
    for group in groups:
        offsets = tuple(alignment.offsets_ns[i] for i in group)
        match, short = match_across(
            [sides[i] for i in group], replace(alignment, offsets_ns=offsets)
        )
        index = np.asarray(group, dtype=np.int64)
        ops = match.ops
        if len(ops):
            peer = ops[PEER_EXPORT].to_numpy(dtype=np.int64)
            ops = ops.assign(
                **{
                    EXPORT: index[ops[EXPORT].to_numpy(dtype=np.int64)],
                    PEER_EXPORT: np.where(peer >= 0, index[np.maximum(peer, 0)], -1),
                }
            )
        matches.append(replace(match, ops=ops))
        dropped += short
    return matches, dropped


def _merged_views(views: list[RanksView]) -> RanksView:
    """One ranks view of the run and the exports analysed apart: every process; the pace
    setter of the run (the first view)."""
    if len(views) == 1:
        return views[0]
    first = views[0]
    return RanksView(
        first.pace_setter_pid,
        [process for view in views for process in view.processes],
        sum(view.matched_instances for view in views),
        sum(view.unmatched_instances for view in views),
        pace_setter=first.pace_setter,
    )


def report_of(
    analysed: tuple[Trace, Analysis], top: int, ranks: RanksView, labels: dict[int, str]
) -> Report:
    """An export's report, with the ranks of the whole run (a task of its own)."""
    trace, analysis = analysed
    return build_report(trace, analysis, top=top, ranks=ranks, labels=labels)


def _raised(result: T | BaseException) -> T:
    if isinstance(result, BaseException):
        raise result
    return result


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


def _timelines_on_one_clock(reports: list[Report], offsets_ns: list[int]) -> list[Report]:
    """Each report's timelines with their starts from the first report's trace start, on the
    common clock: a rank that starts its step later is drawn right of the others."""
    origin = reports[0].export.trace_start_ns + offsets_ns[0]
    return [
        replace(
            report,
            timelines=[
                replace(
                    timeline,
                    start_offset_ns=timeline.start_offset_ns
                    + report.export.trace_start_ns
                    + offset
                    - origin,
                )
                for timeline in report.timelines
            ],
        )
        for report, offset in zip(reports, offsets_ns, strict=True)
    ]


def _labels(exports: list[tuple[Path, Analysis]]) -> list[dict[int, str]]:
    """Per export, pid -> "file:pid" for the pids that appear in more than one export."""
    seen: dict[int, int] = {}
    for _, analysis in exports:
        for pid in set(analysis.steps[PID].tolist()):
            seen[pid] = seen.get(pid, 0) + 1
    return [
        {pid: f"{path.name}:{pid}" for pid in set(analysis.steps[PID].tolist()) if seen[pid] > 1}
        for path, analysis in exports
    ]


def _alignment_notes(
    alignment: Alignment, paths: list[Path], offsets_ns: list[int], dropped: int
) -> list[NoteFacts]:
    """The run's alignment (with two exports of it or more), and the waits it drops."""
    if len(paths) < 2:
        return []
    residuals: dict[str, NoteNumber] = {}
    if alignment.residual_p50_ns is not None:
        residuals = {
            "residual_p50_ns": alignment.residual_p50_ns,
            "residual_p99_ns": alignment.residual_p99_ns or 0,
            "shared_instances": alignment.shared_instances,
        }
    if alignment.drift_ns_per_s is not None:
        residuals["drift_ns_per_s"] = alignment.drift_ns_per_s
    notes = [
        note_of(
            NoteCode.EXPORTS_ALIGNED,
            Severity.INFO,
            [Figures.WAITS],
            files=tuple(path.name for path in paths),
            offsets_ns=tuple(int(offset) for offset in offsets_ns),
            method=alignment.method,
            **residuals,
        )
    ]
    if dropped:
        notes.append(
            note_of(
                NoteCode.WAITS_WITHIN_CLOCK_ERROR, Severity.PARTIAL, [Figures.WAITS], waits=dropped
            )
        )
    return notes


def merge_reports(reports: list[Report], ranks: RanksView, notes: list[NoteFacts]) -> Report:
    """One Report: the first export's summary, every export's processes, notes and timelines."""
    first = reports[0]
    processes = [
        replace(process, export_file=report.export.file) if len(reports) > 1 else process
        for report in reports
        for process in report.processes
    ]
    merged_notes = [
        about_export(note, report.export.file) if len(reports) > 1 else note
        for report in reports
        for note in report.notes
    ]
    return replace(
        first,
        processes=processes,
        other_exports=[report.export for report in reports[1:]],
        notes=[write_note(facts) for facts in notes] + merged_notes,
        timelines=[t for report in reports for t in report.timelines],
        ranks=ranks,
        slowest_rank_by_stage=slowest_ranks(processes),
        unreliable=[flag for report in reports for flag in report.unreliable],
    )
