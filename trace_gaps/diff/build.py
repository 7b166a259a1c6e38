"""Diff: the comparison of two sides' Reports (schema and assembly); its noise is
analysis/bootstrap.py, and side_runner.py analyses the sides."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from trace_gaps import __version__
from trace_gaps.analysis.kinds import kind_label
from trace_gaps.diff.bootstrap import (
    CONFIDENCE_PCT,
    RESAMPLES,
    SEED,
    SideMeans,
    bootstrap_mean_difference,
    mean_difference_intervals,
    means_drawn,
)
from trace_gaps.diff.changes import (
    BucketChange,
    NsInterval,
    PctInterval,
    RunChange,
    Side,
    StageChange,
    WallChange,
    stage_side,
)
from trace_gaps.diff.drift import MachineSplit, ProcessSpeed, SideSpeeds, split_change
from trace_gaps.diff.repeats import RunSpread
from trace_gaps.errors import TraceGapsError
from trace_gaps.model import Bucket, CandidateStatus, Presence
from trace_gaps.records import ProcessReport, Report
from trace_gaps.report.diff_verdicts import write_diff_verdict

DIFF_SCHEMA_VERSION = 2  # 2: side.wall {mean_ns, ...}, was wall_ns {mean, ...}


# A change is beyond noise only when at least this share of the step and this long (the
# floor itself at most PRACTICAL_FLOOR_FRACTION of the step: a step of 12 µs is not held to 10).
PRACTICAL_FRACTION = 0.01
PRACTICAL_MIN_NS = 10_000
PRACTICAL_FLOOR_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class CandidateChange:
    """A (stage, busy|idle) ranked on either side and how it moved."""

    stage: str
    bucket: str
    status: str
    before_rank: int | None
    after_rank: int | None
    before_ns_per_step: int
    after_ns_per_step: int
    change_ns_per_step: int


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
    # The step change split into the machine's part and the code's (diff_drift.py); None
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
    # diff --repeats: the runs' step time less each run's machine part (diff_runs.py)
    code_runs: RunSpread | None = None


# Per pid, the bucket table of a process's analysed steps (step_bucket_tables).
StepBuckets = dict[int, pd.DataFrame]


@dataclass(frozen=True, slots=True)
class ComparedSide:
    """One side of a diff, as its statistics read it: the report; per pid, the bucket table
    of its analysed steps where made already (else made here from the report's step
    ledger); the bootstrap's resampled means where drawn already (else drawn here)."""

    report: Report
    step_buckets: StepBuckets = field(default_factory=dict)
    means: SideMeans | None = None
    speeds: SideSpeeds = field(default_factory=dict)  # per pid, where measured (diff_drift.py)


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
            speeds=(before_side.speeds.get(b.pid), after_side.speeds.get(a.pid)),
        )
        for b, a in pairs
    ]
    names = {d.before.step_name for d in diffs} | {d.after.step_name for d in diffs}
    if len(names) > 1:
        shown = ", ".join(n or "whole process" for n in sorted(names, key=str))
        notes.append(
            f"The two sides use different step ranges ({shown}): compare with --step NAME."
        )
    notes += [f"before: {note.text}" for note in before.notes] + [
        f"after: {note.text}" for note in after.notes
    ]
    run = _run_change(before, after, rng) if len(diffs) > 1 else None
    return Diff(processes=diffs, notes=notes, run=run)


def _run_change(before: Report, after: Report, rng: np.random.Generator) -> RunChange:
    """The slowest rank of each side and the change of its mean step wall time, with the
    bootstrap's noise over those two ranks' analysed steps (drawn after every pair's)."""
    sides = []
    for report in (before, after):
        slowest = max(report.processes, key=lambda p: (p.steps.wall.mean_ns, -p.pid))
        file = slowest.export_file or report.export.file
        sides.append((slowest, file, _analysed_walls(slowest, file).to_numpy()))
    (slow_before, file_before, walls_before), (slow_after, file_after, walls_after) = sides
    intervals, relative = _bootstrap(walls_before[:, None], walls_after[:, None], rng, None)
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
            is_beyond_noise=_beyond(intervals[0], change, mean_before) if intervals else None,
        ),
    )


