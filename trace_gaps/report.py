"""Report: the one object every renderer and plot consumes, built from an Analysis."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from trace_gaps.analysis.integrity import integrity_notes
from trace_gaps.analysis.candidates import (
    CallShare,
    Candidate,
    Evidence,
    GapEvidence,
    KernelShare,
    StageFacts,
    host_ns_per_launch,
    idle_split,
    rank_candidates,
    round_per_step,
    write_verdict,
)
from trace_gaps.analysis.launches import ExecutionMode, calls_in_analysed_steps, execution_mode
from trace_gaps.analysis.ledger import BUCKET, CAUSE, DURATION_NS, Bucket
from trace_gaps.analysis.pipeline import Analysis
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import IS_WARMUP, SKIP_REASON, STEP_ID, STEP_INDEX
from trace_gaps.model import (
    CALL_CATEGORY,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    CallCategory,
    Trace,
)

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """Provenance of the export."""

    file: str
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    graph_trace_mode: str
    gpus: list[str]
    trace_start_ns: int  # report timestamps are offsets from this


@dataclass(frozen=True, slots=True)
class WallStats:
    """Step wall time over the analysed steps."""

    mean: int
    p50: int
    p90: int
    max: int
    min: int


@dataclass(frozen=True, slots=True)
class StepSummary:
    """Which range is the step, how many were analysed and skipped, and their wall time."""

    name: str | None
    reason: str
    analyzed: int
    skipped: int
    skip_reasons: dict[str, int]
    threads: int
    wall_ns: WallStats


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """Mean ns per analysed step charged to one (stage, bucket, cause)."""

    stage: str
    bucket: str
    cause: str | None
    ns_per_step: int


@dataclass(frozen=True, slots=True)
class StageSummary:
    """One stage's launch economics and time, per analysed step."""

    name: str
    execution: str
    busy_ns_per_step: int
    idle_ns_per_step: int
    launches_per_step: dict[str, float]
    launch_api_ns_per_step: int
    queue_ns_per_step: int
    queued_launches_per_step: float
    syncs_per_step: float
    sync_ns_per_step: int
    unexpected_calls_per_step: dict[str, float]
    unexpected_ns_per_step: int
    ops_per_graph_launch: float | None


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step (analysed or warm-up) and its ledger by stage and bucket."""

    step_id: int
    thread: int
    index: int
    start_offset_ns: int
    wall_ns: int
    is_warmup: bool
    skip_reason: str
    busy_ns: int
    idle_ns: int


@dataclass(frozen=True, slots=True)
class StepLedgerEntry:
    """ns of one step charged to one (stage, bucket, cause)."""

    step_id: int
    stage: str
    bucket: str
    cause: str | None
    duration_ns: int


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """Everything about one process (rank)."""

    pid: int
    name: str
    steps: StepSummary
    ledger: list[LedgerEntry]
    stages: list[StageSummary]
    candidates: list[Candidate]
    step_rows: list[StepRow]
    step_ledger: list[StepLedgerEntry]


@dataclass(frozen=True, slots=True)
class SlowestRank:
    """For a stage present in several processes, the one where it takes longest."""

    stage: str
    pid: int
    ns_per_step: int
    others_ns_per_step: dict[str, int]


@dataclass(frozen=True, slots=True)
class Report:
    """The analysis of one export, ready to render."""

    export: ExportSummary
    processes: list[ProcessReport]
    slowest_rank_by_stage: list[SlowestRank]
    notes: list[str]
    schema_version: int = field(default=SCHEMA_VERSION)


def build_report(trace: Trace, analysis: Analysis, *, top: int = 10) -> Report:
    """Turn an Analysis into per-process ledgers, stage tables, ranked candidates and notes."""
    trace_start = _trace_start(trace)
    processes = [
        _process_report(trace, analysis, int(pid), trace_start, top=top)
        for pid in sorted(analysis.steps[PID].unique())
    ]
    processes = [p for p in processes if p is not None]
    export = ExportSummary(
        file=trace.info.path.name,
        size_bytes=trace.info.size_bytes,
        nsys_version=trace.info.nsys_version,
        schema_version=trace.info.schema_version,
        graph_trace_mode=trace.info.graph_trace_mode.value,
        gpus=[f"{gpu.device_id}: {gpu.name}" for gpu in trace.info.gpus],
        trace_start_ns=trace_start,
    )
    return Report(
        export=export,
        processes=processes,
        slowest_rank_by_stage=_slowest_ranks(processes),
        notes=integrity_notes(trace, analysis),
    )


def _trace_start(trace: Trace) -> int:
    starts = [
        int(frame[START_NS].min())
        for frame in (trace.gpu_ops, trace.api_calls, trace.nvtx_ranges)
        if not frame.empty
    ]
    return min(starts) if starts else 0


def _process_report(
    trace: Trace, analysis: Analysis, pid: int, trace_start: int, *, top: int
) -> ProcessReport | None:
    names = np.array(analysis.stage_map.names, dtype=object)
    steps = analysis.steps[analysis.steps[PID] == pid]
    analysed = steps[~steps[IS_WARMUP]]
    n = len(analysed)
    ledger = analysis.ledger[analysis.ledger[STEP_ID].isin(steps[STEP_ID])]
    ledger = ledger.assign(stage=names[ledger[STAGE].to_numpy()])
    wall = (analysed[END_NS] - analysed[START_NS]).to_numpy()
    wall_mean = int(round(wall.sum() / n)) if n else 0

    totals = (
        ledger[ledger[STEP_ID].isin(analysed[STEP_ID])]
        .groupby(["stage", BUCKET, CAUSE], sort=True)[DURATION_NS]
        .sum()
    )
    means = round_per_step(totals, n).rename("ns_per_step").reset_index()
    means = means[means["ns_per_step"] > 0]
    ledger_entries = [
        LedgerEntry(str(r.stage), str(r.bucket), str(r.cause) or None, int(r.ns_per_step))
        for r in means.sort_values(["ns_per_step", "stage"], ascending=[False, True]).itertuples()
    ]

    stats = analysis.stage_stats[analysis.stage_stats[PID] == pid].set_index(STAGE)
    stats.index = names[stats.index.to_numpy()]
    captured_graph = bool(trace.info.graph_capture_events) or bool(
        (analysis.staged_calls[(analysis.staged_calls[PID] == pid)][CALL_CATEGORY] == CallCategory.GRAPH_SETUP.value).any()
    )
    stage_names = sorted(set(means["stage"]) | set(stats.index))
    busy_idle = means.groupby(["stage", BUCKET])["ns_per_step"].sum()
    stage_summaries = [
        _stage_summary(stage, stats, busy_idle, n) for stage in stage_names
    ]
    facts = {s.name: _stage_facts(s, captured_graph) for s in stage_summaries}

    kernels = analysis.top_kernels[analysis.top_kernels[PID] == pid]
    kernels = kernels.assign(stage=names[kernels[STAGE].to_numpy()])
    calls = calls_in_analysed_steps(analysis.staged_calls[analysis.staged_calls[PID] == pid], steps)
    # Calls behind "api" idle time: neither launches nor syncs.
    category = calls[CALL_CATEGORY].astype(str)
    calls = calls[~category.str.startswith("launch") & (category != CallCategory.SYNC.value)]
    api_totals = (
        calls.assign(stage=names[calls[STAGE].to_numpy()], duration=calls[END_NS] - calls[START_NS])
        .groupby(["stage", NAME], observed=True)
        .agg(total=("duration", "sum"), count=("duration", "size"))
        .reset_index()
        .sort_values(["stage", "total"], ascending=[True, False])
    )
    gaps = analysis.gaps[analysis.gaps[STEP_ID].isin(analysed[STEP_ID])]
    gaps = gaps.assign(stage=names[gaps[STAGE].to_numpy()], duration=gaps[END_NS] - gaps[START_NS])
    step_index = steps.set_index(STEP_ID)[STEP_INDEX]

    candidates = []
    ranked = rank_candidates(means, wall_mean_ns=wall_mean)
    for row in ranked.head(top).itertuples():
        stage, bucket = str(row.stage), str(row.bucket)
        split = idle_split(means, stage)
        summary = next(s for s in stage_summaries if s.name == stage) if stage in facts else None
        launches = sum(summary.launches_per_step.values()) if summary else 0.0
        stage_gaps = gaps[gaps["stage"] == stage].nlargest(3, "duration") if bucket == Bucket.IDLE.value else gaps.iloc[0:0]
        evidence = Evidence(
            idle_by_cause_ns_per_step=split if bucket == Bucket.IDLE.value else {},
            launches_per_step=round(launches, 2),
            syncs_per_step=summary.syncs_per_step if summary else 0.0,
            host_ns_per_launch=host_ns_per_launch(split, launches) if bucket == Bucket.IDLE.value else None,
            top_kernels=[
                KernelShare(str(k.name), int(round(k.total_ns / n)), round(k.count / n, 2))
                for k in kernels[kernels["stage"] == stage].itertuples()
            ] if n else [],
            top_api_calls=[
                CallShare(str(c.name), int(round(c.total / n)), round(c.count / n, 2))
                for c in api_totals[api_totals["stage"] == stage].head(3).itertuples()
            ] if n else [],
            longest_gaps=[
                GapEvidence(int(step_index[g.step_id]), int(g.start_ns - trace_start), int(g.duration), str(g.cause))
                for g in stage_gaps.itertuples()
            ],
            unexpected_calls_per_step=summary.unexpected_calls_per_step if summary else {},
        )
        stage_facts = facts.get(stage) or _stage_facts(None, captured_graph)
        candidates.append(
            Candidate(
                rank=int(row.rank),
                stage=stage,
                bucket=bucket,
                ns_per_step=int(row.ns_per_step),
                share=round(float(row.share), 4),
                verdict=write_verdict(stage, bucket, int(row.ns_per_step), evidence, stage_facts),
                evidence=evidence,
            )
        )

    per_step = ledger.groupby([STEP_ID, BUCKET])[DURATION_NS].sum().unstack(fill_value=0)
    step_rows = [
        StepRow(
            step_id=int(s.step_id),
            thread=int(s.global_tid) & 0xFFFFFF,
            index=int(s.index),
            start_offset_ns=int(s.start_ns - trace_start),
            wall_ns=int(s.end_ns - s.start_ns),
            is_warmup=bool(s.is_warmup),
            skip_reason=str(s.skip_reason),
            busy_ns=int(per_step[Bucket.BUSY.value].get(s.step_id, 0)) if Bucket.BUSY.value in per_step else 0,
            idle_ns=int(per_step[Bucket.IDLE.value].get(s.step_id, 0)) if Bucket.IDLE.value in per_step else 0,
        )
        for s in steps.itertuples()
    ]
    step_ledger = [
        StepLedgerEntry(int(r.step_id), str(r.stage), str(r.bucket), str(r.cause) or None, int(r.duration_ns))
        for r in ledger.itertuples()
    ]
    skipped = steps[steps[IS_WARMUP]]
    summary = StepSummary(
        name=analysis.selection.name,
        reason=analysis.selection.reason,
        analyzed=n,
        skipped=len(skipped),
        skip_reasons={str(k): int(v) for k, v in skipped[SKIP_REASON].value_counts().sort_index().items()},
        threads=int(steps[GLOBAL_TID].nunique()),
        wall_ns=_wall_stats(wall),
    )
    return ProcessReport(
        pid=pid,
        name=trace.processes.get(pid, ""),
        steps=summary,
        ledger=ledger_entries,
        stages=stage_summaries,
        candidates=candidates,
        step_rows=step_rows,
        step_ledger=step_ledger,
    )


def _wall_stats(wall: np.ndarray) -> WallStats:
    if len(wall) == 0:
        return WallStats(0, 0, 0, 0, 0)
    return WallStats(
        mean=int(round(wall.sum() / len(wall))),
        p50=int(np.percentile(wall, 50, method="nearest")),
        p90=int(np.percentile(wall, 90, method="nearest")),
        max=int(wall.max()),
        min=int(wall.min()),
    )


def _per_step(total: float, n: int) -> float:
    return round(float(total) / n, 2) if n else 0.0


def _stage_summary(stage: str, stats: pd.DataFrame, busy_idle: pd.Series, n: int) -> StageSummary:
    row = stats.loc[stage] if stage in stats.index else pd.Series(0, index=stats.columns)

    def count(column: str) -> int:
        return int(row.get(column, 0))

    graph_launches = count("graph_launches")
    return StageSummary(
        name=stage,
        execution=execution_mode(count("graph_ops"), count("eager_ops")).value,
        busy_ns_per_step=int(busy_idle.get((stage, Bucket.BUSY.value), 0)),
        idle_ns_per_step=int(busy_idle.get((stage, Bucket.IDLE.value), 0)),
        launches_per_step={
            "kernel": _per_step(count("kernel_launches"), n),
            "graph": _per_step(graph_launches, n),
            "memcpy": _per_step(count("memcpy_launches"), n),
            "memset": _per_step(count("memset_launches"), n),
        },
        launch_api_ns_per_step=int(round(_per_step(count("launch_api_ns"), n))),
        queue_ns_per_step=int(round(_per_step(count("queue_ns"), n))),
        queued_launches_per_step=_per_step(count("queued_launches"), n),
        syncs_per_step=_per_step(count("syncs"), n),
        sync_ns_per_step=int(round(_per_step(count("sync_ns"), n))),
        unexpected_calls_per_step={
            "module_load": _per_step(count("module_loads"), n),
            "alloc": _per_step(count("allocs"), n),
            "graph_setup": _per_step(count("graph_setups"), n),
        },
        unexpected_ns_per_step=int(
            round(_per_step(count("module_load_ns") + count("alloc_ns") + count("graph_setup_ns"), n))
        ),
        ops_per_graph_launch=round(count("graph_ops") / graph_launches, 2) if graph_launches else None,
    )


def _stage_facts(summary: StageSummary | None, captured_graph: bool) -> StageFacts:
    if summary is None:
        return StageFacts(ExecutionMode.NONE, 0, 0, 0, 0, 0, 0, 0, 0, captured_graph)
    launches = summary.launches_per_step
    return StageFacts(
        execution=ExecutionMode(summary.execution),
        eager_launches_per_step=launches["kernel"] + launches["memcpy"] + launches["memset"],
        graph_launches_per_step=launches["graph"],
        launch_api_ns_per_step=summary.launch_api_ns_per_step,
        syncs_per_step=summary.syncs_per_step,
        sync_ns_per_step=summary.sync_ns_per_step,
        module_loads_per_step=summary.unexpected_calls_per_step["module_load"],
        allocs_per_step=summary.unexpected_calls_per_step["alloc"],
        graph_setups_per_step=summary.unexpected_calls_per_step["graph_setup"],
        process_captured_graph=captured_graph,
    )


def _slowest_ranks(processes: list[ProcessReport]) -> list[SlowestRank]:
    if len(processes) < 2:
        return []
    per_stage: dict[str, dict[int, int]] = {}
    for process in processes:
        for stage in process.stages:
            total = stage.busy_ns_per_step + stage.idle_ns_per_step
            if total:
                per_stage.setdefault(stage.name, {})[process.pid] = total
    slowest = []
    for stage, by_pid in sorted(per_stage.items()):
        if len(by_pid) < 2:
            continue
        pid = max(sorted(by_pid), key=lambda p: by_pid[p])
        slowest.append(
            SlowestRank(stage, pid, by_pid[pid], {str(p): v for p, v in sorted(by_pid.items()) if p != pid})
        )
    return slowest
