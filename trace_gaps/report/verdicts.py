"""Verdict sentences, written from structured facts: a candidate's verdict from its finding
and the headline (analyze), a collective wait's verdict (ranks), and a diff's verdict and
mode changes.

Every renderer and the JSON show these same words. The analysis decides what a candidate is
(analysis/findings.py: its kind, case and the time its cause explains); this module only
phrases it, so report building calls it and no analysis module imports it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trace_gaps.figures import MIN_SAMPLES_PER_STEP, StageGpuMetrics
from trace_gaps.model import (
    DISPATCH_FACTOR,
    CallCategory,
    ExecutionMode,
    IdleCause,
    OpKind,
    Presence,
    VerdictKind,
)
from trace_gaps.report.findings import (
    Case,
    Finding,
    Judgement,
    StageFacts,
    graph_updates,
    short_gap_split,
)
from trace_gaps.report.levers import lever_words
from trace_gaps.units import format_count, format_duration, format_rate

if TYPE_CHECKING:
    from trace_gaps.diff.changes import BucketChange, RunChange, StageChange, WallChange
    from trace_gaps.diff.repeats import RunSpread
    from trace_gaps.records import (
        Candidate,
        Evidence,
        LongGapFinding,
        Pace,
        RankSummary,
        UnsplitCollectives,
    )


# Rows of the bucket table the diff's verdict names, at most.
VERDICT_CHANGES = 3


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
    if judgement.kind == VerdictKind.GPU_BOUND:
        top = evidence.top_kernels[0] if evidence.top_kernels else None
        kernel = (
            f"; top op {top.name} {format_duration(top.running_ns_per_step)}/step" if top else ""
        )
        how = _EXECUTION_WORDS.get(ExecutionMode(facts.stage.execution), "")
        metrics = facts.stage.gpu_metrics
        if metrics is not None and judgement.case != Case.PLAIN:
            return _bound_verdict(
                f"{stage}: GPU busy {amount}/step{how}{kernel}", judgement, metrics
            )
        return (
            f"{stage}: GPU busy {amount}/step{how}{kernel} — GPU-bound here: only faster or "
            f"fewer kernels shrink it; {CAPTURE_METRICS_HINT}",
            "the GPU runs its kernels back to back: only faster or fewer kernels help",
        )
    head = f"{stage}: GPU idle {amount}/step"
    long_idle = judgement.long_idle_ns_per_step
    if judgement.kind == VerdictKind.LONG_HOST_GAPS:
        return _long_gap_verdict(head, judgement, evidence, facts)
    short = short_gap_split(evidence.idle_by_cause_ns_per_step, long_idle)
    text, why = _idle_verdict(head, judgement, short, evidence, facts)
    graph = "" if judgement.kind == VerdictKind.LAUNCH_BOUND else _unreplayed_capture_words(facts)
    extra = (_long_gap_words(long_idle, evidence), graph, _unexpected_words(facts))
    return "; ".join([text, *(words for words in extra if words)]), why


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


_EXECUTION_WORDS = {
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


def write_headline(
    step_name: str | None,
    wall_mean_ns: int,
    busy_ns: int,
    candidates: list[Candidate],
    pace: Pace | None = None,
) -> str:
    """One line: step time, GPU busy %, what paces a run-ahead loop, the biggest lever with
    its ms/step, and why."""
    step = step_name or "step"
    busy = 100 * busy_ns / wall_mean_ns if wall_mean_ns else 0.0
    line = f"{step} {format_duration(wall_mean_ns)}/step, GPU busy {busy:.1f} %"
    if pace is not None:
        line = f"{line}, {pace_words(pace)}"
    if not candidates:
        return line
    top = candidates[0]
    if top.saving_ns is not None and top.predicted_step_ns is not None:
        # One order (docs/what-if.md): the first candidate, ranked by what its fix saves.
        share = 100 * top.saving_ns / wall_mean_ns if wall_mean_ns else 0.0
        return (
            f"{line}; biggest saving: {top.stage} {lever_words(top.lever)} saves "
            f"{format_duration(top.saving_ns)}/step ({share:.0f} % of the step; predicted "
            f"{format_duration(top.predicted_step_ns)}/step) — {top.why}"
        )
    top = max(candidates, key=lambda c: (c.lever_ns_per_step, -c.rank))
    share = 100 * top.lever_ns_per_step / wall_mean_ns if wall_mean_ns else 0.0
    what = _LEVER_WORDS.get(VerdictKind(top.kind), top.kind)
    return (
        f"{line}; biggest lever: {top.stage} {what}, {format_duration(top.lever_ns_per_step)}/step "
        f"({share:.0f} % of the step) — {top.why}"
    )


def pace_words(pace: Pace) -> str:
    """What sets a run-ahead loop's step, with its figures."""
    stages = ", ".join(
        f"{name} {format_duration(ns)}" for name, ns in pace.host_by_stage_ns_per_step.items()
    )
    if pace.paced_by == "host":
        return (
            f"paced by the host ({format_duration(pace.host_ns_per_step)}/step of host work: "
            f"{stages}; the GPU is busy {format_duration(pace.gpu_busy_ns_per_step)}/step)"
        )
    return (
        f"paced by the GPU (the host runs ahead and waits "
        f"{format_duration(pace.sync_ns_per_step)}/step for it; host work "
        f"{format_duration(pace.host_ns_per_step)}/step)"
    )


