"""Verdict sentences on a candidate, written from structured facts: the dispatch on its
kind, the GPU-bound verdicts (with the GPU's metrics where the export has them) and a
collective wait's (ranks). The idle verdicts are report/idle_verdicts.py's, the headline
report/headline.py's and a diff's diff/verdicts.py's.

Every renderer and the JSON show these same words. The analysis decides what a candidate is
(report/findings.py: its kind, case and the time its cause explains); this module only
phrases it, so report building calls it and no analysis module imports it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trace_gaps.figures.gpu import MIN_SAMPLES_PER_STEP, StageGpuMetrics
from trace_gaps.report.findings import Case, Finding, Judgement, StageFacts
from trace_gaps.report.idle_verdicts import EXECUTION_WORDS, write_idle_verdict
from trace_gaps.units import format_duration
from trace_gaps.vocabulary import ExecutionMode, VerdictKind

if TYPE_CHECKING:
    from trace_gaps.records.ranks import RankSummary, UnsplitCollectives
    from trace_gaps.records.report import Candidate, Evidence


def write_candidate(finding: Finding, waits: RankSummary | None) -> Candidate:
    """The finding's candidate with its verdict and its why in words; waits: its process's
    collective waits (ranks), where it has any."""
    candidate, judgement = finding.candidate, finding.judgement
    stage, ns = candidate.stage, candidate.ns_per_step
    if judgement.kind == VerdictKind.WAITING_FOR_PEER:
        text = wait_verdict(stage, ns, waits)
        why = "its collectives wait for " + (
            f"process {waits.waits_for[0].label}" if waits and waits.waits_for else "a peer"
        )
    elif (
        judgement.kind == VerdictKind.COLLECTIVE_UNSPLIT
        and waits is not None
        and waits.unsplit is not None
    ):
        text, why = unsplit_collective_verdict(
            stage,
            ns,
            finding.collective_ns_per_step,
            ExecutionMode(finding.facts.stage.execution),
            waits.unsplit,
        )
    else:
        text, why = write_verdict(stage, ns, judgement, candidate.evidence, finding.facts)
    return replace(candidate, verdict=text, why=why)


def write_verdict(
    stage: str, ns_per_step: int, judgement: Judgement, evidence: Evidence, facts: StageFacts
) -> tuple[str, str]:
    """One line in words: what the candidate is, and the figures that say so; and its reason
    in one clause (the headline's)."""
    amount = format_duration(ns_per_step)
    if judgement.kind != VerdictKind.GPU_BOUND:
        return write_idle_verdict(f"{stage}: GPU idle {amount}/step", judgement, evidence, facts)
    top = evidence.top_kernels[0] if evidence.top_kernels else None
    kernel = f"; top op {top.name} {format_duration(top.running_ns_per_step)}/step" if top else ""
    how = EXECUTION_WORDS.get(ExecutionMode(facts.stage.execution), "")
    metrics = facts.stage.gpu_metrics
    if metrics is not None and judgement.case != Case.PLAIN:
        return _bound_verdict(f"{stage}: GPU busy {amount}/step{how}{kernel}", judgement, metrics)
    return (
        f"{stage}: GPU busy {amount}/step{how}{kernel} — GPU-bound here: only faster or "
        f"fewer kernels shrink it; {CAPTURE_METRICS_HINT}",
        "the GPU runs its kernels back to back: only faster or fewer kernels help",
    )


# A busy verdict's one line where the export has no GPU metrics (the flags that capture them).
CAPTURE_METRICS_HINT = (
    "memory-, compute- or latency-bound? capture with nsys profile --gpu-metrics-devices=all "
    "--gpu-metrics-frequency=20000"
)


def _bound_verdict(head: str, judgement: Judgement, m: StageGpuMetrics) -> tuple[str, str]:
    """A busy verdict that says which limit the stage is near, with the numbers that say so."""
    dram = (
        f"DRAM {m.dram_read_pct:g} % read + {m.dram_write_pct:g} % write of peak "
        f"({(m.dram_read_bytes_per_step + m.dram_write_bytes_per_step) / 1e6:.0f} MB/step)"
    )
    compute = f"SM issue {m.sm_issue_pct:g} %, tensor {m.tensor_active_pct:g} %"
    sol = f"speed of light {format_duration(m.sol_ns_per_step)}/step"
    if m.sol_fraction:
        sol += f", {1 / m.sol_fraction:.1f}x below busy"
    rough = (
        f" (only {m.samples_per_step:g} metric samples/step: rough)"
        if m.samples_per_step < MIN_SAMPLES_PER_STEP
        else ""
    )
    if judgement.case == Case.MEMORY_BOUND:
        text = (
            f"{head} — memory-bound: {dram}, {sol}; only fewer bytes help: quantised "
            "weights or KV cache, a bigger batch per weight read"
        )
        why = "its DRAM traffic runs near peak bandwidth: only fewer bytes help"
    elif judgement.case == Case.COMPUTE_BOUND:
        text = (
            f"{head} — compute-bound: {compute}, {dram}; only fewer or cheaper operations "
            "help (lower precision, less work)"
        )
        why = "its tensor pipes or issue slots run near peak: only less compute helps"
    else:
        text = (
            f"{head} — latency-bound: {dram}, {compute}, {sol}: small kernels, too few "
            "blocks or gaps between kernels keep it below both limits: fuse, batch"
        )
        why = "it runs far below both bandwidth and compute limits: fuse or batch its kernels"
    return text + rough, why


def unsplit_collective_verdict(
    stage: str,
    ns_per_step: int,
    collective_ns_per_step: int,
    execution: ExecutionMode,
    unsplit: UnsplitCollectives,
) -> tuple[str, str]:
    """A busy candidate whose time is mostly collective kernels that no peer's export splits:
    never "only faster kernels help" for time that may be waiting for another rank. The line,
    and its reason in one clause."""
    how = EXECUTION_WORDS.get(execution, "")
    inside = min(collective_ns_per_step, ns_per_step)
    total = format_duration(unsplit.collective_ns_per_step)
    bound = unsplit.wait_lower_bound_ns_per_step
    if bound is None:
        waiting = f"no lower bound of the wait: {unsplit.no_bound_reason}"
        short = "how much of it is waiting for other ranks is unknown"
    else:
        waiting = (
            f"at least {format_duration(bound)}/step of this process's {total}/step in "
            "collectives is waiting (each instance's time beyond twice the shortest instance "
            "of its kernel on its GPU)"
        )
        short = f"at least {format_duration(bound)} of it waiting for other ranks"
    add = "the other ranks' exports"
    if unsplit.exports_to_add:
        add += f" (e.g. trace-gaps analyze '{unsplit.exports_to_add}')"
    names = ", ".join(unsplit.names[:2])
    text = (
        f"{stage}: GPU busy {format_duration(ns_per_step)}/step{how}, "
        f"{format_duration(collective_ns_per_step)}/step of it in collective kernels ({names}) — "
        "collective time that one export cannot split into waiting for other ranks and "
        f"transfer: {waiting}; pass {add} with this one to measure the wait and see whom it "
        f"waits for"
    )
    if ns_per_step > inside:
        text += f"; the other {format_duration(ns_per_step - inside)}/step are its own kernels"
    return (
        text,
        f"{total}/step in collective kernels, {short}: one export cannot split waiting from "
        f"transfer; add {add}",
    )


def wait_verdict(stage: str, ns_per_step: int, rank: RankSummary | None) -> str:
    """One line for a (stage, wait) candidate: whom it waits for, and what that peer did."""
    amount = format_duration(ns_per_step)
    line = f"{stage}: GPU waiting in collectives {amount}/step"
    if rank is None or not rank.waits_for:
        return line + " for a peer process — the time is set elsewhere: look at the peers"
    peer = rank.waits_for[0]
    line += (
        f", {format_duration(peer.ns_per_step)}/step of it for process {peer.label or peer.pid}, which "
        f"arrives last {peer.last_arrivals_per_step:g} times/step"
    )
    if peer.peer_stages_ns_per_step:
        doing = ", ".join(
            f"{name} {format_duration(ns)}" for name, ns in peer.peer_stages_ns_per_step.items()
        )
        line += f"; meanwhile {peer.label or peer.pid} was in {doing} per step"
        idle = sum(peer.peer_idle_ns_per_step.values())
        if idle:
            causes = ", ".join(
                f"{cause} {format_duration(ns)}" for cause, ns in peer.peer_idle_ns_per_step.items()
            )
            line += f", its GPU idle {format_duration(idle)} of it ({causes})"
    return (
        line + f" — rank-bound: this rank's kernels are not the problem; shorten "
        f"{peer.label or peer.pid}'s "
        "path to the collective"
    )