def _like_kinds(before: Report, after: Report) -> tuple[Report, Report, list[str]]:
    """Each side's sections of one kind of step: the first kind's (decode where there is
    one; --kind picks another for both sides). Kinds are never compared across."""
    kinds = [r.processes[0].kind if r.processes else "" for r in (before, after)]
    if not any(kinds):
        return before, after, []
    sides = [
        replace(r, processes=[p for p in r.processes if p.kind == kind])
        for r, kind in zip((before, after), kinds, strict=True)
    ]
    shown = [kind_label(k) for k in kinds]
    note = (
        f"Steps come in kinds: compared are the {shown[0]} steps of each side; pass --kind "
        "to compare another kind."
        if kinds[0] == kinds[1]
        else f"The sides' first kinds differ (before: {shown[0]}, after: {shown[1]}): pass "
        "--kind to compare one kind on both sides."
    )
    return sides[0], sides[1], [note]


def pair_processes(
    before: Report, after: Report
) -> tuple[list[tuple[ProcessReport, ProcessReport]], list[str]]:
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
            f"Compared process by process: pids {_pids(by_pid_before)} on both sides."
        ]
    if len(before.processes) == len(after.processes):
        # Two runs of the same ranks (new pids each run): rank by rank, in the reports' order
        # (exports as given, sorted when a glob; pids within an export).
        pairs = list(zip(before.processes, after.processes, strict=True))
        shown = "; ".join(f"{_who(b)} → {_who(a)}" for b, a in pairs)
        return pairs, [
            f"Compared rank by rank, in the order of the exports and pids of each side: {shown}."
        ]
    first_before, first_after = by_pid_before[min(by_pid_before)], by_pid_after[min(by_pid_after)]
    note = (
        f"The processes differ (before: {_pids(by_pid_before)}; after: {_pids(by_pid_after)}): "
        "compared the lowest pid of each, "
        f"{first_before.pid} with {first_after.pid}. Choose with --process-before/--process-after."
    )
    return [(first_before, first_after)], [note]


def _who(process: ProcessReport) -> str:
    return f"{process.pid} ({process.export_file})" if process.export_file else str(process.pid)


