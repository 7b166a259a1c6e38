"""One process's summary of an Analysis: its frames, stage table, ledger means, step rows,
long-gap findings and graph facts, as the records the Report is made of (its candidates are
ranked and judged in report/candidates.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.metric import Metric
from trace_gaps.analysis.engine.metrics import (
    API_CALL_TOTALS,
    BLOCKED_HOST,
    GPU_METRICS,
    GRAPH_SETUP_CALLS,
    HOST_GAPS,
    LAUNCH_SPACING,
    LEDGER,
    LONGEST_GAPS,
    STAGE_STATS,
    STAGE_STEP_VALUES,
    TOP_KERNELS,
)
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.gpu_metrics import gpu_inputs_of, stage_gpu_inputs
from trace_gaps.analysis.graphs import describe_captures, find_captures
from trace_gaps.analysis.ledger import BUCKET, CAUSE, DURATION_NS
from trace_gaps.analysis.long_gaps import (
    CALL_AFTER,
    CALL_BEFORE,
    EVEN_FRACTION,
    IDLE_HOST_NS,
    LONG_GAP_MIN_NS,
    OS_CALLS,
    group_long_gaps,
    select_long_gaps,
    spacing_thresholds,
)
from trace_gaps.analysis.ranges import open_range_path
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.step_choice import StepSelection
from trace_gaps.analysis.steps import IS_WARMUP, SKIP_REASON, STEP_ID, STEP_INDEX
from trace_gaps.figures.inputs import StageGpuInputs, StageInputs, per_step
from trace_gaps.figures.stage import StageSummary, StepValue, summarise_stage
from trace_gaps.model import (
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    ExportLack,
    OpKind,
    Trace,
)
from trace_gaps.records.report import (
    GraphFacts,
    LedgerEntry,
    LongGapFinding,
    StepLedgerEntry,
    StepRow,
    StepSummary,
    WallStats,
)
from trace_gaps.vocabulary import Bucket


def round_per_step(totals: pd.Series, steps: int) -> pd.Series:
    """Divide totals by the step count into integers that sum to round(sum / steps).

    Largest-remainder rounding, so that a ledger's per-step means add up to the mean
    step wall time exactly.
    """
    if steps == 0 or totals.empty:
        return totals.astype("int64") * 0
    exact = totals.to_numpy(dtype=np.float64) / steps
    floor = np.floor(exact).astype(np.int64)
    target = int(round(int(totals.sum()) / steps))
    short = target - int(floor.sum())
    order = np.argsort(-(exact - floor), kind="stable")
    floor[order[: max(short, 0)]] += 1
    return pd.Series(floor, index=totals.index)


@dataclass(frozen=True, slots=True)
class ProcessFrames:
    """One process's slices of the Analysis frames, with stage codes turned into names."""

    steps: pd.DataFrame
    analysed: pd.DataFrame
    ledger: pd.DataFrame  # every step's ledger rows, with a "stage" name column
    means: pd.DataFrame  # stage, bucket, cause, ns_per_step over analysed steps
    stats: pd.DataFrame  # summarise_stages rows indexed by stage name
    kernels: pd.DataFrame
    api_calls: (
        pd.DataFrame
    )  # non-launch, non-sync calls in analysed steps: stage, name, total, count
    gaps: pd.DataFrame
    blocked: pd.DataFrame  # stage, name, total, count: OS calls during idle host time
    thresholds: pd.DataFrame  # spacing_thresholds rows indexed by stage name
    long_gaps: pd.DataFrame  # select_long_gaps rows of analysed steps, with a "stage" name
    step_values: pd.DataFrame  # stage_step_values rows indexed by stage name
    gpu_metrics: dict[str, StageGpuInputs] | None = None  # per stage name; None: not captured

    @property
    def n(self) -> int:
        """How many steps were analysed."""
        return len(self.analysed)

    def walls(self) -> np.ndarray:
        """The analysed steps' wall times, ns."""
        return (self.analysed[END_NS] - self.analysed[START_NS]).to_numpy()


