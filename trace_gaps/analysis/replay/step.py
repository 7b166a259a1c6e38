"""What-if: a replay of one step from its calls, ops and streams, and levers that change it.

The model of a step (StepModel, cut from a window's frames) is what the export holds:

- the step thread's host timeline, in order: host time (split at stage boundaries, each
  piece charged to the stage open) and the CUDA calls between, each with its duration;
- each GPU op of the process that runs in the step: its stream, duration, stage and the
  call that launched it (-1: launched elsewhere, e.g. another thread or before the step:
  such an op keeps its measured times and only occupies its stream);
- for each call that waits (a sync, a blocking copy): the op it waited for, the latest op
  launched before it (or by it) that ended before it returned, and the time it took after.

Replaying walks the host timeline: a call starts after the host time before it; an op
starts at max(its launching call's start + the launch latency, the end of the op launched
before it on its stream + the stream's spacing); a waiting call ends no earlier than its op's end plus
its measured tail. The launch latency and the spacing are measured on the step itself
(medians over its ops launched onto an idle stream, and over its ops queued behind
another). The step ends where the host timeline ends: the step is a host range.

Levers (Lever) transform a model; replay(lever) − replay(unchanged) is what the fix saves,
so the model's own error mostly cancels (predicted step = measured − saving). What the model
ignores: GPU contention between streams (ops on other streams keep their own timing), clock
changes, cross-stream event waits (not in the export's rows we read), a launch call blocked
by a full launch queue, and a graph's first-replay cost (upload).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.stages import CALL_ROW, STAGE, StageMap, thread_stage_at
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import (
    CALL_CATEGORY,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    STREAM_ID,
    CallCategory,
    GraphTraceMode,
)

# Call categories as small codes in the model.
CATEGORIES = tuple(c.value for c in CallCategory)
_CODE = {name: code for code, name in enumerate(CATEGORIES)}
SYNC = _CODE[CallCategory.SYNC.value]
LAUNCH_GRAPH = _CODE[CallCategory.LAUNCH_GRAPH.value]
EAGER_LAUNCHES = frozenset(
    _CODE[c.value]
    for c in (CallCategory.LAUNCH_KERNEL, CallCategory.LAUNCH_MEMCPY, CallCategory.LAUNCH_MEMSET)
)
API = frozenset(
    _CODE[c.value]
    for c in (
        CallCategory.OTHER,
        CallCategory.ALLOC,
        CallCategory.MODULE_LOAD,
        CallCategory.GRAPH_SETUP,
        CallCategory.LOOKUP,
    )
)

# A CUDA graph launch, measured on the graph replays of five captures (docs/what-if.md):
# the cudaGraphLaunch call costs about this much per node it holds (nsys traces each node
# with --cuda-graph-trace=node, which nearly triples it), and consecutive nodes start this
# far apart on the GPU. A lever's graph runs its first node when the launch call returns
# (seen in two captures; in the others it started 55-83 us after the call began; a measured
# graph launch keeps the step's own median, graph_first_ns).
GRAPH_LAUNCH_NS_PER_NODE = {GraphTraceMode.NODE: 1_400, GraphTraceMode.GRAPH: 500}
GRAPH_NODE_SPACING_NS = 400
# Host gaps at least this long (and LONG_GAP_FACTOR times the stage's median gap) are long
# host gaps (as in long_gaps.py); a graph keeps them, `nogaps` removes them.
LONG_GAP_MIN_NS = 1_000_000
LONG_GAP_FACTOR = 10

# A stream's wait for an event is a dependency between a graph's nodes, and a query returns
# at once (PyTorch's allocator polls events): neither holds the host, so neither ends a run
# of launches a graph lever captures; every other sync (a *Synchronize, a blocking copy) does.
_HOST_FREE_SYNC = re.compile(r"StreamWaitEvent|Query")
# A host wait for one event (cudaEventSynchronize, cuEventSynchronize): the event may have
# been recorded a step earlier (_event_lags).
_EVENT_SYNC = re.compile(r"EventSynchronize")
# An event sync no longer than this did not wait: on the run-ahead captures (H100) a call
# whose event had completed took 4.3-9.9 us, one that waited for the GPU 100 us and more.
EVENT_SYNC_FREE_NS = 20_000

_NONE = -1
# A sync waits for one of the ops launched before it; only this many of the latest are
# searched (the op a sync waits for is among the last few launched).
WAIT_SEARCH_OPS = 4096


@dataclass(frozen=True, slots=True)
class StepModel:
    """One step as replayable arrays (module docstring). Item i of the host timeline is a
    host gap (item_call[i] == -1, duration item_ns[i], stage item_stage[i]) or call
    item_call[i]."""

    step_id: int
    pid: int
    tid: int
    start_ns: int
    end_ns: int
    item_call: np.ndarray  # int32: call index, or -1 for host time
    item_ns: np.ndarray  # int64: host time of a gap item (0 for a call)
    item_stage: np.ndarray  # int32: stage code
    call_ns: np.ndarray  # int64: duration
    call_category: np.ndarray  # int8: index into CATEGORIES
    call_stage: np.ndarray  # int32
    call_cuts_graph: np.ndarray  # bool: a sync the host blocks in; a graph lever stops there
    call_waits_for: np.ndarray  # int32: op index, or -1
    call_tail_ns: np.ndarray  # int64: time after the op it waited for
    op_start: np.ndarray  # int64: measured
    op_ns: np.ndarray  # int64: duration
    op_stream: np.ndarray  # int64: (device << 32) | stream
    op_call: np.ndarray  # int32: launching call, or -1 (keeps its measured times)
    op_stage: np.ndarray  # int32
    op_wait_ns: np.ndarray  # int64: collective wait inside the op (0 for most)
    op_peer_at: np.ndarray  # int64: when a waiting collective's last peer arrived, or -1
    op_graph: np.ndarray  # bool: a node of a graph launch
    op_gap: np.ndarray  # int64: a measured graph node's gap after the node before it, or -1
    launch_ns: int  # median launch latency onto an idle stream (call start -> op start)
    spacing_ns: int  # median spacing of queued ops on a stream
    graph_first_ns: int  # graph launch call start -> its first node
    graph_spacing_ns: int
    # Per call: 1 for an event sync that waits for the previous step's op (call_waits_for
    # is this step's op of the same place, which the next step's sync waits for), else 0.
    call_lag: np.ndarray  # int8
    # Per op: launched by the step's thread before the step (the previous step's work).
    op_carried: np.ndarray  # bool
    # A lever's graph launches (call indexes): their nodes start when the call returns; a
    # measured graph launch's first node starts graph_first_ns after the call starts.
    lever_graphs: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Replayed:
    """One replay: the step's wall time and where every call and op landed."""

    wall_ns: int  # where the host timeline ends
    gpu_end_ns: int  # the latest end of the ops the step launched, from the step's start
    item_start: np.ndarray
    item_end: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray


