"""Diff: the comparison of two sides' Reports (schema and assembly). Its noise is
diff/bootstrap.py and noise.py, its per-step tables step_tables.py, how stages and
candidates moved moves.py, its notes' words report/diff_notes.py; side_runner.py analyses
the sides."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from trace_gaps import __version__
from trace_gaps.diff.bootstrap import CONFIDENCE_PCT, RESAMPLES, SEED, SideMeans, means_drawn
from trace_gaps.diff.changes import BucketChange, RunChange, Side, StageChange, WallChange
from trace_gaps.diff.drift import (
    MachineSplit,
    ProcessSpeed,
    SideSpeeds,
    code_change,
    own_pace_ns,
    run_machine_ns,
    speed_of,
    split_change,
)
from trace_gaps.diff.moves import CandidateChange, bucket_changes, candidate_changes, stage_changes
from trace_gaps.diff.noise import bootstrap_intervals, is_beyond, practical_threshold_ns
from trace_gaps.diff.notes import DiffNote, DiffNoteCode, write_diff_note
from trace_gaps.diff.repeats import RunSpread
from trace_gaps.diff.step_tables import StepBuckets, analysed_walls, process_buckets
from trace_gaps.diff.verdicts import write_diff_verdict
from trace_gaps.errors import TraceGapsError
from trace_gaps.records.report import ProcessReport, Report

DIFF_SCHEMA_VERSION = 2  # 2: side.wall {mean_ns, ...}, was wall_ns {mean, ...}


@dataclass(frozen=True, slots=True)
class ProcessDiff:
    """One pair of processes compared."""

    before: Side
    after: Side
    verdict: str
    wall: WallChange
    buckets: list[BucketChange]
    stages: list[StageChange]
    candidates: list[CandidateChange]
    # The step change split into the machine's part and the code's (drift.py); None
    # where a side's speed was not measured (several exports a side, no replayed step).
    drift: MachineSplit | None = None


@dataclass(frozen=True, slots=True)
class Diff:
    """The comparison of two reports, ready to render."""

    processes: list[ProcessDiff]
    notes: list[str]
    confidence_pct: int = CONFIDENCE_PCT
    resamples: int = RESAMPLES
    seed: int = SEED
    schema_version: int = field(default=DIFF_SCHEMA_VERSION)
    tool_version: str = field(default=__version__)  # the trace-gaps that wrote it
    runs: RunSpread | None = None  # diff --repeats: the step time over repeated captures
    run: RunChange | None = None  # with several pairs of processes (ranks) compared
    # diff --repeats: the runs' step time less each run's machine part (runs.py)
    code_runs: RunSpread | None = None


@dataclass(frozen=True, slots=True)
class ComparedSide:
    """One side of a diff, as its statistics read it: the report; per pid, the bucket table
    of its analysed steps where made already (else made here from the report's step
    ledger); the bootstrap's resampled means where drawn already (else drawn here)."""

    report: Report
    step_buckets: StepBuckets = field(default_factory=dict)
    means: SideMeans | None = None
    speeds: SideSpeeds = field(default_factory=dict)  # per process, where measured (drift.py)


def diff_reports(before: Report, after: Report) -> Diff:
    """Pair the processes of two reports and compare each pair."""
    return diff_sides(ComparedSide(before), ComparedSide(after))


def diff_sides(before_side: ComparedSide, after_side: ComparedSide) -> Diff:
    """Pair the processes of the two sides' reports and compare each pair; a side's means
    are used where they are the ones drawn here (one process a side)."""
    before, after, notes = _like_kinds(before_side.report, after_side.report)
    pairs, pair_notes = pair_processes(before, after)
    notes += pair_notes
    one_pair = len(before.processes) == len(after.processes) == 1
    rng = np.random.default_rng(SEED)
    diffs = [
        diff_processes(
            b,
            a,
            before_file=b.export_file or before.export.file,
            after_file=a.export_file or after.export.file,
            rng=rng,
            step_buckets=(before_side.step_buckets.get(b.pid), after_side.step_buckets.get(a.pid)),
            side_means=(before_side.means, after_side.means) if one_pair else (None, None),
            speeds=(speed_of(before_side.speeds, b), speed_of(after_side.speeds, a)),
        )
        for b, a in pairs
    ]
    names = {d.before.step_name for d in diffs} | {d.after.step_name for d in diffs}
    if len(names) > 1:
        shown = [name or "" for name in sorted(names, key=str)]
        notes.append(DiffNote(DiffNoteCode.STEP_RANGES_DIFFER, {"names": shown}))
    notes += [
        DiffNote(DiffNoteCode.SIDE_NOTE, {"side": side, "text": note.text})
        for side, report in (("before", before), ("after", after))
        for note in report.notes
    ]
    run = _run_change(before, after, rng) if len(diffs) > 1 else None
    if run is not None:
        run = _run_split(run, diffs, [speed_of(before_side.speeds, b) for b, _ in pairs])
    return Diff(processes=diffs, notes=[write_diff_note(note) for note in notes], run=run)