def summarise_stages(frames: ProcessFrames) -> list[StageSummary]:
    """Every stage of the process, by name: its launch economics and time per analysed step."""
    n = frames.n
    busy_idle = frames.means.groupby(["stage", BUCKET])["ns_per_step"].sum()
    long_by_stage = frames.long_gaps.groupby("stage").agg(
        count=(START_NS, "size"), idle=(IDLE_HOST_NS, "sum")
    )
    return [
        _stage_summary(stage, frames, busy_idle, long_by_stage, n)
        for stage in sorted(set(frames.means["stage"]) | set(frames.stats.index))
    ]


def summarise_steps(
    frames: ProcessFrames, selection: StepSelection, *, index_range: str | None = None
) -> StepSummary:
    """Which range is the step, how many steps were analysed and skipped, and their wall time.
    index_range: the --steps A:B the steps were restricted to, if any."""
    skipped = frames.steps[frames.steps[IS_WARMUP]]
    return StepSummary(
        name=selection.name,
        reason=selection.reason,
        steps_analysed=frames.n,
        steps_skipped=len(skipped),
        skip_reasons={
            str(k): int(v) for k, v in skipped[SKIP_REASON].value_counts().sort_index().items()
        },
        threads=int(frames.steps[GLOBAL_TID].nunique()),
        wall=_wall_stats(frames.walls()),
        index_range=index_range,
    )


def busy_ns_per_step(frames: ProcessFrames) -> int:
    """GPU-busy ns per analysed step, every stage's."""
    return int(frames.means.loc[frames.means[BUCKET] == Bucket.BUSY.value, "ns_per_step"].sum())


def ledger_entries(frames: ProcessFrames) -> list[LedgerEntry]:
    """The mean ledger of the analysed steps, largest first."""
    return [
        LedgerEntry(str(stage), str(bucket), str(cause) or None, int(ns))
        for stage, bucket, cause, ns in frame_rows(
            frames.means.sort_values(["ns_per_step", "stage"], ascending=[False, True]),
            "stage",
            BUCKET,
            CAUSE,
            "ns_per_step",
        )
    ]


def step_ledger_entries(frames: ProcessFrames) -> list[StepLedgerEntry]:
    """Every step's ledger rows, warm-up steps included."""
    return [
        StepLedgerEntry(int(step_id), str(stage), str(bucket), str(cause) or None, int(ns))
        for step_id, stage, bucket, cause, ns in frame_rows(
            frames.ledger, STEP_ID, "stage", BUCKET, CAUSE, DURATION_NS
        )
    ]


