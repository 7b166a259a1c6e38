"""The replay of one step: where each of its calls and ops lands (docs/what-if.md).

Replaying walks the host timeline: a call starts after the host time before it; an op
starts at max(its launching call's start + the launch latency, the end of the op launched
before it on its stream + the stream's spacing); a waiting call ends no earlier than its
op's end plus its measured tail. The step ends where the host timeline ends: the step is a
host range. A sync on the previous step's op (a run-ahead loop) keeps its measured time
here; chain.py replays such a step against the step before.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from trace_gaps.analysis.replay.codes import SYNC
from trace_gaps.analysis.replay.model import EARLY_GRAPH_FIRST_PCT, StepModel


@dataclass(frozen=True, slots=True)
class Replayed:
    """One replay: the step's wall time and where every call and op landed."""

    wall_ns: int  # where the host timeline ends
    gpu_end_ns: int  # the latest end of the ops the step launched, from the step's start
    item_start: np.ndarray
    item_end: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray


def replay(model: StepModel) -> Replayed:
    """Replay the step (module docstring): a Python loop over its calls and ops, on lists."""
    run = replaying(model)
    try:
        next(run)
    except StopIteration as done:
        result: Replayed = done.value
        return result
    raise AssertionError("a replay without instance keys never waits for a peer")


# What a joint replay's step hands its coordinator at a collective: (the instance's key, the
# time this rank's op is ready); it is sent back the time the instance starts working.
PeerRequest = tuple[int, int]


class _Streams:
    """The streams of one replay: each stream's ops in measured start order, where each op
    has landed so far, and where each stream's placed work ends (lists: the replay is a
    Python loop)."""

    __slots__ = (
        "carried",
        "fixed",
        "graph",
        "graph_spacing",
        "last_end",
        "new_end",
        "new_start",
        "node_gap",
        "o_start",
        "op_ns",
        "peer_at",
        "place_in",
        "placed",
        "position",
        "seqs",
        "spacing_ns",
        "stream_of",
        "work_ns",
    )

    def __init__(self, model: StepModel) -> None:
        n_ops = len(model.op_start)
        # Per stream, its ops in measured start order, with each op's place in it.
        order = np.lexsort((model.op_start, model.op_stream)).tolist()
        self.stream_of: list[int] = model.op_stream.tolist()
        self.seqs: dict[int, list[int]] = {}
        self.place_in = [0] * n_ops
        for k in order:
            seq = self.seqs.setdefault(self.stream_of[k], [])
            self.place_in[k] = len(seq)
            seq.append(k)
        self.position = dict.fromkeys(self.seqs, 0)
        self.last_end = dict.fromkeys(self.seqs, -(2**63))
        self.graph: list[bool] = model.op_graph.tolist()
        self.node_gap: list[int] = model.op_gap.tolist()
        self.op_ns: list[int] = model.op_ns.tolist()
        self.work_ns: list[int] = (model.op_ns - model.op_wait_ns).tolist()
        self.peer_at: list[int] = model.op_peer_at.tolist()
        self.o_start: list[int] = model.op_start.tolist()
        self.fixed: list[bool] = (model.op_call < 0).tolist()
        self.carried: list[bool] = model.op_carried.tolist()
        self.new_start = self.o_start[:]
        self.new_end = [self.o_start[k] + self.op_ns[k] for k in range(n_ops)]
        self.placed = [False] * n_ops
        self.spacing_ns = model.spacing_ns
        self.graph_spacing = model.graph_spacing_ns

    def finish(self, j: int, begin: int) -> int:
        """Where op j ends when it begins at `begin`."""
        # A collective that waited works once its last peer arrives, as it did (the peers'
        # timing is not this process's to change; `ontime` removes the wait).
        if self.peer_at[j] >= 0 and not self.fixed[j]:
            return max(begin, self.peer_at[j]) + self.work_ns[j]
        return begin + self.op_ns[j]

    def place(self, k: int, ready: int) -> int:
        """Place op k, launched now, and say where it begins: behind the ops placed on its
        stream and those before it in measured order that keep their measured times. An op
        of a call not reached yet is passed over, unplaced: a stream runs its ops in the
        order they are launched (a lever's graph launches ops sooner than the measured
        order)."""
        s = self.stream_of[k]
        seq, placed, fixed = self.seqs[s], self.placed, self.fixed
        end_s = self.last_end[s]
        at, stop, passed = self.position[s], self.place_in[k], -1
        while at < stop:
            j = seq[at]
            if not placed[j]:
                if fixed[j]:
                    begin = self.o_start[j]
                    # The step before's ops were all queued when the step began: behind
                    # the one before, as far after it as measured (levers shorten them).
                    if self.carried[j] and self.node_gap[j] >= 0 and end_s > -(2**63):
                        begin = end_s + self.node_gap[j]
                        self.new_start[j] = begin
                    self.new_end[j] = self.finish(j, begin)
                    placed[j] = True
                    end_s = max(end_s, self.new_end[j])
                elif passed < 0:
                    passed = at
            at += 1
        node_gap = self.node_gap[k]
        gap = (
            self.spacing_ns
            if not self.graph[k]
            else node_gap
            if node_gap >= 0
            else self.graph_spacing
        )
        begin = max(end_s + gap, ready)
        self.new_start[k] = begin
        placed[k] = True
        self.last_end[s] = end_s  # the op's own end is added once known (replaying)
        if passed < 0:
            passed = stop + 1
            while passed < len(seq) and placed[seq[passed]]:
                passed += 1
        self.position[s] = passed
        return begin


