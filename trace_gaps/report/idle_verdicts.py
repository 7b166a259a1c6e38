"""The verdict on a stage's GPU idle time, in words: long host gaps (code loads, a blocked
thread, other host code), launch-bound, graph dispatch, sync-bound, blocked in OS calls,
CPU-bound, queued, CUDA API calls; and the clauses that follow it (long gaps apart, a graph
captured but not replayed, work that should not be in a steady-state step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trace_gaps.model import CallCategory, OpKind
from trace_gaps.report.findings import (
    Case,
    Judgement,
    StageFacts,
    graph_updates,
    short_gap_split,
)
from trace_gaps.units import format_count, format_duration, format_rate
from trace_gaps.vocabulary import DISPATCH_FACTOR, ExecutionMode, IdleCause, VerdictKind

if TYPE_CHECKING:
    from trace_gaps.records.report import Evidence, LongGapFinding


def write_idle_verdict(
    head: str, judgement: Judgement, evidence: Evidence, facts: StageFacts
) -> tuple[str, str]:
    """The idle candidate's line after its head ("decode: GPU idle 4.10 ms/step"), and its
    reason in one clause."""
    long_idle = judgement.long_idle_ns_per_step
    if judgement.kind == VerdictKind.LONG_HOST_GAPS:
        return _long_gap_verdict(head, judgement, evidence, facts)
    short = short_gap_split(evidence.idle_by_cause_ns_per_step, long_idle)
    text, why = _idle_verdict(head, judgement, short, evidence, facts)
    graph = "" if judgement.kind == VerdictKind.LAUNCH_BOUND else _unreplayed_capture_words(facts)
    extra = (_long_gap_words(long_idle, evidence), graph, _unexpected_words(facts))
    return "; ".join([text, *(words for words in extra if words)]), why


# How a stage's ops were launched, as its verdicts say it.
EXECUTION_WORDS = {
    ExecutionMode.GRAPH: " (replayed from a CUDA graph)",
    ExecutionMode.EAGER: " (eager launches)",
    ExecutionMode.MIXED: " (eager and graph launches)",
}


def _unreplayed_capture_words(facts: StageFacts) -> str:
    """Said only of the stage a capture belongs to, when it replays no graph."""
    if not facts.captured_here or facts.stage.launches_per_step[OpKind.GRAPH]:
        return ""
    return (
        f"it captured a CUDA graph (in {facts.captured_here[0]}) but replays none: "
        f"{format_count(facts.stage.eager_launches_per_step)} eager launches/step take the eager path"
    )


def _long_gap_verdict(
    head: str, judgement: Judgement, evidence: Evidence, facts: StageFacts
) -> tuple[str, str]:
    long_idle = judgement.long_idle_ns_per_step
    main = evidence.long_host_gaps[0]
    count = sum(f.gaps_per_step for f in evidence.long_host_gaps)
    pattern = _pattern_words(main)
    text = (
        f"{head} — long host gaps: {format_duration(long_idle)}/step of it in "
        f"{format_rate(count, 'host gaps')} far longer than the stage's launch spacing; mostly "
        f"{main.gaps_per_step:.1f}/step of ~{format_duration(main.typical_ns)} {pattern}"
    )
    if judgement.case == Case.CODE_LOAD:
        why = f"each ending in {main.call_after}: code is built or loaded every step"
        text += (
            " — code is built or loaded in steady state, not only at warm-up: cache it (fixed "
            "shapes, a warm-up pass over every shape, or a persistent kernel cache); a CUDA "
            "graph does not remove it"
        )
    elif judgement.case == Case.BLOCKED:
        why = (
            f"the thread waits in OS calls ({', '.join(main.os_calls[:3])}) between two CUDA "
            "calls, not launching work"
        )
        text += (
            f" — blocked: {format_duration(main.os_ns_per_step)}/step of these gaps is spent "
            "inside OS calls: the thread is waiting on another thread, process or rank, not "
            "computing; a CUDA graph does not remove it"
        )
    else:
        why = "the host is busy elsewhere between two CUDA calls, not launching work"
        text += (
            " — not launch overhead: the host runs other code there, which a CUDA graph does "
            "not remove; profile that range's host code"
        )
    for words in (
        _unreplayed_capture_words(facts),
        _unexpected_words(facts, loads=judgement.case != Case.CODE_LOAD),
    ):
        if words:
            text += f"; {words}"
    return text, why


def _pattern_words(finding: LongGapFinding) -> str:
    """ "between cudaGetDeviceProperties and cuLibraryLoadData (OS calls inside: fopen, fread)"."""
    before = finding.call_before or "the step's start"
    after = finding.call_after or "the step's end"
    words = f"between {before} and {after}"
    if finding.os_calls:
        words += f" (OS calls inside: {', '.join(finding.os_calls[:4])})"
    return words


def _long_gap_words(long_idle: int, evidence: Evidence) -> str:
    if not evidence.long_host_gaps or long_idle <= 0:
        return ""
    count = sum(f.gaps_per_step for f in evidence.long_host_gaps)
    main = evidence.long_host_gaps[0]
    return (
        f"apart from that, {format_duration(long_idle)}/step in {format_rate(count, 'long host gaps')} "
        f"(mostly ~{format_duration(main.typical_ns)} {_pattern_words(main)})"
    )


def _idle_verdict(
    head: str, judgement: Judgement, split: dict[str, int], evidence: Evidence, facts: StageFacts
) -> tuple[str, str]:
    """The verdict on idle time whose long host gaps are left out of split."""
    kind, stage = judgement.kind, facts.stage
    launch, host = split[IdleCause.LAUNCH.value], split[IdleCause.HOST.value]
    if judgement.case == Case.GRAPH_DISPATCH:
        return _graph_dispatch_verdict(head, launch, evidence, facts)
    if judgement.case == Case.CONCENTRATED:
        even = stage.even_gap_fraction or 0.0
        spread = _spread_words(stage.even_gap_fraction, stage.launch_spacing_ns)
        return (
            f"{head} while the host launches {format_count(stage.eager_launches_per_step)} eager "
            f"ops/step, but the host code between the launches is concentrated in a few "
            f"gaps ({spread}): host-bound: {format_duration(host)} of host code between "
            "the launches computes something else (input preparation, Python logic); a "
            f"CUDA graph would remove only the {format_duration(launch)} with the GPU idle "
            f"inside launch calls and about {format_duration(int(even * host))} of dispatch "
            "in the even gaps",
            "host code concentrated in a few gaps between the launches: host work, not launch work",
        )
    if kind == VerdictKind.LAUNCH_BOUND:
        return _launch_bound_verdict(head, launch, host, evidence, facts)
    if kind == VerdictKind.SYNC_BOUND:
        sync = split[IdleCause.SYNC.value]
        return (
            f"{head}, {format_duration(sync)} of it inside "
            f"{format_rate(stage.syncs_per_step, 'host syncs')} — sync-bound: the host waits "
            "for the GPU, then the GPU waits for the host to refill the queue",
            "host syncs drain the GPU's queue",
        )
    if kind == VerdictKind.BLOCKED_IN_OS:
        blocked = sum(call.ns_per_step for call in evidence.host_blocked_in)
        os_call = evidence.host_blocked_in[0]
        return (
            f"{head}, {format_duration(host)} of it in host code outside CUDA calls, "
            f"{format_duration(blocked)} of that blocked in OS calls (mostly "
            f"{os_call.name}, {os_call.count_per_step:g}/step) — the thread is waiting on "
            "another thread, process or rank, not computing",
            f"the thread waits in {os_call.name} for another thread, process or rank",
        )
    if kind == VerdictKind.HOST_BOUND:
        return (
            f"{head}, {format_duration(host)} of it in host code outside CUDA calls "
            f"({format_count(evidence.launches_per_step)} launches/step) — CPU-bound: the host "
            "work of this stage keeps the GPU waiting",
            "host code keeps the GPU waiting",
        )
    if kind == VerdictKind.QUEUED:
        if facts.gpu_shared_with:
            others = ", ".join(map(str, facts.gpu_shared_with[:4]))
            why = f"the GPU is shared with process {others}, whose work runs meanwhile"
        else:
            why = "launch latency, or ops waiting on another stream's event"
        return (
            f"{head}, {format_duration(split[IdleCause.QUEUED.value])} of it with ops launched "
            f"but not yet started ({format_count(evidence.launches_per_step)} launches/step) — queued: {why}",
            f"ops wait to start: {why}",
        )
    if kind == VerdictKind.API:
        calls = evidence.top_api_calls
        named = (
            f" (mostly {calls[0].name}, {format_duration(calls[0].ns_per_step)}/step)"
            if calls
            else ""
        )
        return (
            f"{head}, {format_duration(split[IdleCause.API.value])} of it inside non-launch "
            f"CUDA API calls{named}",
            f"the host is inside non-launch CUDA calls{named}",
        )
    return (
        f"{head}, {format_duration(launch)} of it with the GPU idle inside launch calls",
        "the GPU waits while the host is inside launch calls",
    )


def _launch_bound_verdict(
    head: str, launch: int, host: int, evidence: Evidence, facts: StageFacts
) -> tuple[str, str]:
    stage = facts.stage
    spread = _spread_words(stage.even_gap_fraction, stage.launch_spacing_ns)
    per_launch = evidence.host_ns_per_launch
    per = f", {format_duration(per_launch)} of host time per launch" if per_launch else ""
    shape = f" ({spread}: per-op dispatch)" if spread else ""
    text = (
        f"{head} while the host launches {format_count(stage.eager_launches_per_step)} eager ops/step — "
        f"launch-bound: {format_duration(launch)} with the GPU idle inside launch calls and "
        f"{format_duration(host)} of host code in the short gaps between them{per}{shape}"
    )
    if stage.launches_per_step[OpKind.GRAPH] == 0:
        graph = "it does not replay a CUDA graph"
        if facts.captured_here:
            graph += (
                f" although it captured one (in {facts.captured_here[0]}) — the eager path is taken"
            )
        text += f"; {graph}"
    text += "; a CUDA graph or fewer, fused kernels removes both"
    return (
        text,
        f"{format_count(stage.eager_launches_per_step)} eager launches/step keep the GPU "
        "waiting: a CUDA graph or fused kernels remove it",
    )


def _graph_dispatch_verdict(
    head: str, launch: int, evidence: Evidence, facts: StageFacts
) -> tuple[str, str]:
    """JAX/XLA-style graph dispatch: most idle time in graph-update calls and graph launches."""
    updates = graph_updates(evidence)
    update_ns = sum(call.ns_per_step for call in updates)
    count = sum(call.count_per_step for call in updates)
    replays = facts.stage.launches_per_step[OpKind.GRAPH]
    return (
        f"{head}, {format_duration(update_ns)} of it in graph-update calls "
        f"({format_rate(count, 'updates')}, mostly {updates[0].name}) and "
        f"{format_duration(launch)} inside launch calls with "
        f"{format_rate(replays, 'graph launches')} — graph dispatch (as "
        "JAX/XLA does): the host re-parameterises and launches CUDA graphs every step; fewer, "
        "larger graphs or parameters that need no update remove it",
        "the host updates and launches CUDA graphs every step",
    )


def _spread_words(even: float | None, spacing_ns: int | None) -> str:
    """How the short gaps' host time is spread, in the figures that decide it."""
    if even is None or spacing_ns is None:
        return ""
    return (
        f"{100 * even:.0f} % of it in gaps within {DISPATCH_FACTOR}x the median gap of "
        f"{format_duration(max(spacing_ns, 1_000))}"
    )


def _unexpected_words(facts: StageFacts, *, loads: bool = True) -> str:
    calls = facts.stage.unexpected_calls_per_step
    found = []
    if loads and calls[CallCategory.MODULE_LOAD]:
        found.append(
            f"{format_rate(calls[CallCategory.MODULE_LOAD], 'code loads')} "
            f"({format_duration(facts.stage.module_load_ns_per_step)}/step inside them) — code is "
            "loaded or built in steady state, not only at warm-up"
        )
    if calls[CallCategory.ALLOC]:
        found.append(format_rate(calls[CallCategory.ALLOC], "device allocations"))
    if calls[CallCategory.GRAPH_SETUP]:
        found.append(
            format_rate(calls[CallCategory.GRAPH_SETUP], "graph capture/instantiate calls")
        )
    return "; ".join(found)