# ---------------------------------------------------------------------------- the model


def step_model(
    step: pd.Series,
    staged: pd.DataFrame,
    projected: pd.DataFrame,
    stage_map: StageMap,
    mode: GraphTraceMode,
) -> StepModel:
    """Cut the model of one step from a window's staged calls and projected ops."""
    pid, tid = int(step[PID]), int(step[GLOBAL_TID])
    start, end = int(step[START_NS]), int(step[END_NS])
    call_starts = staged[START_NS].to_numpy()
    call_ends = staged[END_NS].to_numpy()
    mine = np.flatnonzero(
        (staged[GLOBAL_TID].to_numpy() == tid) & (call_starts >= start) & (call_starts < end)
    )
    mine = mine[np.argsort(call_starts[mine], kind="stable")]
    # Only outermost calls make the host timeline; a nested call (a driver call inside a
    # runtime call) is part of the call around it.
    outer_of = np.arange(len(mine))
    if len(mine):
        ends = np.minimum(call_ends[mine], end)
        running = np.maximum.accumulate(ends)
        nested = np.r_[False, call_starts[mine][1:] < running[:-1]]
        outer_of = np.maximum.accumulate(np.where(nested, -1, np.arange(len(mine))))
        keep = ~nested
    else:
        keep = np.zeros(0, dtype=bool)
    position = np.full(len(staged), _NONE, dtype=np.int64)
    outer_index = np.cumsum(keep) - 1
    position[mine] = outer_index[outer_of] if len(mine) else position[mine]
    calls = mine[keep]
    c_start = call_starts[calls]
    c_end = np.minimum(np.maximum(call_ends[calls], c_start), end)
    # Only the step's calls are turned into strings (a window holds hundreds of thousands).
    category = (
        staged[CALL_CATEGORY].iloc[calls].astype(str).map(_CODE).fillna(_CODE["other"]).to_numpy()
    ).astype(np.int8)
    c_stage = staged[STAGE].to_numpy()[calls].astype(np.int32)
    c_name = pd.Series(staged[NAME].iloc[calls].to_numpy(), dtype=object).astype(str)
    cuts = (category == SYNC) & ~c_name.str.contains(_HOST_FREE_SYNC).to_numpy()

    # The process's ops in the step: launched by its calls, or running in it.
    o_start, o_end = projected[START_NS].to_numpy(), projected[END_NS].to_numpy()
    call_row = projected[CALL_ROW].to_numpy()
    launched_here = (
        np.where(call_row >= 0, position[np.maximum(call_row, 0)], _NONE)
        if len(position)
        else np.full(len(call_row), _NONE)  # no call in the export: no op launched here
    )
    of_pid = projected[PID].to_numpy() == pid
    take = of_pid & ((launched_here >= 0) | ((o_end > start) & (o_start < end)))
    at = np.flatnonzero(take)
    at = at[np.argsort(o_start[at], kind="stable")]
    op_call = launched_here[at].astype(np.int32)
    op_start = o_start[at]
    op_ns = np.maximum(o_end[at] - op_start, 0)
    stream = (projected[DEVICE_ID].to_numpy()[at].astype(np.int64) << 32) | (
        projected[STREAM_ID].to_numpy()[at].astype(np.int64) & 0xFFFFFFFF
    )
    wait_end = (
        projected[WAIT_END_NS].to_numpy()[at] if WAIT_END_NS in projected.columns else op_start
    )
    op_wait = np.clip(wait_end - op_start, 0, op_ns)
    op_graph = np.zeros(len(at), dtype=bool)
    if len(at) and len(category):
        op_graph = np.where(op_call >= 0, category[np.maximum(op_call, 0)] == LAUNCH_GRAPH, False)
    op_stage = projected[STAGE].to_numpy()[at].astype(np.int32)
    op_gap = _node_gaps(op_call, op_start, op_start + op_ns, stream, op_graph)

    waits, tails = _waits(c_start, c_end, category, op_call, op_start, op_start + op_ns)
    carried = np.zeros(len(at), dtype=bool)
    if len(at) and len(staged):
        rows = call_row[at]
        has_row = (op_call < 0) & (rows >= 0)
        safe = np.maximum(rows, 0)
        carried = has_row & (staged[GLOBAL_TID].to_numpy()[safe] == tid)
        carried &= call_starts[safe] < start
    event_syncs = (category == SYNC) & c_name.str.contains(_EVENT_SYNC).to_numpy()
    lags = _event_lags(
        event_syncs,
        c_start,
        c_end,
        waits,
        tails,
        op_call,
        op_start,
        op_start + op_ns,
        stream,
        carried,
    )
    items_call, items_ns, items_stage = _host_timeline(
        start, end, c_start, c_end, c_stage, stage_map, tid
    )
    launch, spacing, first, node = _latencies(c_start, op_call, op_start, op_ns, stream, op_graph)
    return StepModel(
        step_id=int(step[STEP_ID]),
        pid=pid,
        tid=tid,
        start_ns=start,
        end_ns=end,
        item_call=items_call,
        item_ns=items_ns,
        item_stage=items_stage,
        call_ns=(c_end - c_start).astype(np.int64),
        call_category=category,
        call_stage=c_stage,
        call_cuts_graph=cuts,
        call_waits_for=waits,
        call_tail_ns=tails,
        op_start=op_start.astype(np.int64),
        op_ns=op_ns.astype(np.int64),
        op_stream=stream,
        op_call=op_call,
        op_stage=op_stage,
        op_wait_ns=op_wait.astype(np.int64),
        op_peer_at=np.where(op_wait > 0, op_start + op_wait, _NONE).astype(np.int64),
        op_graph=op_graph,
        op_gap=op_gap,
        launch_ns=launch,
        spacing_ns=spacing,
        graph_first_ns=first,
        graph_spacing_ns=node,
        call_lag=lags,
        op_carried=carried,
    )