def _run_change(before: Report, after: Report, rng: np.random.Generator) -> RunChange:
    """The slowest rank of each side and the change of its mean step wall time, with the
    bootstrap's noise over those two ranks' analysed steps (drawn after every pair's)."""
    sides = []
    for report in (before, after):
        slowest = max(report.processes, key=lambda p: (p.steps.wall.mean_ns, -p.pid))
        file = slowest.export_file or report.export.file
        sides.append((slowest, file, analysed_walls(slowest, file).to_numpy()))
    (slow_before, file_before, walls_before), (slow_after, file_after, walls_after) = sides
    intervals, relative = bootstrap_intervals(
        walls_before[:, None], walls_after[:, None], rng, None
    )
    change = int(round(walls_after.mean() - walls_before.mean()))
    mean_before = walls_before.mean()
    return RunChange(
        before=_side(slow_before, file_before),
        after=_side(slow_after, file_after),
        wall=WallChange(
            change_ns=change,
            change_pct=round(100 * change / mean_before, 2) if mean_before else None,
            ci_ns=intervals[0] if intervals else None,
            ci_pct=relative,
            is_beyond_noise=is_beyond(intervals[0], change, mean_before) if intervals else None,
        ),
    )


def _run_split(
    run: RunChange, diffs: list[ProcessDiff], befores: list[ProcessSpeed | None]
) -> RunChange:
    """The run's step change split into the machine's part (drift.run_machine_ns: the
    slowest rank's own pace at the after's speeds) and the code's, where every pair of
    ranks had its speeds measured."""
    paces = [
        own_pace_ns(before, d.drift.host, d.drift.gpu)
        for d, before in zip(diffs, befores, strict=True)
        if d.drift is not None and before is not None and before.models
    ]
    if len(paces) < len(diffs) or not all(scaled for _, scaled in paces):
        return run
    machine = run_machine_ns(paces)
    before_mean = run.before.wall.mean_ns
    code = code_change(run.wall, machine, before_mean, practical_threshold_ns(before_mean))
    return replace(run, machine_ns=machine, code=code)


def _like_kinds(before: Report, after: Report) -> tuple[Report, Report, list[DiffNote]]:
    """Each side's sections of one kind of step: the first kind's (decode where there is
    one; --kind picks another for both sides). Kinds are never compared across."""
    kinds = [r.processes[0].kind if r.processes else "" for r in (before, after)]
    if not any(kinds):
        return before, after, []
    sides = [
        replace(r, processes=[p for p in r.processes if p.kind == kind])
        for r, kind in zip((before, after), kinds, strict=True)
    ]
    note = (
        DiffNote(DiffNoteCode.SAME_KIND, {"kind": kinds[0]})
        if kinds[0] == kinds[1]
        else DiffNote(DiffNoteCode.KINDS_DIFFER, {"before": kinds[0], "after": kinds[1]})
    )
    return sides[0], sides[1], [note]


def pair_processes(
    before: Report, after: Report
) -> tuple[list[tuple[ProcessReport, ProcessReport]], list[DiffNote]]:
    """Match processes by pid when both sides have the same pids, else the lowest pid of each."""
    for side, report in (("before", before), ("after", after)):
        if not report.processes:
            raise TraceGapsError(
                f"{report.export.file} ({side}) has no process with steps to compare."
            )
    by_pid_before = {p.pid: p for p in before.processes}
    by_pid_after = {p.pid: p for p in after.processes}
    if len(before.processes) == len(after.processes) == 1:
        return [(before.processes[0], after.processes[0])], []
    if by_pid_before.keys() == by_pid_after.keys():
        return [(by_pid_before[pid], by_pid_after[pid]) for pid in sorted(by_pid_before)], [
            DiffNote(DiffNoteCode.BY_PID, {"pids": _pids(by_pid_before)})
        ]
    if len(before.processes) == len(after.processes):
        # Two runs of the same ranks (new pids each run): rank by rank, in the reports' order
        # (exports as given, sorted when a glob; pids within an export).
        pairs = list(zip(before.processes, after.processes, strict=True))
        shown = {"before": [_who(b) for b, _ in pairs], "after": [_who(a) for _, a in pairs]}
        return pairs, [DiffNote(DiffNoteCode.RANK_BY_RANK, dict(shown))]
    first_before, first_after = by_pid_before[min(by_pid_before)], by_pid_after[min(by_pid_after)]
    note = DiffNote(
        DiffNoteCode.PROCESSES_DIFFER,
        {
            "before": _pids(by_pid_before),
            "after": _pids(by_pid_after),
            "compared_before": str(first_before.pid),
            "compared_after": str(first_after.pid),
        },
    )
    return [(first_before, first_after)], [note]


def _who(process: ProcessReport) -> str:
    return f"{process.pid} ({process.export_file})" if process.export_file else str(process.pid)


def _pids(processes: dict[int, ProcessReport]) -> list[str]:
    return [str(pid) for pid in sorted(processes)]


