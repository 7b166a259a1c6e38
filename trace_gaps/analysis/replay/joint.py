"""Ranks in lockstep: one replay of every rank's step at once (docs/what-if.md).

Ranks that meet at collectives cannot be replayed one at a time: a rank's collective waits
for its peers, and a lever on one rank moves every other rank's waits. The joint replay
takes, for each analysed iteration, the step of every rank that runs the same collective
instances (matched by collectives.match_collectives), and replays them together: a
collective's ops all work from the moment the last rank's op is ready (the latest of their
replayed starts), for the instance's transfer time, the work of the op that waited least
(its duration less its measured wait). The ranks' replays run side by side, each stopping
at a collective until the ranks holding that instance have reached it (_coordinate). The
run's step is the slowest rank's.

One export's processes only: ranks in several exports are analysed apart (their replay
models are in separate analyses), and a prediction there stays per rank.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import EXPORT, FAMILY, INSTANCE, CollectiveMatch
from trace_gaps.analysis.replay.chain import Chain, chain_of, chain_result
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.schedule import Replayed, replaying
from trace_gaps.model import PID, START_NS

NO_KEY = -1
# A joint step is replayed as this many iterations back to back (joint_steps).
JOINT_COPIES = 3
COPY_SHIFT = 40  # a copy's instance keys: the step's, plus the copy's number this far up


@dataclass(frozen=True, slots=True)
class Iteration:
    """One iteration of the run: each rank's step that runs the same collective instances,
    and each of its ops' instance key (NO_KEY: not a matched collective)."""

    models: tuple[StepModel, ...]
    keys: tuple[np.ndarray, ...]


def iterations(models: dict[int, StepModel], match: CollectiveMatch | None) -> list[Iteration]:
    """The run's iterations: for every step of the first rank whose collectives matched,
    the step of each other rank sharing most of its instances; none where fewer than two
    processes have replayed steps or no collective matched."""
    pids = sorted({m.pid for m in models.values()})
    if match is None or len(pids) < 2 or not match.any:
        return []
    ops = match.ops
    ops = ops[(ops[EXPORT] == 0) & ops["matched"].astype(bool)]
    if ops.empty:
        return []
    families = {name: code for code, name in enumerate(sorted(ops[FAMILY].unique()))}
    key_of = ops[FAMILY].map(families).to_numpy(dtype=np.int64) << 32 | ops[INSTANCE].to_numpy(
        dtype=np.int64
    )
    by_pid = {
        int(cast(int, pid)): (
            rows[START_NS].to_numpy(dtype=np.int64),
            key_of[rows.index.to_numpy()],
        )
        for pid, rows in ops.reset_index(drop=True).groupby(PID)
    }
    keyed: dict[int, list[tuple[StepModel, np.ndarray]]] = {pid: [] for pid in pids}
    for model in sorted(models.values(), key=lambda m: (m.pid, m.start_ns)):
        keyed[model.pid].append((model, _op_keys(model, by_pid.get(model.pid))))
    owner: dict[int, dict[int, int]] = {}  # pid -> key -> index of its model
    for pid in pids[1:]:
        owner[pid] = {}
        for index, (_, keys) in enumerate(keyed[pid]):
            for key in keys[keys != NO_KEY].tolist():
                owner[pid][key] = index
    found = []
    for model, keys in keyed[pids[0]]:
        mine = keys[keys != NO_KEY].tolist()
        if not mine:
            continue
        group, group_keys = [model], [keys]
        for pid in pids[1:]:
            hits = [owner[pid][k] for k in mine if k in owner[pid]]
            if not hits:
                break
            index = max(set(hits), key=hits.count)
            group.append(keyed[pid][index][0])
            group_keys.append(keyed[pid][index][1])
        else:
            found.append(Iteration(tuple(group), tuple(group_keys)))
    return found


