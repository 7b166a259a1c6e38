"""The headline in words: a section's step time, GPU busy share, what paces a run-ahead
loop, and the biggest saving or lever with its reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trace_gaps.report.levers import lever_words
from trace_gaps.units import format_duration
from trace_gaps.vocabulary import VerdictKind

if TYPE_CHECKING:
    from trace_gaps.records.report import Candidate, Pace
    from trace_gaps.records.whatif import ReplayCheck


def write_headline(
    step_name: str | None,
    wall_mean_ns: int,
    busy_ns: int,
    candidates: list[Candidate],
    pace: Pace | None = None,
    replay: ReplayCheck | None = None,
) -> str:
    """One line: step time, GPU busy %, what paces a run-ahead loop, the biggest lever with
    its ms/step (and how far the replay was from real pairs of this shape), and why."""
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
            f"{format_duration(top.predicted_step_ns)}/step{_pairs_words(replay)}) — {top.why}"
        )
    top = max(candidates, key=lambda c: (c.lever_ns_per_step, -c.rank))
    share = 100 * top.lever_ns_per_step / wall_mean_ns if wall_mean_ns else 0.0
    what = _LEVER_WORDS.get(VerdictKind(top.kind), top.kind)
    return (
        f"{line}; biggest lever: {top.stage} {what}, {format_duration(top.lever_ns_per_step)}/step "
        f"({share:.0f} % of the step) — {top.why}"
    )


def _pairs_words(replay: ReplayCheck | None) -> str:
    """How far the replay was from real "after" captures of this shape of step."""
    if replay is None or not replay.real_pairs:
        return ""
    pairs = "pair" if replay.real_pairs == 1 else "pairs"
    return f", ±{replay.within_pct:g} % at the same host speed on {replay.real_pairs} real {pairs}"


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