_LEVER_WORDS = {
    VerdictKind.GPU_BOUND: "GPU work",
    VerdictKind.LONG_HOST_GAPS: "long host gaps",
    VerdictKind.LAUNCH_BOUND: "launch overhead",
    VerdictKind.HOST_BOUND: "host code",
    VerdictKind.BLOCKED_IN_OS: "blocked host thread",
    VerdictKind.SYNC_BOUND: "host syncs",
    VerdictKind.QUEUED: "queued ops",
    VerdictKind.API: "CUDA API calls",
    VerdictKind.LAUNCH_CALLS: "launch calls",
    VerdictKind.WAITING_FOR_PEER: "waiting in collectives for another rank",
    VerdictKind.COLLECTIVE_UNSPLIT: "collective time",
}


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
    how = _EXECUTION_WORDS.get(execution, "")
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


def signed_ms(ns: float) -> str:
    """ "−4.10 ms" / "+0.25 ms": a signed change with a real minus sign."""
    return ("−" if ns < 0 else "+") + format_duration(abs(ns))


def signed_pct(pct: float) -> str:
    """ "−38.0 %"."""
    return ("−" if pct < 0 else "+") + f"{abs(pct):.1f} %"


def describe_mode_change(change: StageChange) -> str | None:
    """ "verify_forward: eager 354 launches/step → graph 1", or None when nothing much moved.

    Much: the execution mode changed, or the launches per step changed by at least half.
    """
    if change.before is None or change.after is None:
        return None
    sides = [change.before, change.after]
    launches = [s.eager_launches_per_step + s.graph_launches_per_step for s in sides]
    moved = abs(launches[1] - launches[0]) >= max(1.0, launches[0] / 2)
    if sides[0].execution == sides[1].execution and not moved:
        return None
    return (
        f"{change.stage}: {sides[0].execution} {launches[0]:g} launches/step → "
        f"{sides[1].execution} {launches[1]:g}"
    )


def describe_change(
    what: str,
    change: WallChange | RunSpread,
    *,
    confidence_pct: int,
    no_interval: str = "fewer than 2 steps on a side, no noise estimate",
    interval_from: str = "",
) -> str:
    """'<what> +1.20 ms/step (+3.4 %, 95 % CI +0.10 ms to +2.00 ms<interval_from>)', or
    '(+3.4 %; <no_interval>)' where there is no interval."""
    head = f"{what} {signed_ms(change.change_ns)}/step"
    pct = signed_pct(change.change_pct) if change.change_pct is not None else "n/a %"
    if change.ci_ns is None:
        return head + f" ({pct}; {no_interval})"
    low, high = signed_ms(change.ci_ns.low_ns), signed_ms(change.ci_ns.high_ns)
    return head + f" ({pct}, {confidence_pct} % CI {low} to {high}{interval_from})"


def write_runs_verdict(runs: RunSpread, *, confidence_pct: int) -> str:
    """One line: the step time over repeated captures, with the run-to-run noise."""
    shown = [
        ", ".join(format_duration(ns) for ns in side)
        for side in (runs.before_run_ns, runs.after_run_ns)
    ]
    head = describe_change(
        "Step time over the runs",
        runs,
        confidence_pct=confidence_pct,
        no_interval="one run a side, no run-to-run noise estimate",
        interval_from=" from the run-to-run spread",
    )
    head += f"; runs before {shown[0]}, after {shown[1]}"
    if runs.is_beyond_noise is False:
        head += ": no change beyond the run-to-run noise"
    return head


def write_diff_verdict(
    wall: WallChange,
    buckets: list[BucketChange],
    stages: list[StageChange],
    *,
    confidence_pct: int,
) -> str:
    """One line: the step-time change and its noise, then the few changes that explain it."""
    head = describe_change("Step time", wall, confidence_pct=confidence_pct)
    if wall.ci_ns is None:
        named = buckets[:VERDICT_CHANGES]
    else:
        named = [b for b in buckets if b.is_beyond_noise][:VERDICT_CHANGES]
    if wall.is_beyond_noise is False:
        head += ": no change beyond noise"
        if named:
            head += "; within it"
    if not named:
        return head
    modes = {c.stage: describe_mode_change(c) for c in stages}
    parts = []
    for bucket in named:
        part = f"{bucket.stage} {bucket.bucket} {signed_ms(bucket.change_ns_per_step)}/step"
        if bucket.presence != Presence.BOTH:
            part += f" ({bucket.presence})"
        parts.append(part)
    mentioned = dict.fromkeys(b.stage for b in named)
    extra = [modes[s] for s in mentioned if modes.get(s)]
    return head + ": " + ", ".join(parts) + "".join(f"; {m}" for m in extra if m)


def write_run_verdict(run: RunChange, *, confidence_pct: int) -> str:
    """One line for several ranks compared: the run's step time (its slowest rank's) on each
    side, and its change with the noise of those ranks' steps."""
    wall = run.wall
    head = describe_change("Run step time (its slowest rank)", wall, confidence_pct=confidence_pct)
    if wall.is_beyond_noise is False:
        head += ", no change beyond noise"
    sides = [
        f"{label} process {side.pid} in {side.file} ({format_duration(side.wall.mean_ns)}/step)"
        for label, side in (("before", run.before), ("after", run.after))
    ]
    return f"{head}: slowest {sides[0]}, {sides[1]}"
