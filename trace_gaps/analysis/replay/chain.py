"""The run-ahead chain: a step whose host waits for the previous step's work (vLLM V1's
async scheduling, SGLang's overlap scheduler) replayed as copies back to back, and its
steady period taken as the step (docs/what-if.md, "Run-ahead loops")."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from trace_gaps.analysis.replay.codes import NO_INDEX
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.schedule import Replayed, replay

# A run-ahead step is replayed as this many copies back to back: the first starts from the
# measured state (the previous step's work on the GPU at its measured times), the others
# from the replayed one; the step is the steady period between the first copy's end and
# the last's.
CHAIN_COPIES = 4


def runs_ahead(model: StepModel) -> bool:
    """Whether the step's host waits for the previous step's work (an event sync of lag 1):
    the loop runs ahead of the GPU, and a step replayed alone would miss that its GPU work
    overlaps the next step's host time."""
    return bool(model.call_lag.any())


def replay_step(model: StepModel) -> Replayed:
    """The step's replay: alone, or for a run-ahead step, its steady period (replay_chain)."""
    return replay_chain(model) if runs_ahead(model) else replay(model)


@dataclass(frozen=True, slots=True)
class Chain:
    """Copies of one step back to back as one model (replay_chain): op j of copy k is op
    place[k, j] of the chained model (-1: not in that copy)."""

    model: StepModel
    copies: int
    n_items: int
    place: np.ndarray  # int64 (copies, ops of the step)
    copy_of_op: np.ndarray  # int64, per op of the chained model


def chain_of(model: StepModel, copies: int = CHAIN_COPIES) -> Chain:
    """The step's copies as one model: copy k's ops queue behind copy k−1's, its lag-1 syncs
    wait for copy k−1's ops, and the ops the first copy inherited from the step before
    (op_carried) are not launched again; copy k's measured times are moved k steps on."""
    n_calls, n_ops = len(model.call_ns), len(model.op_start)
    period = max(model.end_ns - model.start_ns, 1)
    kept = [
        np.arange(n_ops) if k == 0 else np.flatnonzero(~model.op_carried) for k in range(copies)
    ]
    offset = np.cumsum([0] + [len(idx) for idx in kept])
    place = np.full((copies, n_ops), NO_INDEX, dtype=np.int64)
    for k, idx in enumerate(kept):
        place[k, idx] = offset[k] + np.arange(len(idx))

    def calls_of(k: int, calls: np.ndarray) -> np.ndarray:
        return np.where(calls >= 0, calls + k * n_calls, NO_INDEX)

    waits = []
    lagged = model.call_lag.astype(bool)
    for k in range(copies):
        # Copy k's lag-1 syncs wait for copy k−1's op; the first copy's, for the op of the
        # step before that it waited for as measured (its times moved by the levers).
        target = np.where(
            lagged & (k == 0), model.call_waits_previous, model.call_waits_for
        ).astype(np.int64)
        source = np.where(lagged & (k > 0), k - 1, k)
        ok = target >= 0
        mapped = np.full(n_calls, NO_INDEX, dtype=np.int64)
        mapped[ok] = place[source[ok], target[ok]]
        waits.append(mapped)
    ops = np.concatenate(kept)
    copy_of_op = np.repeat(np.arange(copies), [len(idx) for idx in kept])
    shift = copy_of_op.astype(np.int64) * period
    peer = model.op_peer_at[ops]
    chained = replace(
        model,
        item_call=np.concatenate([calls_of(k, model.item_call) for k in range(copies)]).astype(
            np.int32
        ),
        item_ns=np.tile(model.item_ns, copies),
        item_stage=np.tile(model.item_stage, copies),
        call_ns=np.tile(model.call_ns, copies),
        call_category=np.tile(model.call_category, copies),
        call_stage=np.tile(model.call_stage, copies),
        call_cuts_graph=np.tile(model.call_cuts_graph, copies),
        call_waits_for=np.concatenate(waits).astype(np.int32),
        call_tail_ns=np.tile(model.call_tail_ns, copies),
        call_lag=np.zeros(copies * n_calls, dtype=np.int8),
        call_waits_previous=np.full(copies * n_calls, NO_INDEX, dtype=np.int32),
        op_start=model.op_start[ops] + shift,
        op_ns=model.op_ns[ops],
        op_stream=model.op_stream[ops],
        op_call=np.where(
            model.op_call[ops] >= 0, model.op_call[ops] + copy_of_op * n_calls, NO_INDEX
        ).astype(np.int32),
        op_stage=model.op_stage[ops],
        op_wait_ns=model.op_wait_ns[ops],
        op_peer_at=np.where(peer >= 0, peer + shift, NO_INDEX),
        op_graph=model.op_graph[ops],
        op_gap=model.op_gap[ops],
        # The first copy's ops of the step before stay so (they re-flow on their stream).
        op_carried=model.op_carried[ops] & (copy_of_op == 0),
        op_collective=model.op_collective[ops],
        lever_graphs=frozenset(c + k * n_calls for k in range(copies) for c in model.lever_graphs),
        early_graphs=frozenset(c + k * n_calls for k in range(copies) for c in model.early_graphs),
    )
    return Chain(chained, copies, len(model.item_call), place, copy_of_op)


def chain_result(chain: Chain, result: Replayed, model: StepModel) -> Replayed:
    """The chained replay as one step's: wall_ns (and gpu_end_ns) the steady period, the
    larger of the host's and the GPU's, each from the first copy's end to the last's over
    copies − 1 (the GPU's exceeds the host's where nothing holds the host back: the queue
    grows until the GPU sets the pace); the item and op arrays the last copy's, moved to
    start at the step's start."""
    copies, n_items = chain.copies, chain.n_items
    n_ops = chain.place.shape[1]
    host_end = result.item_end[np.arange(1, copies + 1) * n_items - 1] if n_items else None
    launched = chain.model.op_call >= 0
    gpu_end = np.array(
        [
            result.op_end[launched & (chain.copy_of_op == k)].max()
            if (launched & (chain.copy_of_op == k)).any()
            else 0
            for k in range(copies)
        ]
    )
    host_period = (host_end[-1] - host_end[0]) / (copies - 1) if host_end is not None else 0
    gpu_period = (gpu_end[-1] - gpu_end[0]) / (copies - 1) if gpu_end[0] else 0
    wall = int(round(max(host_period, gpu_period)))
    last = slice((copies - 1) * n_items, copies * n_items)
    moved = int(result.item_start[last][0] - model.start_ns) if n_items else 0
    op_start = np.full(n_ops, model.start_ns, dtype=np.int64)
    op_end = np.full(n_ops, model.start_ns, dtype=np.int64)
    here = chain.place[copies - 1] >= 0
    op_start[here] = result.op_start[chain.place[copies - 1][here]] - moved
    op_end[here] = result.op_end[chain.place[copies - 1][here]] - moved
    return Replayed(
        wall_ns=wall,
        gpu_end_ns=wall,
        item_start=result.item_start[last] - moved,
        item_end=result.item_end[last] - moved,
        op_start=op_start,
        op_end=op_end,
    )


def replay_chain(model: StepModel, copies: int = CHAIN_COPIES) -> Replayed:
    """Replay `copies` copies of the step back to back on one host timeline and one set of
    streams (chain_of), and take the steady period (chain_result)."""
    chain = chain_of(model, copies)
    return chain_result(chain, replay(chain.model), model)
