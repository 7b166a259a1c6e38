"""One process's summary of an Analysis: its frames, stage table, ledger means, step rows,
long-gap findings, graph facts and ranked candidates, as the records the Report is made of."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

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
    Metric,
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
from trace_gaps.analysis.replay.whatif import choose_lever
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import IS_WARMUP, SKIP_REASON, STEP_ID, STEP_INDEX, StepSelection
from trace_gaps.figures import (
    StageGpuInputs,
    StageInputs,
    StageSummary,
    StepValue,
    Total,
    per_step,
    summarise_stage,
)
from trace_gaps.model import (
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    Bucket,
    ExportLack,
    OpKind,
    Trace,
    VerdictKind,
)
from trace_gaps.records import (
    CallShare,
    Candidate,
    Evidence,
    GapEvidence,
    GraphFacts,
    KernelShare,
    LedgerEntry,
    LongGapFinding,
    RankSummary,
    StepLedgerEntry,
    StepRow,
    StepSummary,
    WallStats,
)
from trace_gaps.report.candidates import (
    host_ns_per_launch,
    idle_split,
    rank_candidates,
    round_per_step,
)
from trace_gaps.report.findings import Finding, Judgement, StageFacts, judge


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


def summarise_steps(frames: ProcessFrames, selection: StepSelection) -> StepSummary:
    """Which range is the step, how many steps were analysed and skipped, and their wall time."""
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
    )


def busy_ns_per_step(frames: ProcessFrames) -> int:
    """GPU-busy ns per analysed step, every stage's."""
    return int(frames.means.loc[frames.means[BUCKET] == Bucket.BUSY.value, "ns_per_step"].sum())