def _op_keys(model: StepModel, known: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Each op's instance key, by its measured start on this process (NO_KEY where none)."""
    keys = np.full(len(model.op_start), NO_KEY, dtype=np.int64)
    if known is None or not len(model.op_start):
        return keys
    starts, instance_keys = known
    order = np.argsort(starts, kind="stable")
    starts, instance_keys = starts[order], instance_keys[order]
    at = np.searchsorted(starts, model.op_start)
    inside = at < len(starts)
    hit = inside & (starts[np.minimum(at, len(starts) - 1)] == model.op_start)
    keys[hit] = instance_keys[at[hit]]
    return keys


def joint_steps(
    iteration: Iteration, models: tuple[StepModel, ...] | None = None, copies: int = JOINT_COPIES
) -> list[Replayed]:
    """Each rank's step replayed with the others (joint_replay), as `copies` iterations back
    to back (chain.chain_of): the ranks' steps start at different moments of an iteration
    and a lever moves them; the steady period (chain.chain_result) is the step. models:
    the ranks' models with levers pulled (iteration.models' order), the measured ones if
    None."""
    models = models if models is not None else iteration.models
    chains = [chain_of(m, copies) for m in models]
    keys = tuple(
        np.where(k[_ops_of(c)] != NO_KEY, k[_ops_of(c)] + (c.copy_of_op << COPY_SHIFT), NO_KEY)
        for k, c in zip(iteration.keys, chains, strict=True)
    )
    measured = tuple(chain_of(m, copies).model for m in iteration.models)
    results = joint_replay(Iteration(measured, keys), tuple(c.model for c in chains))
    return [chain_result(c, r, m) for c, r, m in zip(chains, results, models, strict=True)]


def _ops_of(chain: Chain) -> np.ndarray:
    """Per op of the chained model, the op of the step it copies."""
    ops = np.zeros(len(chain.copy_of_op), dtype=np.int64)
    for k in range(chain.copies):
        here = chain.place[k] >= 0
        ops[chain.place[k][here]] = np.flatnonzero(here)
    return ops


def joint_replay(
    iteration: Iteration, models: tuple[StepModel, ...] | None = None
) -> list[Replayed]:
    """Replay the iteration's ranks together (module docstring); models: the ranks' models
    with levers pulled (same order and ops as iteration.models), the measured ones if None."""
    models = models if models is not None else iteration.models
    # An op launched elsewhere keeps its measured times: it meets no peer here.
    keys = tuple(
        np.where(m.op_call >= 0, k, NO_KEY) for m, k in zip(models, iteration.keys, strict=True)
    )
    # The instance's transfer: the work of the op that waited least (measured).
    work = pd.concat(
        [
            pd.Series((m.op_ns - m.op_wait_ns)[k != NO_KEY], index=k[k != NO_KEY])
            for m, k in zip(iteration.models, keys, strict=True)
        ]
    )
    transfer = work.groupby(level=0).min() if len(work) else pd.Series(dtype=np.int64)
    prepared = []
    for model, k in zip(models, keys, strict=True):
        keyed = k != NO_KEY
        own = np.zeros(len(k), dtype=np.int64)
        own[keyed] = transfer.reindex(k[keyed]).to_numpy(dtype=np.int64)
        prepared.append(
            replace(
                model,
                op_wait_ns=np.where(keyed, np.maximum(model.op_ns - own, 0), model.op_wait_ns),
            )
        )
    return _coordinate(prepared, keys)


def _coordinate(models: list[StepModel], keys: tuple[np.ndarray, ...]) -> list[Replayed]:
    """Run every rank's replay (schedule.replaying) side by side: a rank that reaches a
    collective stops there until every rank whose step holds that instance has reached it,
    and all of them go on from the latest of their ready times. Ranks reach their instances
    in the same order; where they do not (an instance one rank's step lacks), the waiting
    instance whose first arrival is earliest goes on with the ranks that reached it."""
    runs = [replaying(m, k) for m, k in zip(models, keys, strict=True)]
    owners: dict[int, set[int]] = {}
    for rank, k in enumerate(keys):
        for key in k[k != NO_KEY].tolist():
            owners.setdefault(key, set()).add(rank)
    results: list[Replayed | None] = [None] * len(runs)
    waiting: dict[int, dict[int, int]] = {}  # key -> rank -> ready time

    def advance(rank: int, value: int | None) -> None:
        try:
            key, ready = runs[rank].send(value) if value is not None else next(runs[rank])
        except StopIteration as done:
            results[rank] = done.value
            return
        waiting.setdefault(key, {})[rank] = ready

    for rank in range(len(runs)):
        advance(rank, None)
    while waiting:
        complete = [key for key, arrived in waiting.items() if set(arrived) >= owners[key]]
        key = complete[0] if complete else min(waiting, key=lambda key: min(waiting[key].values()))
        arrived = waiting.pop(key)
        working = max(arrived.values())
        for rank in sorted(arrived):
            advance(rank, working)
    return [r for r in results if r is not None]


# A lever is priced on at most this many of the run's iterations, evenly spaced.
PRICED_ITERATIONS = 6


@dataclass(frozen=True, slots=True)
class JointRun:
    """The iterations a run's levers are priced on, their unchanged joint replays, and the
    run's measured step (the shortest of its ranks' mean steps: ranks in lockstep share
    one, and a prediction never exceeds any rank's)."""

    iterations: tuple[Iteration, ...]
    base: tuple[tuple[Replayed, ...], ...]
    run_ns: int

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(m.pid for m in self.iterations[0].models) if self.iterations else ()


def joint_run(
    models: dict[int, StepModel], match: CollectiveMatch | None, mean_step_ns: dict[int, int]
) -> JointRun | None:
    """The run's joint replay, or None where its ranks do not meet at matched collectives."""
    found = iterations(models, match)
    if not found:
        return None
    if len(found) > PRICED_ITERATIONS:
        picks = np.linspace(0, len(found) - 1, PRICED_ITERATIONS).round().astype(int)
        found = [found[i] for i in picks]
    pids = [m.pid for m in found[0].models]
    run_ns = min(mean_step_ns.get(pid, 0) for pid in pids)
    if run_ns <= 0:
        return None
    base = tuple(tuple(joint_steps(it)) for it in found)
    return JointRun(tuple(found), base, run_ns)


def run_walls(
    run: JointRun, pulled: list[tuple[StepModel, ...]]
) -> tuple[list[int], list[list[Replayed]]]:
    """Each iteration's run step with the ranks' models replaced by `pulled`, the slowest
    rank's steady step (as whatif.steady_wall: no shorter than its GPU work less the
    overhang the unchanged replay had), and the ranks' replays."""
    walls, replays = [], []
    for iteration, base, models in zip(run.iterations, run.base, pulled, strict=True):
        results = joint_steps(iteration, models)
        walls.append(
            max(
                max(r.wall_ns, r.gpu_end_ns - max(b.gpu_end_ns - b.wall_ns, 0))
                for b, r in zip(base, results, strict=True)
            )
        )
        replays.append(results)
    return walls, replays
