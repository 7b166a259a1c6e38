"""Rank (stage, busy|idle) candidates by the time per step each explains, with evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from trace_gaps.analysis.launches import ExecutionMode
from trace_gaps.analysis.ledger import BUCKET, CAUSE, CAUSE_ORDER, Bucket, IdleCause
from trace_gaps.units import format_duration

# A stage issuing at least this many eager launches per step is called launch-heavy.
MANY_LAUNCHES_PER_STEP = 20


@dataclass(frozen=True, slots=True)
class KernelShare:
    """An op name's GPU time in a stage."""

    name: str
    ns_per_step: int
    count_per_step: float


@dataclass(frozen=True, slots=True)
class CallShare:
    """A CUDA API name's host time in a stage."""

    name: str
    ns_per_step: int
    count_per_step: float


@dataclass(frozen=True, slots=True)
class GapEvidence:
    """One idle run, as an offset from the trace start."""

    step_index: int
    start_offset_ns: int
    duration_ns: int
    cause: str


@dataclass(frozen=True, slots=True)
class StageFacts:
    """What the verdict needs to know about one stage, per analysed step."""

    execution: ExecutionMode
    eager_launches_per_step: float
    graph_launches_per_step: float
    launch_api_ns_per_step: int
    syncs_per_step: float
    sync_ns_per_step: int
    module_loads_per_step: float
    allocs_per_step: float
    graph_setups_per_step: float
    process_captured_graph: bool
    gpu_shared_with: tuple[int, ...] = ()  # other processes with ops on this process's GPUs
    module_load_ns_per_step: int = 0  # inside the load calls
    module_load_gap_ns_per_step: int = 0  # host time just before the loads