def diff_processes(
    before: ProcessReport,
    after: ProcessReport,
    *,
    before_file: str,
    after_file: str,
    rng: np.random.Generator,
    step_buckets: tuple[pd.DataFrame | None, pd.DataFrame | None] = (None, None),
    side_means: tuple[SideMeans | None, SideMeans | None] = (None, None),
    speeds: tuple[ProcessSpeed | None, ProcessSpeed | None] = (None, None),
) -> ProcessDiff:
    """Compare one process with another: step time, buckets, stages, candidates.
    step_buckets: the two processes' tables of step_bucket_tables, where made already.
    side_means: the two processes' resampled means, where drawn already (the first draws
    from rng, as diff_sides passes them: rng is then not drawn from).
    speeds: the two processes' speed figures, where measured: the change is then split
    into the machine's part and the code's."""
    walls = [analysed_walls(p, f) for p, f in ((before, before_file), (after, after_file))]
    buckets_before, buckets_after = (
        process_buckets(process, wall.index) if table is None else table
        for process, wall, table in zip((before, after), walls, step_buckets, strict=True)
    )
    columns = buckets_before.columns.union(buckets_after.columns, sort=False)
    # One bootstrap draw for every column at once: wall time first, then each bucket.
    values_before = np.column_stack(
        [walls[0].to_numpy(), buckets_before.reindex(columns=columns, fill_value=0)]
    )
    values_after = np.column_stack(
        [walls[1].to_numpy(), buckets_after.reindex(columns=columns, fill_value=0)]
    )
    means_before, means_after = values_before.mean(axis=0), values_after.mean(axis=0)
    drawn = means_drawn(side_means, len(walls[0]), len(walls[1]), columns)
    intervals, relative = bootstrap_intervals(values_before, values_after, rng, drawn)

    change = int(round(means_after[0] - means_before[0]))
    wall = WallChange(
        change_ns=change,
        change_pct=round(100 * change / means_before[0], 2) if means_before[0] else None,
        ci_ns=intervals[0] if intervals else None,
        ci_pct=relative,
        is_beyond_noise=is_beyond(intervals[0], change, means_before[0]) if intervals else None,
    )
    stages_before = {s.name for s in before.stages} | set(
        buckets_before.columns.get_level_values(0)
    )
    stages_after = {s.name for s in after.stages} | set(buckets_after.columns.get_level_values(0))
    buckets = bucket_changes(
        columns, (means_before, means_after), intervals, (stages_before, stages_after)
    )
    stages = stage_changes(before, after, buckets)
    sides = [_side(p, f) for p, f in ((before, before_file), (after, after_file))]
    return ProcessDiff(
        before=sides[0],
        after=sides[1],
        verdict=write_diff_verdict(wall, buckets, stages, confidence_pct=CONFIDENCE_PCT),
        wall=wall,
        buckets=buckets,
        stages=stages,
        candidates=candidate_changes(before, after, buckets),
        drift=split_change(
            speeds[0], speeds[1], wall, means_before[0], practical_threshold_ns(means_before[0])
        )
        if speeds[0] is not None and speeds[1] is not None
        else None,
    )


def _side(process: ProcessReport, file: str) -> Side:
    return Side(
        file=file,
        pid=process.pid,
        process_name=process.name,
        step_name=process.steps.name,
        steps_analysed=process.steps.steps_analysed,
        steps_skipped=process.steps.steps_skipped,
        wall=process.steps.wall,
    )


def is_slower_than(diff: Diff, pct: float) -> bool:
    """Whether the step time grew by more than pct percent beyond the noise: the run's (its
    slowest rank's) when several ranks are compared, else any pair's: its code's part
    where the sides' speeds were measured (the machine's drift taken out).

    Beyond the noise: the CI's lower bound of the relative change exceeds pct. Without a
    noise estimate (fewer than 2 steps on a side) the point estimate is used.
    """
    if diff.runs is not None:  # repeated captures: the run-to-run interval decides
        # the code's part where each run's machine part was measured
        runs = diff.code_runs if diff.code_runs is not None else diff.runs
        low = runs.ci_pct.low_pct if runs.ci_pct is not None else None
        return bool(runs.is_beyond_noise) and low is not None and low > pct
    return slower_than(diff, pct) is not None


def slower_than(diff: Diff, pct: float) -> str | None:
    """Which step time grew by more than pct percent beyond the noise, in words, or None."""
    if diff.run is not None:
        run = diff.run
        if not _grew(run.code if run.code is not None else run.wall, pct):
            return None
        part = "the code's part of " if run.code is not None else ""
        return (
            f"{part}the run's step time (its slowest rank: before process {run.before.pid} in "
            f"{run.before.file}, after process {run.after.pid} in {run.after.file}"
            + ("; the machine's drift taken out)" if run.code is not None else ")")
        )
    for process in diff.processes:
        if process.drift is not None and _grew(process.drift.code, pct):
            return (
                f"the code's part of the step time of process {process.after.pid} in "
                f"{process.after.file} (the machine's drift taken out)"
            )
        if process.drift is None and _grew(process.wall, pct):
            return f"the step time of process {process.after.pid} in {process.after.file}"
    return None


def _grew(wall: WallChange, pct: float) -> bool:
    low = wall.ci_pct.low_pct if wall.ci_pct is not None else wall.change_pct
    return low is not None and low > pct
