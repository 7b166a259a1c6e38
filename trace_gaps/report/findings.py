"""What a candidate is: its kind, which of the kind's cases it is, and the time per step its
cause explains, decided from its evidence and its stage's figures before any words (the
verdict is written from a Finding when the report is built: write_candidate)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from trace_gaps.figures.gpu import StageGpuMetrics
from trace_gaps.figures.stage import StageSummary
from trace_gaps.model import OpKind
from trace_gaps.records.report import CallShare, Candidate, Evidence
from trace_gaps.vocabulary import Bucket, IdleCause, VerdictKind

# A stage issuing at least this many eager launches per step is called launch-heavy.
MANY_LAUNCHES_PER_STEP = 20
# The host time in the short gaps between an eager stage's launches is per-op dispatch (which
# a CUDA graph removes) when at least this share of it lies in gaps within DISPATCH_FACTOR x
# the median gap (analysis/long_gaps.py): spread evenly, not concentrated in a few gaps.
# Decided by the shape of the gaps, never by the mean per launch (docs/definitions.md).
DISPATCH_EVEN_FRACTION = 0.5

# Calls that re-parameterise an instantiated CUDA graph (XLA updates its graphs every step).
_GRAPH_UPDATE = re.compile(r"^cu(da)?GraphExec\w*(SetParams|Update)")


class Case(StrEnum):
    """Which case of its kind a finding is, where a kind has several."""

    PLAIN = "plain"
    CODE_LOAD = "code_load"  # long host gaps that end in loading or building code
    BLOCKED = "blocked"  # long host gaps mostly inside OS calls
    CONCENTRATED = "concentrated"  # host-bound: an eager stage's host code in a few gaps
    GRAPH_DISPATCH = "graph_dispatch"  # api: graph updates and graph launches (JAX/XLA)
    # GPU-bound, by the GPU's own metrics (captures with --gpu-metrics-devices)
    MEMORY_BOUND = "memory_bound"  # DRAM bandwidth near peak
    COMPUTE_BOUND = "compute_bound"  # tensor pipes or instruction issue near peak
    LATENCY_BOUND = "latency_bound"  # neither: small kernels, too few blocks, gaps


@dataclass(frozen=True, slots=True)
class StageFacts:
    """What the verdict needs to know about one stage: its figures, and where it stands."""

    stage: StageSummary
    captured_here: tuple[str, ...] = ()  # NVTX ranges of the graph captures matching this stage
    gpu_shared_with: tuple[int, ...] = ()  # other processes with ops on this process's GPUs


@dataclass(frozen=True, slots=True)
class Judgement:
    """A candidate's kind and case, and the time per step the named cause explains."""

    kind: VerdictKind
    lever_ns_per_step: int
    case: Case = Case.PLAIN
    # Idle: the host time per step in long host gaps (the rest of host time is short gaps).
    long_idle_ns_per_step: int = 0


@dataclass(frozen=True, slots=True)
class Finding:
    """A ranked candidate and what its verdict is written from (write_candidate).
    The candidate's `kind` and `lever_ns_per_step` are the judgement's; its `verdict` and
    `why` are "" until written."""

    candidate: Candidate
    judgement: Judgement
    facts: StageFacts
    collective_ns_per_step: int = 0  # busy: its time in collective kernels no peer splits


def judge(bucket: str, ns_per_step: int, evidence: Evidence, facts: StageFacts) -> Judgement:
    """The kind of a busy or idle candidate (waits and unsplit collectives: summary.py)."""
    if bucket == Bucket.BUSY.value:
        return Judgement(VerdictKind.GPU_BOUND, ns_per_step, bound_case(facts.stage.gpu_metrics))
    split = evidence.idle_by_cause_ns_per_step
    long_idle = min(evidence.long_gap_idle_ns_per_step, split[IdleCause.HOST.value])
    if evidence.long_host_gaps and 2 * long_idle >= ns_per_step:
        main = evidence.long_host_gaps[0]
        case = (
            Case.CODE_LOAD
            if main.ends_in_code_load
            else Case.BLOCKED
            if 2 * main.os_ns_per_step >= main.ns_per_step
            else Case.PLAIN
        )
        return Judgement(VerdictKind.LONG_HOST_GAPS, long_idle, case, long_idle)
    # Long gaps are explained on their own: what is left of host time is the short gaps.
    short = short_gap_split(split, long_idle)
    dominant = max(short, key=lambda cause: short[cause])
    kind, lever, case = _idle_kind(dominant, short, evidence, facts)
    return Judgement(kind, lever, case, long_idle)