def _node_gaps(
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
    stream: np.ndarray,
    op_graph: np.ndarray,
) -> np.ndarray:
    """For a measured graph node after another node of the same launch on its stream, the
    gap between them (the graph's own schedule on the GPU: its dependencies); -1 else."""
    gaps = np.full(len(op_start), _NONE, dtype=np.int64)
    if not len(op_start):
        return gaps
    order = np.lexsort((op_start, stream))
    s, c, g = stream[order], op_call[order], op_graph[order]
    same = np.r_[False, (s[1:] == s[:-1]) & (c[1:] == c[:-1]) & g[1:] & g[:-1] & (c[1:] >= 0)]
    previous_end = np.r_[0, op_end[order][:-1]]
    gaps[order[same]] = np.maximum(op_start[order][same] - previous_end[same], 0)
    return gaps


def _waits(
    c_start: np.ndarray,
    c_end: np.ndarray,
    category: np.ndarray,
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each sync call, the op it waited for (the latest-ending op launched by it or an
    earlier call of the step that ended before it returned) and the time after that op."""
    waits = np.full(len(c_start), _NONE, dtype=np.int32)
    tails = np.zeros(len(c_start), dtype=np.int64)
    syncs = np.flatnonzero(category == SYNC)
    launched = np.flatnonzero(op_call >= 0)
    if not len(syncs) or not len(launched):
        return waits, tails
    # Ops launched by the step's calls, in launch order; a running max of their ends.
    order = launched[np.argsort(op_call[launched], kind="stable")]
    by_call = op_call[order]
    for i in syncs:
        upto = int(np.searchsorted(by_call, i, side="right"))
        if not upto:
            continue
        candidates = order[max(0, upto - WAIT_SEARCH_OPS) : upto]
        ends = op_end[candidates]
        ok = ends <= c_end[i]
        if not ok.any():
            continue
        best = candidates[ok][int(np.argmax(ends[ok]))]
        waits[i] = best
        if op_end[best] > c_start[i]:
            tails[i] = c_end[i] - op_end[best]
    return waits, tails


def _event_lags(
    event_syncs: np.ndarray,
    c_start: np.ndarray,
    c_end: np.ndarray,
    waits: np.ndarray,
    tails: np.ndarray,
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
    stream: np.ndarray,
    carried: np.ndarray,
) -> np.ndarray:
    """Which event syncs wait for the previous step's work (a run-ahead loop reads step N−1's
    output while step N runs: vLLM's async scheduling, SGLang's overlap scheduler). An event
    sync that blocked until an op the step's thread launched before the step ended: lag 1,
    its op here is the last op the step launched before it on that op's stream (the op the
    next step waits for). One that did not block: which event it waited on cannot be told
    from the export; lag 1 is taken, on the latest op launched before it (the record a
    run-ahead loop waits on a step later). waits and tails are updated in place."""
    lags = np.zeros(len(c_start), dtype=np.int8)
    for i in np.flatnonzero(event_syncs):
        during = (op_end > c_start[i]) & (op_end <= c_end[i])
        waited = int(np.flatnonzero(during)[np.argmax(op_end[during])]) if during.any() else -1
        # It blocked for that op when it lasted longer than a call that does not wait and
        # spent longer before the op's end than after it (an op ending inside a call that
        # did not wait is a coincidence).
        blocked = c_end[i] - c_start[i] > EVENT_SYNC_FREE_NS
        if blocked and waited >= 0 and op_end[waited] - c_start[i] > c_end[i] - op_end[waited]:
            if not carried[waited]:
                continue  # it waited for this step's own op: lag 0, as found
            mine = np.flatnonzero((op_call >= 0) & (op_call < i) & (stream == stream[waited]))
            if not len(mine):
                continue
            waits[i] = int(mine[np.argmax(op_call[mine])])
            tails[i] = int(c_end[i] - op_end[waited])
            lags[i] = 1
        elif waits[i] >= 0:
            tails[i] = 0
            lags[i] = 1
    return lags


def _host_timeline(
    start: int,
    end: int,
    c_start: np.ndarray,
    c_end: np.ndarray,
    c_stage: np.ndarray,
    stage_map: StageMap,
    tid: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The host timeline's items: host gaps cut at stage boundaries, and the calls, in time
    order (each gap's pieces, then the call that ends it); vectorised over every gap."""
    thread = stage_map.threads.get(tid)
    cuts = np.zeros(0, dtype=np.int64)
    if thread is not None:
        edges = [*thread.level_starts, *thread.level_ends]
        if edges:
            cuts = np.unique(np.concatenate(edges)).astype(np.int64)
            cuts = cuts[(cuts > start) & (cuts < end)]
    gap_lo = np.r_[start, c_end].astype(np.int64)
    gap_hi = np.maximum(np.r_[c_start, end].astype(np.int64), gap_lo)
    # Gap g holds the cuts strictly inside it, cuts[first[g]:first[g] + inner[g]].
    first = np.searchsorted(cuts, gap_lo, side="right")
    inner = np.maximum(np.searchsorted(cuts, gap_hi, side="left") - first, 0)
    pieces = np.where(gap_hi > gap_lo, inner + 1, 0)
    gap = np.repeat(np.arange(len(gap_lo)), pieces)
    at = np.arange(len(gap)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    # A piece starts at the gap's start or a cut, and ends at a cut or the gap's end; the
    # index past the last cut (and -1) read a padding value that np.where discards.
    padded = np.r_[cuts, 0]
    cut_at = first[gap] + at
    lo = np.where(at > 0, padded[cut_at - 1], gap_lo[gap])
    hi = np.where(at < inner[gap], padded[cut_at], gap_hi[gap])
    mids = (lo + hi) // 2
    codes = (
        thread_stage_at(stage_map, thread, mids)
        if thread is not None
        else np.zeros(len(mids), dtype=np.int64)
    )
    # Items per gap: its pieces, then the call that ends it (the last gap ends the step).
    ends_in_call = np.arange(len(gap_lo)) < len(c_start)
    per_gap = pieces + ends_in_call
    offset = np.cumsum(per_gap) - per_gap
    total = int(per_gap.sum())
    calls = np.full(total, _NONE, dtype=np.int32)
    lengths = np.zeros(total, dtype=np.int64)
    stages = np.zeros(total, dtype=np.int32)
    piece_at = offset[gap] + at
    lengths[piece_at] = hi - lo
    stages[piece_at] = codes
    call_at = (offset + pieces)[ends_in_call]
    calls[call_at] = np.arange(len(c_start), dtype=np.int32)
    stages[call_at] = np.asarray(c_stage, dtype=np.int64)[: len(c_start)]
    return calls, lengths, stages


def _latencies(
    c_start: np.ndarray,
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_ns: np.ndarray,
    stream: np.ndarray,
    op_graph: np.ndarray,
) -> tuple[int, int, int, int]:
    """Median launch latency onto an idle stream and spacing behind a queued op, for
    eager ops and graph nodes (GRAPH_NODE_SPACING_NS where the step has no graph; its
    first-node delay is then never used: a lever's graph starts when its call returns)."""
    launch, spacing = 5_000, 1_000
    first, node = 0, GRAPH_NODE_SPACING_NS
    if not len(op_start) or not len(c_start):
        return launch, spacing, first, node
    order = np.lexsort((op_start, stream))
    s, st, en = stream[order], op_start[order], (op_start + op_ns)[order]
    prev_end = np.r_[np.iinfo(np.int64).min, en[:-1]]
    prev_end[np.r_[True, s[1:] != s[:-1]]] = np.iinfo(np.int64).min
    call = op_call[order]
    has_call = call >= 0
    ready = np.where(has_call, c_start[np.maximum(call, 0)], 0)
    graph = op_graph[order]
    idle = has_call & (prev_end <= ready) & ~graph
    queued = has_call & (prev_end > ready) & (prev_end > np.iinfo(np.int64).min) & ~graph
    if idle.any():
        launch = int(np.median(st[idle] - ready[idle]))
    if queued.any():
        spacing = int(np.median(np.maximum(st[queued] - prev_end[queued], 0)))
    first_nodes = graph & np.r_[True, call[1:] != call[:-1]]
    if first_nodes.any():
        first = int(np.median(st[first_nodes] - ready[first_nodes]))
    later = graph & ~first_nodes
    if later.any():
        node = int(np.median(np.maximum(st[later] - prev_end[later], 0)))
    return launch, spacing, first, node


# ---------------------------------------------------------------------------- the replay


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


def replaying(
    model: StepModel, keys: np.ndarray | None = None
) -> Generator[PeerRequest, int, Replayed]:
    """The replay as a generator: where keys (per op: a collective instance's key, or -1)
    name an op, it yields (key, ready time) and waits to be sent the time the instance's
    last rank is ready (joint.py); the op then works for its op_ns − op_wait_ns from then.
    Without keys it never yields, and a collective that waited works from its measured peer's
    arrival (op_peer_at)."""
    n_ops = len(model.op_start)
    # Per stream, its ops in measured start order, with each op's place in it.
    order = np.lexsort((model.op_start, model.op_stream)).tolist()
    stream_list = model.op_stream.tolist()
    streams: dict[int, list[int]] = {}
    place_in = [0] * n_ops
    for k in order:
        seq = streams.setdefault(stream_list[k], [])
        place_in[k] = len(seq)
        seq.append(k)
    position = dict.fromkeys(streams, 0)
    lowest = -(2**63)
    last_end = dict.fromkeys(streams, lowest)
    ops_of: dict[int, list[int]] = {}
    for k, c in enumerate(model.op_call.tolist()):
        if c >= 0:
            ops_of.setdefault(c, []).append(k)
    call_ns = model.call_ns.tolist()
    category = model.call_category.tolist()
    waits = model.call_waits_for.tolist()
    tails = model.call_tail_ns.tolist()
    # A sync on the previous step's op keeps its measured time in a step replayed alone
    # (replay_chain replays it against the step before).
    lagged = model.call_lag.tolist()
    graph = model.op_graph.tolist()
    node_gap = model.op_gap.tolist()
    op_ns: list[int] = model.op_ns.tolist()
    work_ns: list[int] = (model.op_ns - model.op_wait_ns).tolist()
    peer_at: list[int] = model.op_peer_at.tolist()
    o_start = model.op_start.tolist()
    fixed = (model.op_call < 0).tolist()
    new_start = o_start[:]
    new_end = [o_start[k] + op_ns[k] for k in range(n_ops)]
    launch_ns, spacing_ns = model.launch_ns, model.spacing_ns
    graph_first, graph_spacing = model.graph_first_ns, model.graph_spacing_ns
    lever_graphs = model.lever_graphs
    placed = [False] * n_ops
    key_list = keys.tolist() if keys is not None else None

    def finish(j: int, begin: int) -> int:
        # A collective that waited works once its last peer arrives, as it did (the peers'
        # timing is not this process's to change; `ontime` removes the wait).
        if peer_at[j] >= 0 and not fixed[j]:
            return max(begin, peer_at[j]) + work_ns[j]
        return begin + op_ns[j]

    def place_until(s: int, k: int, ready: int) -> None:
        """Place op k of stream s, launched now, behind the ops placed on the stream and
        those before it in measured order that keep their measured times. An op of a call
        not reached yet is passed over, unplaced: a stream runs its ops in the order they
        are launched (a lever's graph launches ops sooner than the measured order)."""
        seq = streams[s]
        end_s = last_end[s]
        at, stop, passed = position[s], place_in[k], -1
        while at < stop:
            j = seq[at]
            if not placed[j]:
                if fixed[j]:
                    new_end[j] = finish(j, o_start[j])
                    placed[j] = True
                    end_s = max(end_s, new_end[j])
                elif passed < 0:
                    passed = at
            at += 1
        gap = spacing_ns if not graph[k] else node_gap[k] if node_gap[k] >= 0 else graph_spacing
        begin = max(end_s + gap, ready)
        new_start[k] = begin
        placed[k] = True
        last_end[s] = end_s  # the op's own end is added once known (finish_op)
        if passed < 0:
            passed = stop + 1
            while passed < len(seq) and placed[seq[passed]]:
                passed += 1
        position[s] = passed

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
                ready = t + call_ns[c]
            else:
                ready = t + graph_first
            s_k = stream_list[k]
            place_until(s_k, k, ready)
            if key_list is not None and key_list[k] >= 0:
                working = yield (key_list[k], new_start[k])
                new_end[k] = max(new_start[k], working) + work_ns[k]
            else:
                new_end[k] = finish(k, new_start[k])
            last_end[s_k] = max(last_end[s_k], new_end[k])
        end = t + call_ns[c]
        w = waits[c]
        if w >= 0 and category[c] == SYNC and not lagged[c]:
            tail = tails[c]
            own = tail if tail > 0 else call_ns[c]
            end = max(t + own, new_end[w] + tail)
        t = end
        item_end[i] = t
    launched = [new_end[k] for k in range(n_ops) if not fixed[k]]
    return Replayed(
        wall_ns=int(t - model.start_ns),
        gpu_end_ns=int(max(launched) - model.start_ns) if launched else 0,
        item_start=np.asarray(item_start, dtype=np.int64),
        item_end=np.asarray(item_end, dtype=np.int64),
        op_start=np.asarray(new_start, dtype=np.int64),
        op_end=np.asarray(new_end, dtype=np.int64),
    )


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
    place = np.full((copies, n_ops), _NONE, dtype=np.int64)
    for k, idx in enumerate(kept):
        place[k, idx] = offset[k] + np.arange(len(idx))

    def calls_of(k: int, calls: np.ndarray) -> np.ndarray:
        return np.where(calls >= 0, calls + k * n_calls, _NONE)

    waits = []
    for k in range(copies):
        target = model.call_waits_for.astype(np.int64)
        source = np.where(model.call_lag.astype(bool), k - 1, k)
        ok = (target >= 0) & (source >= 0)
        mapped = np.full(n_calls, _NONE, dtype=np.int64)
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
        op_start=model.op_start[ops] + shift,
        op_ns=model.op_ns[ops],
        op_stream=model.op_stream[ops],
        op_call=np.where(
            model.op_call[ops] >= 0, model.op_call[ops] + copy_of_op * n_calls, _NONE
        ).astype(np.int32),
        op_stage=model.op_stage[ops],
        op_wait_ns=model.op_wait_ns[ops],
        op_peer_at=np.where(peer >= 0, peer + shift, _NONE),
        op_graph=model.op_graph[ops],
        op_gap=model.op_gap[ops],
        op_carried=np.zeros(len(ops), dtype=bool),
        lever_graphs=frozenset(c + k * n_calls for k in range(copies) for c in model.lever_graphs),
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


# ---------------------------------------------------------------------------- levers

LEVER_KINDS = ("graph", "nogaps", "host50", "nohost", "nosync", "noapi", "ontime", "sol")
_GPU = re.compile(r"^gpu([1-9][0-9]?)$")  # 1-99: gpu0 would change nothing


class LeverError(ValueError):
    """A lever the user asked for that does not exist or does not apply."""


@dataclass(frozen=True, slots=True)
class Lever:
    """One transformation of a stage: graph, nogaps, host50, nohost, nosync, noapi, ontime,
    gpuN (its GPU work N % faster) or sol (its GPU work down to its speed of light).

    op_scale: what a sol lever scales the stage's ops by, its speed of light over its GPU
    busy time (the report sets it from the stage's GPU metrics); None: not known."""

    stage: str
    kind: str
    op_scale: float | None = None
    pid: int | None = None  # `rank=PID:stage=lever`: that process's steps only; None: all

    @property
    def label(self) -> str:
        rank = f"{RANK_PREFIX}{self.pid}:" if self.pid is not None else ""
        return f"{rank}{self.stage}={self.kind}"

    def of(self, pid: int) -> bool:
        """Whether the lever is pulled on this process's steps."""
        return self.pid is None or self.pid == pid


RANK_PREFIX = "rank="


def parse_levers(text: str) -> list[Lever]:
    """'verify_forward=graph,sample=nosync' -> levers ('rank=2604:forward=graph': that
    process's steps only); raises LeverError on bad syntax."""
    levers = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        pid = None
        if part.startswith(RANK_PREFIX):
            rank, colon, rest = part[len(RANK_PREFIX) :].partition(":")
            if not colon or not rank.strip().isdigit():
                raise LeverError(f"'{part}' is not rank=PID:STAGE=LEVER (PID a process id)")
            pid, part = int(rank), rest.strip()
        stage, eq, kind = part.rpartition("=")
        kind = kind.strip()
        if not eq or not stage.strip():
            raise LeverError(f"'{part}' is not STAGE=LEVER")
        if kind not in LEVER_KINDS and not _GPU.match(kind):
            raise LeverError(
                f"unknown lever '{kind}' in '{part}': use one of {', '.join(LEVER_KINDS)} "
                "or gpuN (GPU work N % faster, N 1-99)"
            )
        levers.append(Lever(stage.strip(), kind, pid=pid))
    if not levers:
        raise LeverError("no lever given: STAGE=LEVER[,STAGE=LEVER...]")
    return levers


def applies(model: StepModel, code: int, kind: str) -> bool:
    """Whether a lever changes anything in this step (its stage has what it removes)."""
    calls_here = model.call_stage == code
    if kind == "graph":
        here = model.call_category[calls_here]
        return bool(np.isin(here, list(EAGER_LAUNCHES)).any()) and not (here == LAUNCH_GRAPH).any()
    if kind == "nosync":
        return bool((model.call_category[calls_here] == SYNC).any())
    if kind == "noapi":
        return bool(np.isin(model.call_category[calls_here], list(API)).any())
    if kind == "ontime":
        return bool((model.op_wait_ns[model.op_stage == code] > 0).any())
    if kind == "nogaps":
        return bool(_long_gap(model, code).any())
    if kind in ("host50", "nohost"):
        return bool((model.item_ns[model.item_stage == code] > 0).any())
    return bool((model.op_stage == code).any())  # gpuN, sol


def apply_lever(
    model: StepModel,
    code: int,
    kind: str,
    mode: GraphTraceMode,
    *,
    op_scale: float | None = None,
) -> StepModel:
    """The model with one lever pulled on the stage of this code (op_scale: a sol lever's,
    Lever.op_scale)."""
    if kind == "graph":
        return _as_graph(model, code, mode)
    if kind in ("nogaps", "host50", "nohost"):
        return _less_host(model, code, kind)
    if kind == "nosync":
        return _without_calls(model, code, model.call_category == SYNC, keep_ops=True)
    if kind == "noapi":
        return _without_calls(model, code, np.isin(model.call_category, list(API)), keep_ops=True)
    if kind == "ontime":
        here = model.op_stage == code
        return replace(
            model,
            op_ns=np.where(here, model.op_ns - model.op_wait_ns, model.op_ns),
            op_wait_ns=np.where(here, 0, model.op_wait_ns),
            op_peer_at=np.where(here, _NONE, model.op_peer_at),
        )
    if kind == "sol":
        if op_scale is None:
            raise LeverError("sol needs the stage's speed of light (GPU metrics)")
        # The running part of each op scales; a collective's wait for a peer is not GPU work.
        here = model.op_stage == code
        running = model.op_ns - model.op_wait_ns
        scaled = model.op_wait_ns + np.round(running * min(op_scale, 1.0)).astype(np.int64)
        return replace(model, op_ns=np.where(here, scaled, model.op_ns))
    match = _GPU.match(kind)
    if match is None:
        raise LeverError(f"unknown lever '{kind}'")
    faster = int(match.group(1))
    here = model.op_stage == code
    scaled = (model.op_ns * (100 - faster) + 50) // 100
    return replace(model, op_ns=np.where(here, scaled, model.op_ns))


def _long_gap(model: StepModel, code: int) -> np.ndarray:
    """Per item: a long host gap of this stage."""
    gaps = (model.item_call < 0) & (model.item_stage == code) & (model.item_ns > 0)
    median = int(np.median(model.item_ns[gaps])) if gaps.any() else 0
    threshold = max(LONG_GAP_MIN_NS, LONG_GAP_FACTOR * median)
    long: np.ndarray = gaps & (model.item_ns >= threshold)
    return long


def _less_host(model: StepModel, code: int, kind: str) -> StepModel:
    gaps = (model.item_call < 0) & (model.item_stage == code)
    if kind == "nogaps":
        long = _long_gap(model, code)
        median = int(np.median(model.item_ns[gaps & ~long])) if (gaps & ~long).any() else 0
        item_ns = np.where(long, median, model.item_ns)
    elif kind == "host50":
        item_ns = np.where(gaps, model.item_ns // 2, model.item_ns)
    else:
        item_ns = np.where(gaps, 0, model.item_ns)
    return replace(model, item_ns=item_ns.astype(np.int64))


def _without_calls(model: StepModel, code: int, which: np.ndarray, keep_ops: bool) -> StepModel:
    """Calls of the stage in `which` cost nothing and wait for nothing; a blocking copy
    among them still launches its op (as an async copy would)."""
    gone = which & (model.call_stage == code)
    return replace(
        model,
        call_ns=np.where(gone, 0, model.call_ns),
        call_category=np.where(gone, _CODE["other"], model.call_category).astype(np.int8),
        call_waits_for=np.where(gone, _NONE, model.call_waits_for).astype(np.int32),
        call_tail_ns=np.where(gone, 0, model.call_tail_ns),
        call_cuts_graph=model.call_cuts_graph & ~gone,
    )


def _as_graph(model: StepModel, code: int, mode: GraphTraceMode) -> StepModel:
    """The stage's eager launches become graph launches: one per run of its launches with
    neither another stage's time nor a sync the host blocks in between them (a graph
    cannot hold the sync, whose wait stays; one instance of a stage that recurs in the step,
    an op-level range, is a run of its own: its ops depend on the other stages' between),
    at the first launch of the run. The host time between a run's launches goes (long
    host gaps stay); the time around a sync stays. A launch costs GRAPH_LAUNCH_NS_PER_NODE a
    node, and no less than one of the launches it replaces; its ops run as graph nodes when
    the call returns, GRAPH_NODE_SPACING_NS apart."""
    eager = np.isin(model.call_category, list(EAGER_LAUNCHES)) & (model.call_stage == code)
    launches = np.flatnonzero(eager)
    if not len(launches):
        return model
    per_node = GRAPH_LAUNCH_NS_PER_NODE.get(mode, GRAPH_LAUNCH_NS_PER_NODE[GraphTraceMode.NODE])
    item_of_call = np.full(len(model.call_ns), _NONE, dtype=np.int64)
    calls_at = np.flatnonzero(model.item_call >= 0)
    item_of_call[model.item_call[calls_at]] = calls_at
    # A run: the launches after the same number of breaks (another stage's item, a sync).
    cuts = np.zeros(len(model.item_call), dtype=bool)
    cuts[calls_at] = model.call_cuts_graph[model.item_call[calls_at]]
    run_of = np.cumsum((model.item_stage != code) | cuts)[item_of_call[launches]]
    call_ns = model.call_ns.copy()
    call_ns[launches] = 0
    category = model.call_category.copy()
    category[launches] = _CODE["other"]
    op_call = model.op_call.copy()
    span = np.zeros(len(model.item_call), dtype=bool)
    firsts = []
    for run in np.unique(run_of):
        members = launches[run_of == run]
        first = int(members[0])
        ops = np.isin(model.op_call, members)
        op_call[ops] = first
        # No cheaper than one of the launches it replaces: a graph of one kernel is launched
        # like the kernel (an assumption; the captures hold no graph of a few nodes).
        one_launch = int(model.call_ns[members].mean())
        call_ns[first] = max(per_node * max(int(ops.sum()), 1), one_launch)
        category[first] = LAUNCH_GRAPH
        span[item_of_call[first] : item_of_call[members[-1]] + 1] = True
        firsts.append(first)
    # The host time between a run's launches goes, but for long gaps: the dispatch that a
    # graph removes.
    between = span & (model.item_call < 0) & (model.item_stage == code)
    item_ns = np.where(between & ~_long_gap(model, code), 0, model.item_ns)
    graphed = np.isin(model.op_call, launches)
    has_graphs = bool(model.op_graph.any())
    return replace(
        model,
        item_ns=item_ns.astype(np.int64),
        call_ns=call_ns,
        call_category=category,
        op_call=op_call.astype(np.int32),
        op_graph=model.op_graph | graphed,
        op_gap=np.where(graphed, _NONE, model.op_gap),
        lever_graphs=model.lever_graphs | frozenset(firsts),
        graph_spacing_ns=model.graph_spacing_ns if has_graphs else GRAPH_NODE_SPACING_NS,
    )