@dataclass(frozen=True, slots=True)
class Evidence:
    """The facts beside a candidate."""

    idle_by_cause_ns_per_step: dict[str, int]
    launches_per_step: float
    syncs_per_step: float
    host_ns_per_launch: int | None
    top_kernels: list[KernelShare]
    top_api_calls: list[CallShare]
    longest_gaps: list[GapEvidence]
    unexpected_calls_per_step: dict[str, float]
    host_blocked_in: list[CallShare] = field(default_factory=list)  # OS calls during idle host time


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (stage, bucket) and the time per step it explains."""

    rank: int
    stage: str
    bucket: str
    ns_per_step: int
    share: float
    verdict: str
    evidence: Evidence


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


def idle_split(ledger_means: pd.DataFrame, stage: str) -> dict[str, int]:
    """Per cause, the idle ns per step charged to a stage (every cause present, zero or not)."""
    rows = ledger_means[
        (ledger_means["stage"] == stage) & (ledger_means[BUCKET] == Bucket.IDLE.value)
    ]
    by_cause = rows.groupby(CAUSE)["ns_per_step"].sum()
    return {cause.value: int(by_cause.get(cause.value, 0)) for cause in CAUSE_ORDER}


def rank_candidates(ledger_means: pd.DataFrame, *, wall_mean_ns: int) -> pd.DataFrame:
    """One row per (stage, bucket) with ns_per_step and share, largest first."""
    grouped = ledger_means.groupby(["stage", BUCKET], sort=False)["ns_per_step"].sum().reset_index()
    grouped = grouped[grouped["ns_per_step"] > 0]
    grouped = grouped.sort_values(
        ["ns_per_step", "stage", BUCKET], ascending=[False, True, True], kind="stable"
    )
    share = grouped["ns_per_step"] / wall_mean_ns if wall_mean_ns else 0.0
    return grouped.assign(share=share, rank=np.arange(1, len(grouped) + 1)).reset_index(drop=True)


def write_verdict(
    stage: str, bucket: str, ns_per_step: int, evidence: Evidence, facts: StageFacts
) -> str:
    """One line in words: what the candidate is, and the figures that say so."""
    amount = format_duration(ns_per_step)
    if bucket == Bucket.BUSY.value:
        top = evidence.top_kernels[0] if evidence.top_kernels else None
        kernel = f"; top op {top.name} {format_duration(top.ns_per_step)}/step" if top else ""
        how = {
            ExecutionMode.GRAPH: " (replayed from a CUDA graph)",
            ExecutionMode.EAGER: " (eager launches)",
            ExecutionMode.MIXED: " (eager and graph launches)",
        }.get(facts.execution, "")
        return (
            f"{stage}: GPU busy {amount}/step{how}{kernel} — GPU-bound here: only faster or "
            "fewer kernels shrink it"
        )
    split = evidence.idle_by_cause_ns_per_step
    dominant = max(split, key=lambda cause: split[cause])
    parts = [f"{stage}: GPU idle {amount}/step"]
    unexpected = _unexpected_words(facts)
    loading = facts.module_load_gap_ns_per_step + facts.module_load_ns_per_step
    if facts.module_loads_per_step and 2 * loading >= ns_per_step:
        # Most of the idle time is host time leading into code loads: not launch overhead.
        parts.append(
            f" — code loading: {facts.module_loads_per_step:.1f} loads/step, "
            f"{format_duration(facts.module_load_gap_ns_per_step)} of host time just before them "
            f"(compiling or reading the code) and {format_duration(facts.module_load_ns_per_step)} "
            "inside the load calls; code is built or loaded in steady state, not only at warm-up: "
            "cache it (fixed shapes, a warm-up pass over every shape, or a persistent kernel "
            "cache) so that steps stop paying for it"
        )
        return "".join(parts)
    if facts.eager_launches_per_step >= MANY_LAUNCHES_PER_STEP and dominant in (
        IdleCause.LAUNCH.value,
        IdleCause.HOST.value,
    ):
        per_launch = (
            f", {format_duration(evidence.host_ns_per_launch)} of host time per launch"
            if evidence.host_ns_per_launch is not None
            else ""
        )
        parts.append(
            f" while the host launches {facts.eager_launches_per_step:.0f} eager ops/step — "
            f"launch-bound: {format_duration(split[IdleCause.LAUNCH.value])} inside launch calls and "
            f"{format_duration(split[IdleCause.HOST.value])} of host code between them{per_launch}"
        )
        if facts.graph_launches_per_step == 0:
            graph = "it does not replay a CUDA graph"
            if facts.process_captured_graph:
                graph += " although this process captured one — the eager path is taken"
            parts.append(f"; {graph}")
        parts.append("; a CUDA graph or fewer, fused kernels removes both")
    elif dominant == IdleCause.SYNC.value:
        parts.append(
            f", {format_duration(split[IdleCause.SYNC.value])} of it inside "
            f"{facts.syncs_per_step:.1f} host syncs/step — sync-bound: the host waits for the GPU, "
            "then the GPU waits for the host to refill the queue"
        )
    elif dominant == IdleCause.HOST.value:
        host = split[IdleCause.HOST.value]
        blocked = sum(call.ns_per_step for call in evidence.host_blocked_in)
        parts.append(f", {format_duration(host)} of it in host code outside CUDA calls")
        if evidence.host_blocked_in and blocked * 2 >= host:
            os_call = evidence.host_blocked_in[0]
            parts.append(
                f", {format_duration(blocked)} of that blocked in OS calls (mostly {os_call.name}, "
                f"{os_call.count_per_step:g}/step) — the thread is waiting on another thread, process "
                "or rank, not computing"
            )
        else:
            parts.append(
                f" ({evidence.launches_per_step:.0f} launches/step) — CPU-bound: the host work "
                "of this stage keeps the GPU waiting"
            )
    elif dominant == IdleCause.QUEUED.value:
        if facts.gpu_shared_with:
            others = ", ".join(map(str, facts.gpu_shared_with[:4]))
            why = f"the GPU is shared with process {others}, whose work runs meanwhile"
        else:
            why = "launch latency, or ops waiting on another stream's event"
        parts.append(
            f", {format_duration(split[IdleCause.QUEUED.value])} of it with ops launched but not "
            f"yet started ({evidence.launches_per_step:.0f} launches/step) — queued: {why}"
        )
    elif dominant == IdleCause.API.value:
        calls = evidence.top_api_calls
        named = (
            f" (mostly {calls[0].name}, {format_duration(calls[0].ns_per_step)}/step)"
            if calls
            else ""
        )
        parts.append(
            f", {format_duration(split[IdleCause.API.value])} of it inside non-launch CUDA API calls{named}"
        )
    else:
        parts.append(
            f", {format_duration(split[IdleCause.LAUNCH.value])} of it inside launch calls"
        )
    if unexpected:
        parts.append(f"; {unexpected}")
    return "".join(parts)


def _unexpected_words(facts: StageFacts) -> str:
    found = []
    if facts.module_loads_per_step:
        found.append(
            f"{facts.module_loads_per_step:.1f} code loads per step "
            f"({format_duration(facts.module_load_ns_per_step)}/step inside them, after "
            f"{format_duration(facts.module_load_gap_ns_per_step)}/step of host time just before "
            "them) — code is loaded or built in steady state, not only at warm-up"
        )
    if facts.allocs_per_step:
        found.append(f"{facts.allocs_per_step:.1f} device allocations per step")
    if facts.graph_setups_per_step:
        found.append(f"{facts.graph_setups_per_step:.1f} graph capture/instantiate calls per step")
    return "; ".join(found)


def host_ns_per_launch(split: dict[str, int], launches_per_step: float) -> int | None:
    """Host time between launch calls, per launch (None without launches)."""
    if launches_per_step <= 0:
        return None
    return int(round(split[IdleCause.HOST.value] / launches_per_step))