def replaying(
    model: StepModel, keys: np.ndarray | None = None
) -> Generator[PeerRequest, int, Replayed]:
    """The replay as a generator: where keys (per op: a collective instance's key, or -1)
    name an op, it yields (key, ready time) and waits to be sent the time the instance's
    last rank is ready (joint.py); the op then works for its op_ns − op_wait_ns from then.
    Without keys it never yields, and a collective that waited works from its measured peer's
    arrival (op_peer_at)."""
    streams = _Streams(model)
    ops_of: dict[int, list[int]] = {}
    for k, c in enumerate(model.op_call.tolist()):
        if c >= 0:
            ops_of.setdefault(c, []).append(k)
    call_ns = model.call_ns.tolist()
    category = model.call_category.tolist()
    waits = model.call_waits_for.tolist()
    tails = model.call_tail_ns.tolist()
    # A sync on the previous step's op keeps its measured time in a step replayed alone
    # (chain.replay_chain replays it against the step before).
    lagged = model.call_lag.tolist()
    place, finish = streams.place, streams.finish
    graph, work_ns, stream_of = streams.graph, streams.work_ns, streams.stream_of
    new_end, last_end = streams.new_end, streams.last_end
    launch_ns, graph_first = model.launch_ns, model.graph_first_ns
    lever_graphs, early_graphs = model.lever_graphs, model.early_graphs
    key_list = keys.tolist() if keys is not None else None

    t = model.start_ns
    item_call = model.item_call.tolist()
    item_ns = model.item_ns.tolist()
    item_start = [0] * len(item_call)
    item_end = [0] * len(item_call)
    for i, c in enumerate(item_call):
        item_start[i] = t
        if c < 0:
            t += item_ns[i]
            item_end[i] = t
            continue
        for k in ops_of.get(c, ()):
            if not graph[k]:
                ready = t + launch_ns
            elif c in lever_graphs:
                early = c in early_graphs
                ready = t + (call_ns[c] * EARLY_GRAPH_FIRST_PCT // 100 if early else call_ns[c])
            else:
                ready = t + graph_first
            begin = place(k, ready)
            if key_list is not None and key_list[k] >= 0:
                working = yield (key_list[k], begin)
                end_k = max(begin, working) + work_ns[k]
            else:
                end_k = finish(k, begin)
            new_end[k] = end_k
            s_k = stream_of[k]
            last_end[s_k] = max(last_end[s_k], end_k)
        end = t + call_ns[c]
        w = waits[c]
        if w >= 0 and category[c] == SYNC and not lagged[c]:
            tail = tails[c]
            own = tail if tail > 0 else call_ns[c]
            end = max(t + own, new_end[w] + tail)
        t = end
        item_end[i] = t
    launched = [end for end, fixed in zip(new_end, streams.fixed, strict=True) if not fixed]
    return Replayed(
        wall_ns=int(t - model.start_ns),
        gpu_end_ns=int(max(launched) - model.start_ns) if launched else 0,
        item_start=np.asarray(item_start, dtype=np.int64),
        item_end=np.asarray(item_end, dtype=np.int64),
        op_start=np.asarray(streams.new_start, dtype=np.int64),
        op_end=np.asarray(new_end, dtype=np.int64),
    )