def process_frames(analysis: Analysis, pid: int) -> ProcessFrames:
    """Slice the Analysis frames to one process and name its stages."""
    names = np.array(analysis.stage_map.names, dtype=object)

    def named(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(stage=names[frame[STAGE].to_numpy()])

    steps = analysis.steps[analysis.steps[PID] == pid]
    analysed = steps[~steps[IS_WARMUP]]
    metrics = analysis.metrics

    def of_process(metric: Metric[Any, pd.DataFrame]) -> pd.DataFrame:
        frame = metrics[metric]
        return frame[frame[PID] == pid]

    ledger = metrics[LEDGER]
    ledger = named(ledger[ledger[STEP_ID].isin(steps[STEP_ID])])
    totals = (
        ledger[ledger[STEP_ID].isin(analysed[STEP_ID])]
        .groupby(["stage", BUCKET, CAUSE], sort=True)[DURATION_NS]
        .sum()
    )
    means = round_per_step(totals, len(analysed)).rename("ns_per_step").reset_index()
    stats = of_process(STAGE_STATS).set_index(STAGE)
    stats.index = names[stats.index.to_numpy()]
    # Calls behind "api" idle time: neither launches nor syncs.
    api_calls = named(of_process(API_CALL_TOTALS)).sort_values(
        ["stage", "total", NAME], ascending=[True, False, True]
    )
    gaps = named(of_process(LONGEST_GAPS))
    blocked = metrics[BLOCKED_HOST]
    blocked = named(blocked[blocked[STEP_ID].isin(analysed[STEP_ID])])
    blocked_totals = (
        blocked.groupby(["stage", NAME], observed=True)
        .agg(total=(DURATION_NS, "sum"), count=(DURATION_NS, "size"))
        .reset_index()
        .sort_values(["stage", "total", NAME], ascending=[True, False, True])
    )
    thresholds = spacing_thresholds(of_process(LAUNCH_SPACING))
    host_gaps = of_process(HOST_GAPS)
    explained = host_gaps[host_gaps[STEP_ID].isin(analysed[STEP_ID])]
    long_gaps = named(select_long_gaps(explained, thresholds))
    return ProcessFrames(
        thresholds=named(thresholds).set_index("stage"),
        long_gaps=long_gaps,
        steps=steps,
        analysed=analysed,
        ledger=ledger,
        means=means[means["ns_per_step"] > 0],
        stats=stats,
        kernels=named(of_process(TOP_KERNELS)),
        api_calls=api_calls,
        gaps=gaps,
        blocked=blocked_totals,
        step_values=named(of_process(STAGE_STEP_VALUES)).set_index("stage"),
        gpu_metrics=stage_gpu_inputs(metrics[GPU_METRICS], pid, names),
    )


# A busy candidate whose collective kernels (no peer's export to split them) take at least this
# share of the step is called collective time, not GPU work: it may be waiting for another rank.
UNSPLIT_SHARE_OF_STEP = 0.1


def step_rows(frames: ProcessFrames, trace_start: int) -> list[StepRow]:
    """Every step of the process (warm-up included) with its busy, idle and wait ns."""
    per_step = frames.ledger.groupby([STEP_ID, BUCKET])[DURATION_NS].sum().unstack(fill_value=0)
    buckets = [Bucket.BUSY.value, Bucket.IDLE.value, Bucket.WAIT.value]
    per_step = per_step.reindex(columns=buckets, fill_value=0)
    steps = frames.steps.join(per_step, on=STEP_ID).fillna(dict.fromkeys(buckets, 0))
    columns = (STEP_ID, GLOBAL_TID, STEP_INDEX, START_NS, END_NS, IS_WARMUP, SKIP_REASON)
    return [
        StepRow(
            step_id=int(step_id),
            thread=int(tid) & 0xFFFFFF,
            step_index=int(index),
            start_offset_ns=int(start - trace_start),
            wall_ns=int(end - start),
            is_warmup=bool(is_warmup),
            skip_reason=str(reason),
            busy_ns=int(busy),
            idle_ns=int(idle),
            wait_ns=int(wait),
        )
        for step_id, tid, index, start, end, is_warmup, reason, busy, idle, wait in frame_rows(
            steps, *columns, *buckets
        )
    ]


def frame_rows(frame: pd.DataFrame, *columns: str) -> Iterator[tuple[Any, ...]]:
    """The given columns of a frame, row by row, as plain Python values."""
    return zip(*(frame[column].tolist() for column in columns), strict=True)


def _wall_stats(wall: np.ndarray) -> WallStats:
    if len(wall) == 0:
        return WallStats(0, 0, 0, 0, 0)
    return WallStats(
        mean_ns=int(round(wall.sum() / len(wall))),
        p50_ns=int(np.percentile(wall, 50, method="nearest")),
        p90_ns=int(np.percentile(wall, 90, method="nearest")),
        max_ns=int(wall.max()),
        min_ns=int(wall.min()),
    )


def _stage_summary(
    stage: str,
    frames: ProcessFrames,
    busy_idle: pd.Series,
    long_by_stage: pd.DataFrame,
    n: int,
) -> StageSummary:
    stats = frames.stats
    values = (
        stats.loc[[stage]].to_numpy()[0].tolist()
        if stage in stats.index
        else [0] * len(stats.columns)
    )
    has_spacing = stage in frames.thresholds.index
    per_step_rows = frames.step_values
    rows = per_step_rows.loc[[stage]] if stage in per_step_rows.index else per_step_rows.iloc[:0]
    return summarise_stage(
        StageInputs(
            name=stage,
            steps=n,
            totals=dict(zip(map(str, stats.columns), map(int, values), strict=True)),
            busy_ns_per_step=int(busy_idle.get((stage, Bucket.BUSY.value), 0)),
            idle_ns_per_step=int(busy_idle.get((stage, Bucket.IDLE.value), 0)),
            launch_spacing_ns=int(frames.thresholds["spacing_ns"][stage]) if has_spacing else None,
            long_gap_threshold_ns=int(frames.thresholds["threshold_ns"][stage])
            if has_spacing
            else LONG_GAP_MIN_NS,
            even_gap_fraction=round(float(frames.thresholds[EVEN_FRACTION][stage]), 3)
            if has_spacing
            else None,
            long_gaps=int(long_by_stage["count"].get(stage, 0)) if len(long_by_stage) else 0,
            long_gap_idle_ns=int(long_by_stage["idle"].get(stage, 0)) if len(long_by_stage) else 0,
            step_values={value: tuple(rows[value].tolist()) for value in StepValue},
            gpu_metrics=gpu_inputs_of(frames.gpu_metrics, stage),
        )
    )


def long_gap_findings(
    long_gaps: pd.DataFrame, range_tree: pd.DataFrame, n: int
) -> list[LongGapFinding]:
    """The long host gaps grouped by pattern, per analysed step, largest first."""
    if long_gaps.empty or not n:
        return []
    groups = group_long_gaps(long_gaps)
    columns = (
        "stage",
        CALL_BEFORE,
        CALL_AFTER,
        OS_CALLS,
        "count",
        "total_ns",
        "idle_ns",
        "os_ns",
        "typical_ns",
        "longest_ns",
        "longest_tid",
        "longest_start_ns",
        "ends_in_code_load",
    )
    findings = []
    for row in frame_rows(groups, *columns):
        stage, before, after, os_calls, count, total, idle, os_ns = row[:8]
        typical, longest, tid, start, loads = row[8:]
        findings.append(
            LongGapFinding(
                stage=str(stage),
                call_before=str(before),
                call_after=str(after),
                os_calls=[name for name in str(os_calls).split(", ") if name],
                nvtx_path=open_range_path(range_tree, int(tid), int(start)),
                gaps_per_step=per_step(count, n),
                ns_per_step=int(round(total / n)),
                idle_ns_per_step=int(round(idle / n)),
                os_ns_per_step=int(round(os_ns / n)),
                typical_ns=int(round(typical)),
                longest_ns=int(longest),
                ends_in_code_load=bool(loads),
            )
        )
    return findings


def graph_facts(
    trace: Trace, analysis: Analysis, pid: int, stages: list[StageSummary], n: int
) -> GraphFacts:
    """The process's graph captures (with their stage), instantiations, events and replays."""
    captures = find_captures(analysis.metrics[GRAPH_SETUP_CALLS], pid)
    has_nodes = ExportLack.GRAPH_NODES not in trace.info.lacks
    described = describe_captures(
        captures,
        analysis.range_tree,
        trace.graph_nodes if has_nodes else None,
        {stage.name: stage.launches_per_step[OpKind.GRAPH] for stage in stages},
        trace_start_ns=analysis.trace_start_ns,
        stage_launches={stage.name: stage.eager_launches_per_step for stage in stages},
    )
    setup = analysis.metrics[GRAPH_SETUP_CALLS]
    setup = setup[setup[PID] == pid]
    events = trace.graph_events
    return GraphFacts(
        captures=described,
        instantiations=int(setup[NAME].astype(str).str.contains("GraphInstantiate").sum()),
        graph_events=int(events.loc[events[PID] == pid, "events"].sum()),
        replays_per_step=per_step(sum(s.launches_per_step[OpKind.GRAPH] * n for s in stages), n),
        unmatched_captures=sum(1 for capture in described if capture.stage is None),
    )