# A stage runs near a limit from this share of it on (DRAM read + write of peak bandwidth;
# tensor active or SM issue): well-tuned kernels reach 70-90 % of either on Hopper.
NEAR_PEAK_PCT = 60.0


def bound_case(metrics: StageGpuMetrics | None) -> Case:
    """Which limit a busy stage is near, by the GPU's own metrics (PLAIN without them):
    memory when its DRAM share is near peak and above its compute share, compute when the
    tensor pipes or the issue slots are, else latency."""
    if metrics is None:
        return Case.PLAIN
    memory = metrics.dram_read_pct + metrics.dram_write_pct
    compute = max(metrics.tensor_active_pct, metrics.sm_issue_pct)
    if memory >= NEAR_PEAK_PCT and memory >= compute:
        return Case.MEMORY_BOUND
    if compute >= NEAR_PEAK_PCT:
        return Case.COMPUTE_BOUND
    return Case.LATENCY_BOUND


def short_gap_split(split: dict[str, int], long_idle_ns: int) -> dict[str, int]:
    """The idle split by cause with the long host gaps' time taken out of host."""
    return {**split, IdleCause.HOST.value: split[IdleCause.HOST.value] - long_idle_ns}


def graph_updates(evidence: Evidence) -> list[CallShare]:
    """The candidate's top non-launch calls that re-parameterise an instantiated CUDA graph."""
    return [call for call in evidence.top_api_calls if _GRAPH_UPDATE.match(call.name)]


def _idle_kind(
    dominant: str, split: dict[str, int], evidence: Evidence, facts: StageFacts
) -> tuple[VerdictKind, int, Case]:
    """Kind, time explained and case of idle time whose long host gaps are left out of split."""
    ns = sum(split.values())
    launch, host = split[IdleCause.LAUNCH.value], split[IdleCause.HOST.value]
    updates = graph_updates(evidence)
    update_ns = sum(call.ns_per_step for call in updates)
    if facts.stage.launches_per_step[OpKind.GRAPH] and updates and 2 * (update_ns + launch) >= ns:
        return VerdictKind.API, update_ns + launch, Case.GRAPH_DISPATCH
    if facts.stage.eager_launches_per_step >= MANY_LAUNCHES_PER_STEP and dominant in (
        IdleCause.LAUNCH.value,
        IdleCause.HOST.value,
    ):
        even = facts.stage.even_gap_fraction
        if even is not None and even < DISPATCH_EVEN_FRACTION:
            return VerdictKind.HOST_BOUND, launch + host, Case.CONCENTRATED
        return VerdictKind.LAUNCH_BOUND, launch + host, Case.PLAIN
    if dominant == IdleCause.SYNC.value:
        return VerdictKind.SYNC_BOUND, ns, Case.PLAIN
    if dominant == IdleCause.HOST.value:
        blocked = sum(call.ns_per_step for call in evidence.host_blocked_in)
        if evidence.host_blocked_in and blocked * 2 >= host:
            return VerdictKind.BLOCKED_IN_OS, ns, Case.PLAIN
        return VerdictKind.HOST_BOUND, ns, Case.PLAIN
    if dominant == IdleCause.QUEUED.value:
        return VerdictKind.QUEUED, ns, Case.PLAIN
    if dominant == IdleCause.API.value:
        return VerdictKind.API, ns, Case.PLAIN
    return VerdictKind.LAUNCH_CALLS, ns, Case.PLAIN