def _pids(processes: dict[int, ProcessReport]) -> str:
    return ", ".join(map(str, sorted(processes)))


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
    walls = [_analysed_walls(p, f) for p, f in ((before, before_file), (after, after_file))]
    buckets_before, buckets_after = (
        _step_buckets(process, wall.index) if table is None else table
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
    intervals, relative = _bootstrap(values_before, values_after, rng, drawn)

    change = int(round(means_after[0] - means_before[0]))
    wall = WallChange(
        change_ns=change,
        change_pct=round(100 * change / means_before[0], 2) if means_before[0] else None,
        ci_ns=intervals[0] if intervals else None,
        ci_pct=relative,
        is_beyond_noise=_beyond(intervals[0], change, means_before[0]) if intervals else None,
    )
    stages_before = {s.name for s in before.stages} | set(
        buckets_before.columns.get_level_values(0)
    )
    stages_after = {s.name for s in after.stages} | set(buckets_after.columns.get_level_values(0))
    buckets = [
        BucketChange(
            stage=str(stage),
            bucket=str(bucket),
            presence=_presence(stage, stages_before, stages_after),
            before_ns_per_step=int(round(means_before[i + 1])),
            after_ns_per_step=int(round(means_after[i + 1])),
            change_ns_per_step=int(round(means_after[i + 1] - means_before[i + 1])),
            ci_ns=intervals[i + 1] if intervals else None,
            is_beyond_noise=_beyond(
                intervals[i + 1], means_after[i + 1] - means_before[i + 1], means_before[0]
            )
            if intervals
            else None,
        )
        for i, (stage, bucket) in enumerate(
            zip(columns.get_level_values(0), columns.get_level_values(1), strict=True)
        )
    ]
    buckets = sorted(
        (b for b in buckets if b.before_ns_per_step or b.after_ns_per_step),
        key=lambda b: (-abs(b.change_ns_per_step), b.stage, b.bucket),
    )
    stages = _stage_changes(before, after, buckets)
    sides = [_side(p, f) for p, f in ((before, before_file), (after, after_file))]
    return ProcessDiff(
        before=sides[0],
        after=sides[1],
        verdict=write_diff_verdict(wall, buckets, stages, confidence_pct=CONFIDENCE_PCT),
        wall=wall,
        buckets=buckets,
        stages=stages,
        candidates=_candidate_changes(before, after, buckets),
        drift=split_change(
            speeds[0], speeds[1], wall, means_before[0], practical_threshold_ns(means_before[0])
        )
        if speeds[0] is not None and speeds[1] is not None
        else None,
    )


def _analysed_walls(process: ProcessReport, file: str) -> pd.Series:
    rows = [r for r in process.step_rows if not r.is_warmup]
    if not rows:
        raise TraceGapsError(
            f"{file}: process {process.pid} has no analysed steps (all {len(process.step_rows)} "
            "are warm-up). Pass --skip 0 or a smaller --skip."
        )
    return pd.Series([r.wall_ns for r in rows], index=[r.step_id for r in rows], dtype="int64")


def step_bucket_tables(report: Report) -> StepBuckets:
    """Per process with analysed steps: ns per analysed step and (stage, bucket label), the
    table diff_processes compares (a diff's side makes it where it is analysed)."""
    first_kind = report.processes[0].kind if report.processes else ""
    return {
        process.pid: _step_buckets(process, _analysed_walls(process, report.export.file).index)
        for process in report.processes
        # Steps in kinds: the first kind's sections, the ones a diff compares (_like_kinds).
        if process.kind == first_kind and any(not row.is_warmup for row in process.step_rows)
    }


def _step_buckets(process: ProcessReport, step_ids: pd.Index) -> pd.DataFrame:
    """ns per analysed step (rows) and (stage, bucket label) (columns), zero where absent."""
    entries = pd.DataFrame(
        [(e.step_id, e.stage, e.bucket, e.cause or "", e.duration_ns) for e in process.step_ledger],
        columns=["step_id", "stage", "bucket", "cause", "duration_ns"],
    )
    return bucket_table(entries[entries["step_id"].isin(step_ids)], step_ids)


def bucket_table(entries: pd.DataFrame, step_ids: pd.Index) -> pd.DataFrame:
    """The table of _step_buckets from ledger rows (step_id, stage, bucket, cause: "" for
    none, duration_ns) of the steps step_ids, which give the table's rows in their order."""
    bucket, cause = entries["bucket"].astype(object), entries["cause"].astype(object)
    # Its label: the bucket, and the cause after it where there is one ("idle sync").
    plain = (bucket == Bucket.BUSY.value) | (cause == "")
    entries = entries.assign(bucket=bucket.where(plain, bucket + " " + cause).astype("str"))
    table = entries.pivot_table(
        index="step_id",
        columns=["stage", "bucket"],
        values="duration_ns",
        aggfunc="sum",
        fill_value=0,
    )
    return table.reindex(index=step_ids, fill_value=0).astype("int64")


def _bootstrap(
    before: np.ndarray,
    after: np.ndarray,
    rng: np.random.Generator,
    drawn: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[list[NsInterval], PctInterval | None]:
    """The bootstrap's intervals in whole ns, and the relative one to 0.01 %, from the
    means drawn in the sides when given."""
    intervals = (
        bootstrap_mean_difference(before, after, rng)
        if drawn is None
        else mean_difference_intervals(*drawn)
    )
    if intervals is None:
        return [], None
    return [
        NsInterval(int(round(lo)), int(round(hi)))
        for lo, hi in zip(intervals.low, intervals.high, strict=True)
    ], PctInterval(round(intervals.relative_low_pct, 2), round(intervals.relative_high_pct, 2))


def _presence(stage: str, before: set[str], after: set[str]) -> str:
    if stage in before and stage in after:
        return Presence.BOTH
    return Presence.BEFORE_ONLY if stage in before else Presence.AFTER_ONLY


def _stage_changes(
    before: ProcessReport, after: ProcessReport, buckets: list[BucketChange]
) -> list[StageChange]:
    summaries = {
        "before": {s.name: s for s in before.stages},
        "after": {s.name: s for s in after.stages},
    }
    totals: dict[str, list[int]] = {}
    for b in buckets:
        total = totals.setdefault(b.stage, [0, 0])
        total[0] += b.before_ns_per_step
        total[1] += b.after_ns_per_step
    presence = {b.stage: b.presence for b in buckets}
    for stage in summaries["before"].keys() | summaries["after"].keys():
        totals.setdefault(stage, [0, 0])
        presence.setdefault(
            stage, _presence(stage, set(summaries["before"]), set(summaries["after"]))
        )
    changes = [
        StageChange(
            stage=stage,
            presence=presence[stage],
            before=None
            if presence[stage] == Presence.AFTER_ONLY
            else stage_side(summaries["before"].get(stage), ns[0]),
            after=None
            if presence[stage] == Presence.BEFORE_ONLY
            else stage_side(summaries["after"].get(stage), ns[1]),
            change_ns_per_step=ns[1] - ns[0],
        )
        for stage, ns in totals.items()
    ]
    return sorted(changes, key=lambda c: (-abs(c.change_ns_per_step), c.stage))


def _candidate_changes(
    before: ProcessReport, after: ProcessReport, buckets: list[BucketChange]
) -> list[CandidateChange]:
    ranks_before = {(c.stage, c.bucket): c.rank for c in before.candidates}
    ranks_after = {(c.stage, c.bucket): c.rank for c in after.candidates}
    totals: dict[tuple[str, str], list[int]] = {}
    # A candidate moved beyond noise when any of its buckets did (None: no noise estimate).
    noisy: dict[tuple[str, str], list[bool | None]] = {}
    for b in buckets:
        key = (b.stage, b.bucket.split()[0])
        total = totals.setdefault(key, [0, 0])
        total[0] += b.before_ns_per_step
        total[1] += b.after_ns_per_step
        noisy.setdefault(key, []).append(b.is_beyond_noise)
    changes = []
    for key in sorted(ranks_before.keys() | ranks_after.keys()):
        ns_before, ns_after = totals.get(key, [0, 0])
        if key not in ranks_after:
            status = CandidateStatus.VANISHED
        elif key not in ranks_before:
            status = CandidateStatus.APPEARED
        elif noisy.get(key) and all(flag is False for flag in noisy[key]):
            status = CandidateStatus.UNCHANGED
        else:
            status = {
                1: CandidateStatus.GREW,
                -1: CandidateStatus.SHRANK,
                0: CandidateStatus.UNCHANGED,
            }[int(np.sign(ns_after - ns_before))]
        changes.append(
            CandidateChange(
                key[0],
                key[1],
                status,
                ranks_before.get(key),
                ranks_after.get(key),
                ns_before,
                ns_after,
                ns_after - ns_before,
            )
        )
    return sorted(changes, key=lambda c: (-abs(c.change_ns_per_step), c.stage, c.bucket))


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


def practical_threshold_ns(step_ns: float) -> float:
    """The smallest change called beyond noise: PRACTICAL_FRACTION of the step, at least
    PRACTICAL_MIN_NS unless that is over PRACTICAL_FLOOR_FRACTION of it (docs/diff.md)."""
    floor = min(PRACTICAL_MIN_NS, PRACTICAL_FLOOR_FRACTION * step_ns)
    return max(PRACTICAL_FRACTION * step_ns, floor)


def _beyond(interval: NsInterval, change_ns: float, step_ns: float) -> bool:
    """Beyond noise: the bootstrap interval excludes zero and the change is at least the
    practical threshold (a change of 0.3 % of the step is not worth a red line)."""
    return bool(interval.excludes_zero and abs(change_ns) >= practical_threshold_ns(step_ns))


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
        if not _grew(run.wall, pct):
            return None
        return (
            f"the run's step time (its slowest rank: before process {run.before.pid} in "
            f"{run.before.file}, after process {run.after.pid} in {run.after.file})"
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
