"""The what-if in words: what each lever does, why one changes nothing, what the replay
ignores, and the check of a user's --what-if levers against the replayed steps, which
raises LeverError in those words (docs/what-if.md)."""

from __future__ import annotations

from trace_gaps.analysis.replay.levers import (
    HOST_SHARE,
    Lever,
    LeverError,
    not_applicable,
    present_stages,
)
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.records.whatif import NotApplicable

# What each lever does, in words (reports, docs/what-if.md).
LEVER_WORDS = {
    "graph": "replayed as one CUDA graph",
    "nogaps": "long host gaps removed",
    "host50": "host code halved",
    "nohost": "host code removed",
    "nosync": "host syncs removed",
    "noapi": "non-launch CUDA API calls removed",
    "ontime": "peers on time (collective waits removed)",
    "sol": "GPU work at its speed of light",
}
# What the replay model ignores (every report says so under the candidates).
IGNORED = (
    "GPU contention between streams, clock changes, cross-stream event waits, launch calls "
    "blocked by a full launch queue, and a graph's first-replay cost"
)


# Why a sol lever has no speed of light to go down to.
NO_GPU_METRICS_WORDS = (
    "no GPU metrics for its GPU time: capture them with nsys profile "
    "--gpu-metrics-devices=all --gpu-metrics-frequency=20000"
)


def lever_words(kind: str) -> str:
    """What a lever of this kind does, in words."""
    if kind.startswith("gpu"):
        return f"GPU work {kind[3:]} % faster"
    if kind != "host50" and HOST_SHARE.match(kind):
        return f"host code {kind[4:]} % shorter"
    return LEVER_WORDS.get(kind, kind)


def check_levers(
    levers: list[Lever],
    sections: list[tuple[tuple[str, ...], list[StepModel]]],
    *,
    speeds_known: bool = True,
) -> None:
    """Raise LeverError for a lever that changes nothing in any of the sections (each the
    stage names and replayed steps of a kind of step or a process): it names the stages
    that exist, or says why the lever does not apply (speeds_known: as not_applicable)."""
    if not sections:
        return  # no replayed steps: nothing to check against
    for lever in levers:
        reasons = [
            not_applicable(lever, names, models, speeds_known=speeds_known)
            for names, models in sections
        ]
        if any(reason is None for reason in reasons):
            continue
        if all(r is not None and r.reason == "other_rank" for r in reasons):
            raise LeverError(f"{lever.label}: no process {lever.pid} among the replayed steps")
        if all(r is not None and r.reason in ("no_stage", "other_rank") for r in reasons):
            present = sorted(
                {s for names, models in sections for s in present_stages(names, models)}
            )
            raise LeverError(
                f"no stage '{lever.stage}' in the analysed steps; stages: {', '.join(present)}"
            )
        if all(r is not None and r.reason == "no_gpu_metrics" for r in reasons):
            raise LeverError(f"{lever.label} does not apply: {NO_GPU_METRICS_WORDS}")
        raise LeverError(f"{lever.label} does not apply: {why_not(lever.kind, lever.stage)}")


def not_applicable_words(skipped: NotApplicable) -> str:
    """A lever left out of a prediction, and why, in words."""
    if skipped.reason == "no_stage":
        return f"{skipped.lever} (no stage {skipped.stage} in these steps)"
    if skipped.reason == "other_rank":
        return f"{skipped.lever} (another process's)"
    if skipped.reason == "no_gpu_metrics":
        return f"{skipped.lever} ({NO_GPU_METRICS_WORDS})"
    return f"{skipped.lever} ({why_not(skipped.kind, skipped.stage)})"


def why_not(kind: str, stage: str) -> str:
    """Why a lever of this kind changes nothing in its stage, in words."""
    if kind == "graph":
        return f"{stage} already replays a CUDA graph, or launches no eager kernel, copy or memset"
    if kind == "nosync":
        return f"{stage} makes no host sync"
    if kind == "noapi":
        return f"{stage} makes no non-launch CUDA API call"
    if kind == "ontime":
        return f"{stage} has no collective that waits for a peer"
    if kind.startswith("gpu"):
        return f"{stage} runs no GPU op"
    if kind == "sol":
        return f"{stage} runs no GPU op, or runs at its speed of light already"
    if kind == "nogaps":
        return f"{stage} has no long host gap (1 ms or more, and 10x its median gap or more)"
    return f"{stage} has no host time between its calls"
