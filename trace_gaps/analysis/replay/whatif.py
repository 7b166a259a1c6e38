"""What-if over a process's replayed steps: the replay's error, a lever's predicted step and
saving, its ledger, what paces a run-ahead loop, and the lever that fits each candidate
(docs/what-if.md).

A prediction is relative: saving = mean replayed step − mean replayed step with the levers
pulled, over the same steps; predicted step = measured mean step − saving. The replay's
own error (replayed − measured, unchanged) is reported beside it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trace_gaps.analysis.replay.chain import replay_step, runs_ahead
from trace_gaps.analysis.replay.codes import SYNC
from trace_gaps.analysis.replay.joint import JointRun, run_walls
from trace_gaps.analysis.replay.ledger import mean_ledger, replayed_ledger
from trace_gaps.analysis.replay.levers import (
    Lever,
    LeverNotApplicable,
    apply_lever,
    not_applicable,
)
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.schedule import Replayed
from trace_gaps.model import GraphTraceMode
from trace_gaps.records.report import Pace
from trace_gaps.records.whatif import Prediction, ReplayCheck
from trace_gaps.vocabulary import Bucket

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
# formed over what the removed syncs and calls no longer split.
REMOVED_FIRST = ("nosync", "noapi")


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
    """Replay each step unchanged and compare the mean with the measured mean, the steps of
    a loop filling the GPU's queue left out (filling_steps)."""
    filling = filling_steps(models)
    models = [m for m in models if m.step_id not in filling]
    if not models:
        return ReplayCheck(0, 0, 0, 0.0)
    measured = int(round(np.mean([m.end_ns - m.start_ns for m in models])))
    replayed = int(round(np.mean([replay_step(m).wall_ns for m in models])))
    error = 100.0 * (replayed - measured) / measured if measured else 0.0
    return ReplayCheck(len(models), measured, replayed, round(error, 2), filling_steps=len(filling))


# A run-ahead loop is paced by its GPU, its queue full, where at least this share of its
# steps block in a sync on the step before's work.
QUEUED_SHARE = 0.9


def filling_steps(models: list[StepModel]) -> set[int]:
    """The step ids of a GPU-paced run-ahead loop's first steps that did not block on the
    step before's work: the loop filling the GPU's queue (gp_graph's first analysed step ran
    0.85 ms, the others 6.2). A chain replays a step to its steady period, which a filling
    step is not; the check leaves them out."""
    if not models:
        return set()
    blocked = [bool((m.call_waits_previous >= 0).any()) for m in models]
    if sum(blocked) < QUEUED_SHARE * len(models):
        return set()
    filling = set()
    for m, b in sorted(zip(models, blocked, strict=True), key=lambda mb: mb[0].start_ns):
        if b:
            break
        filling.add(m.step_id)
    return filling


# A run-ahead loop is paced by its host where the host waits in syncs for less than this
# share of the step (it would wait for the GPU, were the GPU the slower).
HOST_PACED_SYNC_SHARE = 0.05


def pace_of(
    models: list[StepModel], names: tuple[str, ...], mean_step_ns: int, busy_ns: int
) -> Pace | None:
    """Whether host or GPU sets the step of a loop whose host runs ahead (most of its
    replayed steps wait for the step before's work: chain.runs_ahead); None for a loop
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
    raises LeverNotApplicable, or with strict=False is left out and listed in
    not_applicable. base_walls: the models' unchanged replays' (wall_ns, gpu_end_ns), when
    already known."""
    skipped = [found for lever in levers if (found := not_applicable(lever, names, models))]
    if strict and skipped:
        raise LeverNotApplicable(skipped)
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
        ledger=mean_ledger(ledgers, len(models), names),
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
    skipped = [found for lever in levers if (found := not_applicable(lever, names, everyone))]
    if strict and skipped:
        raise LeverNotApplicable(skipped)
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
        ledger=mean_ledger(ledgers, len(own), names),
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