def ledger_entries(frames: ProcessFrames) -> list[LedgerEntry]:
    """The mean ledger of the analysed steps, largest first."""
    return [
        LedgerEntry(str(stage), str(bucket), str(cause) or None, int(ns))
        for stage, bucket, cause, ns in _rows(
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
        for step_id, stage, bucket, cause, ns in _rows(
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


def assemble_candidates(
    frames: ProcessFrames,
    stages: list[StageSummary],
    findings: list[LongGapFinding],
    graphs: GraphFacts,
    shared_with: tuple[int, ...],
    n: int,
    trace_start: int,
    *,
    top: int,
    waits: RankSummary | None = None,
    saving: Callable[[str, str], tuple[int, int] | None] | None = None,
) -> list[Finding]:
    """Rank the (stage, bucket) candidates and give each its evidence and judgement (its
    kind and the time its cause explains); write_candidate puts it in words.

    saving(stage, lever) -> (predicted step ns, saving ns) or None (whatif.py): each
    candidate gets the lever that fits its kind and what pulling it saves; they are then
    ranked by that saving (ties: by the time explained), and the first `top` kept. Not for
    a process whose missing peers decide its levers (UnsplitCollectives.peers_decide_levers).
    """
    if waits is not None and waits.unsplit is not None and waits.unsplit.peers_decide_levers:
        # This process waits for ranks whose exports are missing: a lever that makes it
        # faster saves the run only what they let it (docs/what-if.md, "One rank's export
        # alone"), so the candidates are ranked by the time they explain.
        saving = None
    by_name = {stage.name: stage for stage in stages}
    step_index = frames.steps.set_index(STEP_ID)[STEP_INDEX]
    wall_mean = (
        int(round((frames.analysed[END_NS] - frames.analysed[START_NS]).sum() / n)) if n else 0
    )
    judged = []
    ranked = rank_candidates(frames.means, wall_mean_ns=wall_mean)
    if saving is None:
        ranked = ranked.head(top)
    for rank, stage, bucket, ns_per_step, share in _rows(
        ranked, "rank", "stage", BUCKET, "ns_per_step", "share"
    ):
        is_idle = bucket == Bucket.IDLE.value
        summary = by_name.get(stage)
        split = idle_split(frames.means, stage)
        launches = sum(summary.launches_per_step.values()) if summary else 0.0
        long_idle = summary.long_gap_idle_ns_per_step if summary and is_idle else 0
        gaps = (
            frames.gaps[frames.gaps["stage"] == stage].nlargest(3, "duration")
            if is_idle
            else frames.gaps.iloc[:0]
        )
        evidence = Evidence(
            idle_by_cause_ns_per_step=split if is_idle else {},
            launches_per_step=round(launches, 2),
            syncs_per_step=summary.syncs_per_step if summary else 0.0,
            host_ns_per_launch=host_ns_per_launch(split, launches, long_idle) if is_idle else None,
            top_kernels=[
                KernelShare(
                    str(name), int(round(total / n)), round(count / n, 2), int(round(wait / n))
                )
                for name, total, count, wait in _rows(
                    frames.kernels[frames.kernels["stage"] == stage],
                    NAME,
                    "total_ns",
                    "count",
                    "wait_ns",
                )
            ],
            top_api_calls=[
                CallShare(str(name), int(round(total / n)), round(count / n, 2))
                for name, total, count in _rows(
                    frames.api_calls[frames.api_calls["stage"] == stage].head(3),
                    NAME,
                    "total",
                    "count",
                )
            ],
            longest_gaps=[
                GapEvidence(
                    int(step_index[step_id]), int(start - trace_start), int(duration), str(cause)
                )
                for step_id, start, duration, cause in _rows(
                    gaps, STEP_ID, START_NS, "duration", CAUSE
                )
            ],
            unexpected_calls_per_step=summary.unexpected_calls_per_step if summary else {},
            host_blocked_in=[
                CallShare(str(name), int(round(total / n)), round(count / n, 2))
                for name, total, count in _rows(
                    frames.blocked[frames.blocked["stage"] == stage].head(3), NAME, "total", "count"
                )
            ]
            if is_idle
            else [],
            long_host_gaps=[f for f in findings if f.stage == stage][:3] if is_idle else [],
            long_gap_idle_ns_per_step=long_idle,
        )
        captured_here = tuple(
            " > ".join(c.nvtx_path) + (f", {c.node_count} nodes" if c.node_count else "")
            for c in graphs.captures
            if c.stage == stage
        )
        facts = _stage_facts(summary, captured_here, shared_with)
        unsplit_ns = _unsplit_collective_ns(evidence, waits) if bucket == Bucket.BUSY.value else 0
        judgement = (
            Judgement(VerdictKind.WAITING_FOR_PEER, int(ns_per_step))
            if bucket == Bucket.WAIT.value
            else Judgement(VerdictKind.COLLECTIVE_UNSPLIT, min(unsplit_ns, int(ns_per_step)))
            if waits is not None
            and waits.unsplit is not None
            and unsplit_ns >= UNSPLIT_SHARE_OF_STEP * wall_mean
            else judge(bucket, int(ns_per_step), evidence, facts)
        )
        candidate = Candidate(
            rank=int(rank),
            stage=stage,
            bucket=bucket,
            ns_per_step=int(ns_per_step),
            share_fraction=round(float(share), 4),
            kind=judgement.kind.value,
            lever_ns_per_step=judgement.lever_ns_per_step,
            why="",
            verdict="",
            evidence=evidence,
            explained_rank=int(rank),
        )
        judged.append(Finding(candidate, judgement, facts, unsplit_ns))
    if saving is None:
        return judged
    return rank_by_saving(judged, by_name, saving, top)


def rank_by_saving(
    findings: list[Finding],
    by_name: dict[str, StageSummary],
    saving: Callable[[str, str], tuple[int, int] | None],
    top: int,
) -> list[Finding]:
    """Each candidate with its lever's predicted step and saving, ranked by the saving."""
    priced = []
    for finding in findings:
        candidate = finding.candidate
        summary = by_name.get(candidate.stage)
        launches = summary.eager_launches_per_step if summary else 0.0
        mode = summary.execution if summary else ""
        lever, found = choose_lever(
            candidate.stage, candidate.kind, candidate.bucket, launches, mode, saving
        )
        predicted, saved = found if found is not None else (None, None)
        priced.append(
            replace(
                finding,
                candidate=replace(
                    candidate, lever=lever, predicted_step_ns=predicted, saving_ns=saved
                ),
            )
        )
    priced.sort(key=lambda f: (-(f.candidate.saving_ns or 0), f.candidate.explained_rank))
    kept = priced[:top]
    # The candidate that explains most time stays listed (last, if its lever saves little).
    first = next((f for f in priced if f.candidate.explained_rank == 1), None)
    if first is not None and first not in kept and kept:
        kept[-1] = first
    return [replace(f, candidate=replace(f.candidate, rank=i)) for i, f in enumerate(kept, start=1)]


def _unsplit_collective_ns(evidence: Evidence, waits: RankSummary | None) -> int:
    """A busy candidate's time per step in collective kernels no peer's export splits."""
    if waits is None or waits.unsplit is None:
        return 0
    names = set(waits.unsplit.names)
    return sum(kernel.ns_per_step for kernel in evidence.top_kernels if kernel.name in names)


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
        for step_id, tid, index, start, end, is_warmup, reason, busy, idle, wait in _rows(
            steps, *columns, *buckets
        )
    ]


def _rows(frame: pd.DataFrame, *columns: str) -> Iterator[tuple[Any, ...]]:
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
    for row in _rows(groups, *columns):
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


def sharing_gpus(analysis: Analysis, pid: int) -> tuple[int, ...]:
    """Other processes that ran ops on the GPUs this process used."""
    ops = analysis.device_ops
    devices = ops.loc[ops[PID] == pid, DEVICE_ID].unique()
    others = ops.loc[ops[DEVICE_ID].isin(devices) & (ops[PID] != pid), PID].unique()
    return tuple(sorted(int(other) for other in others))


def _stage_facts(
    summary: StageSummary | None, captured_here: tuple[str, ...], shared_with: tuple[int, ...]
) -> StageFacts:
    return StageFacts(summary or _EMPTY_STAGE, captured_here, shared_with)


# A stage with no launch, no call and no time: what a candidate without a stage summary has.
_EMPTY_STAGE = summarise_stage(
    StageInputs(
        name="",
        steps=0,
        totals=dict.fromkeys(Total, 0),
        busy_ns_per_step=0,
        idle_ns_per_step=0,
        launch_spacing_ns=None,
        long_gap_threshold_ns=LONG_GAP_MIN_NS,
        even_gap_fraction=None,
        long_gaps=0,
        long_gap_idle_ns=0,
        step_values=dict.fromkeys(StepValue, ()),
    )
)
