"""What-if over a process's replayed steps: the replay's error, a lever's predicted step and
saving, its ledger, and the lever that fits each candidate (docs/what-if.md).

A prediction is relative: saving = mean replayed step − mean replayed step with the levers
pulled, over the same steps; predicted step = measured mean step − saving. The replay's
own error (replayed − measured, unchanged) is reported beside it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.ledger import BUCKET, CAUSE, DURATION_NS, build_ledger
from trace_gaps.analysis.replay.joint import JointRun, run_walls
from trace_gaps.analysis.replay.step import (
    CATEGORIES,
    SYNC,
    Lever,
    LeverError,
    Replayed,
    StepModel,
    applies,
    apply_lever,
    replay_step,
    runs_ahead,
)
from trace_gaps.analysis.stages import CALL_END_NS, STAGE, StageMap, ThreadStages
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import (
    CALL_CATEGORY,
    END_NS,
    GLOBAL_TID,
    PID,
    SPECIAL_STAGES,
    START_NS,
    Bucket,
    GraphTraceMode,
)
from trace_gaps.records import NotApplicable, Pace, Prediction, ReplayCheck, WhatIfLedgerEntry

# The lever that fits each verdict kind (VerdictKind values).
_LEVER_OF_KIND = {
    "gpu_bound": "gpu50",
    "long_host_gaps": "nogaps",
    "launch_bound": "graph",
    "launch_calls": "graph",
    "queued": "graph",
    "host_bound": "graph",
    "blocked_in_os": "nohost",
    "sync_bound": "nosync",
    "api": "noapi",
    "waiting_for_peer": "ontime",
}
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
# Levers pulled before the others, whatever order they are given in: a graph is then
# formed over what the removed syncs and calls no longer split.
REMOVED_FIRST = ("nosync", "noapi")
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
    if kind.startswith("gpu"):
        return f"GPU work {kind[3:]} % faster"
    return LEVER_WORDS.get(kind, kind)


PRICED_STEPS = 8  # a candidate's saving is priced on this many of the replayed steps


def models_of(models: dict[int, StepModel], pid: int) -> list[StepModel]:
    return [models[k] for k in sorted(models) if models[k].pid == pid]


def priced_subset(models: list[StepModel], most: int = PRICED_STEPS) -> list[StepModel]:
    """Up to `most` of the models, evenly spaced in wall-time order (the candidates' savings
    are priced on these: every candidate's lever is a replay of each)."""
    if len(models) <= most:
        return models
    by_wall = sorted(models, key=lambda m: (m.end_ns - m.start_ns, m.step_id))
    picks = np.linspace(0, len(by_wall) - 1, most).round().astype(int)
    return [by_wall[i] for i in picks]


def check_replay(models: list[StepModel]) -> ReplayCheck:
    """Replay each step unchanged and compare the mean with the measured mean."""
    if not models:
        return ReplayCheck(0, 0, 0, 0.0)
    measured = int(round(np.mean([m.end_ns - m.start_ns for m in models])))
    replayed = int(round(np.mean([replay_step(m).wall_ns for m in models])))
    error = 100.0 * (replayed - measured) / measured if measured else 0.0
    return ReplayCheck(len(models), measured, replayed, round(error, 2))


# A run-ahead loop is paced by its host where the host waits in syncs for less than this
# share of the step (it would wait for the GPU, were the GPU the slower).
HOST_PACED_SYNC_SHARE = 0.05


def pace_of(
    models: list[StepModel], names: tuple[str, ...], mean_step_ns: int, busy_ns: int
) -> Pace | None:
    """Whether host or GPU sets the step of a loop whose host runs ahead (most of its
    replayed steps wait for the step before's work: replay.runs_ahead); None for a loop
    whose host waits for its own step's work, where the two add up instead."""
    if not models or sum(runs_ahead(m) for m in models) * 2 < len(models):
        return None
    host_by_stage: dict[int, int] = {}
    sync = 0
    for m in models:
        gaps = m.item_call < 0
        waits = m.call_category == SYNC
        sync += int(m.call_ns[waits].sum())
        codes = np.r_[m.item_stage[gaps], m.call_stage[~waits]]
        times = np.r_[m.item_ns[gaps], m.call_ns[~waits]]
        for code in np.unique(codes):
            host_by_stage[int(code)] = host_by_stage.get(int(code), 0) + int(
                times[codes == code].sum()
            )
    n = len(models)
    host = int(round(sum(host_by_stage.values()) / n))
    sync_ns = int(round(sync / n))
    top = sorted(host_by_stage.items(), key=lambda kv: -kv[1])[:3]
    return Pace(
        paced_by="host" if sync_ns < HOST_PACED_SYNC_SHARE * mean_step_ns else "gpu",
        host_ns_per_step=host,
        sync_ns_per_step=sync_ns,
        gpu_busy_ns_per_step=busy_ns,
        host_by_stage_ns_per_step={
            names[code] if 0 <= code < len(names) else str(code): int(round(total / n))
            for code, total in top
        },
    )


def present_stages(names: tuple[str, ...], models: list[StepModel]) -> list[str]:
    """The stages of these steps that a lever can name, sorted."""
    return sorted(
        {
            names[int(c)]
            for m in models
            for c in np.unique(np.r_[m.call_stage, m.op_stage, m.item_stage])
            if 0 <= int(c) < len(names) and names[int(c)] not in SPECIAL_STAGES
        }
    )


def not_applicable(
    lever: Lever, names: tuple[str, ...], models: list[StepModel], *, speeds_known: bool = True
) -> NotApplicable | None:
    """Why the lever changes nothing in these steps, or None when it does. speeds_known
    False: a sol lever is checked for its stage's GPU ops only (the report gives it its
    stage's speed of light, per process, later)."""
    if lever.pid is not None:
        models = [m for m in models if m.pid == lever.pid]
        if not models:
            return NotApplicable(lever.label, lever.stage, lever.kind, "other_rank")
    if lever.stage not in present_stages(names, models):
        return NotApplicable(lever.label, lever.stage, lever.kind, "no_stage")
    if lever.kind == "sol" and lever.op_scale is None and speeds_known:
        return NotApplicable(lever.label, lever.stage, lever.kind, "no_gpu_metrics")
    code = names.index(lever.stage)
    at_limit = lever.kind == "sol" and lever.op_scale is not None and lever.op_scale >= 1
    if at_limit or not any(applies(m, code, lever.kind) for m in models):
        return NotApplicable(lever.label, lever.stage, lever.kind, "nothing_to_change")
    return None


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


def predict(
    models: list[StepModel],
    levers: list[Lever],
    names: tuple[str, ...],
    mode: GraphTraceMode,
    mean_step_ns: int,
    *,
    with_ledger: bool = True,
    base_walls: list[tuple[int, int]] | None = None,
    strict: bool = True,
) -> Prediction:
    """Pull the levers on every replayed step (syncs and API calls removed first, so that a
    graph spans what they no longer split). A lever that changes nothing in these steps
    raises LeverError (check_levers), or with strict=False is left out and listed in
    not_applicable. base_walls: the models' unchanged replays' (wall_ns, gpu_end_ns), when
    already known."""
    if strict:
        check_levers(levers, [(names, models)])
    skipped = [found for lever in levers if (found := not_applicable(lever, names, models))]
    pulled_levers = [lever for lever in levers if lever.label not in {n.lever for n in skipped}]
    if base_walls is None:
        base_walls = [ends(replay_step(m)) for m in models]
    base = [wall for wall, _ in base_walls]
    pulled, removed, ledgers = [], [], []
    for model, before in zip(models, base_walls, strict=True):
        changed = pull(model, pulled_levers, names, mode)
        result = replay_step(changed)
        wall = steady_wall(before, result)
        pulled.append(wall)
        removed.append(removed_ns(model, changed))
        if with_ledger:
            ledgers.append(replayed_ledger(changed, result, names, wall))
    replayed = int(round(np.mean(base))) if base else 0
    lever_ns = int(round(np.mean(pulled))) if pulled else 0
    measured = int(round(np.mean([m.end_ns - m.start_ns for m in models]))) if models else 0
    predicted = bounded_prediction(
        mean_step_ns, replayed, lever_ns, int(round(np.mean(removed))) if removed else 0
    )
    return Prediction(
        levers=[lever.label for lever in pulled_levers],
        steps=len(models),
        measured_ns=measured,
        replayed_ns=replayed,
        lever_ns=lever_ns,
        saving_ns=mean_step_ns - predicted,
        predicted_ns=predicted,
        ledger=_mean_ledger(ledgers, len(models), names),
        not_applicable=skipped,
    )


def predict_run(
    run: JointRun,
    pid: int,
    levers: list[Lever],
    names: tuple[str, ...],
    mode: GraphTraceMode,
    mean_step_ns: int,
    *,
    with_ledger: bool = True,
    strict: bool = True,
) -> Prediction:
    """The levers pulled on every rank of a run in lockstep, priced by the joint replay
    (joint.py): one predicted step for the run, the same in every rank's section (the run's
    step less its relative saving, within the bounds of bounded_prediction); this rank's
    saving is its own mean step less that. A lever applies where it changes some rank."""
    everyone = [m for iteration in run.iterations for m in iteration.models]
    if strict:
        check_levers(levers, [(names, everyone)])
    skipped = [found for lever in levers if (found := not_applicable(lever, names, everyone))]
    pulled_levers = [lever for lever in levers if lever.label not in {n.lever for n in skipped}]
    pulled = [
        tuple(pull(m, pulled_levers, names, mode) for m in iteration.models)
        for iteration in run.iterations
    ]
    walls, replays = run_walls(run, pulled)
    base = [max(r.wall_ns for r in results) for results in run.base]
    removed = [
        sum(removed_ns(m, p) for m, p in zip(iteration.models, changed, strict=True))
        for iteration, changed in zip(run.iterations, pulled, strict=True)
    ]
    rank = run.pids.index(pid)
    predicted = min(
        bounded_prediction(
            run.run_ns, int(np.mean(base)), int(np.mean(walls)), int(np.mean(removed))
        ),
        mean_step_ns,
    )
    ledgers = (
        [
            replayed_ledger(changed[rank], results[rank], names, wall)
            for changed, results, wall in zip(pulled, replays, walls, strict=True)
        ]
        if with_ledger
        else []
    )
    own = [iteration.models[rank] for iteration in run.iterations]
    return Prediction(
        levers=[lever.label for lever in pulled_levers],
        steps=len(run.iterations),
        measured_ns=int(round(np.mean([m.end_ns - m.start_ns for m in own]))),
        replayed_ns=int(round(np.mean(base))),
        lever_ns=int(round(np.mean(walls))),
        saving_ns=mean_step_ns - predicted,
        predicted_ns=predicted,
        ledger=_mean_ledger(ledgers, len(own), names),
        not_applicable=skipped,
        ranks=list(run.pids),
    )


def removed_ns(before: StepModel, after: StepModel) -> int:
    """The time the levers take out of one step's model: host time, call time and GPU op
    time (a sync's call time holds its wait). A replay is a max-plus system: taking x out of
    its durations shortens it by at most x, so no lever saves more than this."""

    def total(model: StepModel) -> int:
        return int(model.item_ns.sum() + model.call_ns.sum() + model.op_ns.sum())

    return max(total(before) - total(after), 0)


def bounded_prediction(mean_step_ns: int, replayed_ns: int, lever_ns: int, removed: int) -> int:
    """The predicted mean step: the replayed steps' relative saving applied to the measured
    mean step (the replayed steps may be a subset of the analysed ones, whose mean differs),
    the saving kept within [0, the time the levers remove]: never above the measured step,
    never at or below zero."""
    if mean_step_ns <= 0 or replayed_ns <= 0:
        return max(mean_step_ns, 1)
    saving = min(max(replayed_ns - lever_ns, 0), removed)
    fraction = min(saving / replayed_ns, 1.0)
    return max(int(round(mean_step_ns * (1.0 - fraction))), 1)


def pull(
    model: StepModel, levers: list[Lever], names: tuple[str, ...], mode: GraphTraceMode
) -> StepModel:
    """The model with the levers pulled, syncs and API calls removed first."""
    for lever in sorted(levers, key=lambda lever: lever.kind not in REMOVED_FIRST):
        if not lever.of(model.pid):
            continue
        model = apply_lever(
            model, names.index(lever.stage), lever.kind, mode, op_scale=lever.op_scale
        )
    return model


def ends(result: Replayed) -> tuple[int, int]:
    """(where the host timeline ends, where the step's GPU work ends), from the step start."""
    return result.wall_ns, result.gpu_end_ns


def steady_wall(before: tuple[int, int], after: Replayed) -> int:
    """The step's wall with a lever pulled: its host timeline, but no shorter than its GPU
    work, which the next step's ops queue behind (a sync removed frees the host, not the
    GPU), less the overhang past the host's end the unchanged step already had."""
    host, gpu = before
    overhang = max(gpu - host, 0)
    return max(after.wall_ns, after.gpu_end_ns - overhang)


def lever_for(kind: str, launches_per_step: float, mode: str) -> str | None:
    """The lever that fits a candidate's verdict kind (graph only for a stage that launches
    eagerly; a graph stage's launch-side idle gets its host code removed instead)."""
    lever = _LEVER_OF_KIND.get(kind)
    if lever == "graph" and (mode == "graph" or launches_per_step <= 0):
        return "nohost"
    return lever


def choose_lever(
    stage: str,
    kind: str,
    bucket: str,
    launches_per_step: float,
    mode: str,
    saving: Callable[[str, str], tuple[int, int] | None],
) -> tuple[str, tuple[int, int] | None]:
    """The lever a candidate is priced with and its (predicted step, saving), or ("", None).

    The lever that fits its verdict kind (lever_for; `nohost` where a graph or `nogaps`
    does not apply), unless removing the stage's host syncs saves more (an idle candidate): a graph
    is cut at every sync, so where the syncs hold the stage's time, they are the fix.
    saving(stage, lever): None where the lever does not apply."""
    lever = lever_for(kind, launches_per_step, mode) or ""
    found = saving(stage, lever) if lever else None
    # A graph that does not apply, or long gaps none of which is long against the step's own
    # gaps (a stage whose host work is one or two gaps): the stage's host code is the fix.
    if found is None and lever in ("graph", "nogaps"):
        lever, found = "nohost", saving(stage, "nohost")
    if lever and lever != "nosync" and bucket == Bucket.IDLE.value:
        syncs = saving(stage, "nosync")
        if syncs is not None and (found is None or syncs[1] > found[1]):
            lever, found = "nosync", syncs
    return (lever, found) if found is not None else ("", None)


def replayed_ledger(
    model: StepModel, result: Replayed, names: tuple[str, ...], wall_ns: int | None = None
) -> pd.DataFrame:
    """The ledger (ledger.py) of one replayed step, from where its calls and ops landed
    (wall_ns: the step's replayed wall, the host timeline's end by default)."""
    calls = model.item_call >= 0
    call_items = np.flatnonzero(calls)
    call_index = model.item_call[call_items]
    call_frame = pd.DataFrame(
        {
            PID: model.pid,
            GLOBAL_TID: model.tid,
            CALL_CATEGORY: np.asarray(CATEGORIES, dtype=object)[model.call_category[call_index]],
            START_NS: result.item_start[call_items],
            END_NS: result.item_end[call_items],
        }
    )
    call_end = np.full(len(model.call_ns), -1, dtype=np.int64)
    call_end[call_index] = result.item_end[call_items]
    op_call = model.op_call
    ops = pd.DataFrame(
        {
            PID: model.pid,
            START_NS: result.op_start,
            END_NS: result.op_end,
            STAGE: model.op_stage.astype(np.int64),
            CALL_END_NS: np.where(op_call >= 0, call_end[np.maximum(op_call, 0)], -1),
            WAIT_END_NS: np.where(
                model.op_peer_at >= 0,
                np.clip(model.op_peer_at, result.op_start, result.op_end),
                result.op_start,
            ),
        }
    )
    end = model.start_ns + (result.wall_ns if wall_ns is None else wall_ns)
    # The stage ranges: runs of host-timeline items of one stage.
    stage = model.item_stage
    starts, ends = result.item_start, result.item_end
    cut = np.flatnonzero(np.r_[True, stage[1:] != stage[:-1]]) if len(stage) else np.zeros(0, int)
    run_start = starts[cut] if len(cut) else np.zeros(0, dtype=np.int64)
    run_end = np.r_[starts[cut[1:]], end] if len(cut) else np.zeros(0, dtype=np.int64)
    run_code = stage[cut].astype(np.int64) if len(cut) else np.zeros(0, dtype=np.int64)
    real = np.array([names[int(c)] not in SPECIAL_STAGES for c in run_code], dtype=bool)
    thread = ThreadStages(
        step_starts=np.array([model.start_ns], dtype=np.int64),
        step_ends=np.array([end], dtype=np.int64),
        level_starts=(run_start[real].astype(np.int64),),
        level_ends=(run_end[real].astype(np.int64),),
        level_codes=(run_code[real],),
    )
    stage_map = StageMap(names=names, threads={model.tid: thread})
    step = pd.DataFrame(
        {
            STEP_ID: [model.step_id],
            PID: [model.pid],
            GLOBAL_TID: [model.tid],
            START_NS: [model.start_ns],
            END_NS: [end],
        }
    )
    del ends
    ledger, _, _ = build_ledger(ops, call_frame, step, stage_map)
    return ledger


def _mean_ledger(
    ledgers: list[pd.DataFrame], steps: int, names: tuple[str, ...]
) -> list[WhatIfLedgerEntry]:
    if not ledgers or not steps:
        return []
    whole = pd.concat(ledgers, ignore_index=True)
    summed = whole.groupby([STAGE, BUCKET, CAUSE], sort=True)[DURATION_NS].sum()
    frame = summed.reset_index()
    return [
        WhatIfLedgerEntry(
            names[code] if 0 <= code < len(names) else str(code),
            str(bucket),
            str(cause or ""),
            int(round(total / steps)),
        )
        for code, bucket, cause, total in zip(
            frame[STAGE].astype(int).tolist(),
            frame[BUCKET].tolist(),
            frame[CAUSE].tolist(),
            frame[DURATION_NS].tolist(),
            strict=True,
        )
    ]
