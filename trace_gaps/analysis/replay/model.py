"""The model of one step, as the export holds it: its host timeline, calls, GPU ops and
streams (StepModel), cut from a window's frames (step_model).

- the step thread's host timeline, in order: host time (split at stage boundaries, each
  piece charged to the stage open) and the CUDA calls between, each with its duration;
- each GPU op of the process that runs in the step: its stream, duration, stage and the
  call that launched it (-1: launched elsewhere, e.g. another thread or before the step:
  such an op keeps its measured times and only occupies its stream);
- for each call that waits (a sync, a blocking copy): the op it waited for, the latest op
  launched before it (or by it) that ended before it returned, and the time it took after
  (waits.py);
- the step's launch latency and stream spacing, measured on the step itself (medians over
  its ops launched onto an idle stream, and over its ops queued behind another).

What the model ignores: GPU contention between streams (ops on other streams keep their own
timing), clock changes, cross-stream event waits (not in the export's rows we read), a
launch call blocked by a full launch queue, and a graph's first-replay cost (upload).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS, is_collective
from trace_gaps.analysis.replay.codes import (
    CATEGORY_CODE,
    LAUNCH_GRAPH,
    NO_INDEX,
    OTHER,
    SYNC,
)
from trace_gaps.analysis.replay.host_timeline import host_timeline
from trace_gaps.analysis.replay.waits import event_lags, find_waits
from trace_gaps.analysis.stages import CALL_ROW, STAGE, StageMap
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
    GraphTraceMode,
)

# A CUDA graph launch, measured on the graph replays of five captures (docs/what-if.md):
# the cudaGraphLaunch call costs about this much per node it holds (nsys traces each node
# with --cuda-graph-trace=node, which nearly triples it), and consecutive nodes start this
# far apart on the GPU. A lever's graph of kernels only runs its first node when the launch
# call returns (the eight such graph captures: 0-5 us after it); one that holds a copy, a
# memset or a collective kernel runs it this far into the call (the three such captures, a
# speculative verify with 8 memsets and a TP=2 forward with NCCL all-reduces: 12 to 16 % of
# the call, median 13 %; docs/what-if.md). A measured graph launch keeps the step's own
# median, graph_first_ns.
GRAPH_LAUNCH_NS_PER_NODE = {GraphTraceMode.NODE: 1_400, GraphTraceMode.GRAPH: 500}
GRAPH_NODE_SPACING_NS = 400
EARLY_GRAPH_FIRST_PCT = 13

# A stream's wait for an event is a dependency between a graph's nodes, and a query returns
# at once (PyTorch's allocator polls events): neither holds the host, so neither ends a run
# of launches a graph lever captures; every other sync (a *Synchronize, a blocking copy) does.
_HOST_FREE_SYNC = re.compile(r"StreamWaitEvent|Query")
# A host wait for one event (cudaEventSynchronize, cuEventSynchronize): the event may have
# been recorded a step earlier (waits.event_lags).
_EVENT_SYNC = re.compile(r"EventSynchronize")
# The host records an event (cudaEventRecord, cudaEventRecordWithFlags, cuEventRecord).
_EVENT_RECORD = re.compile(r"EventRecord")


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
    # int64: a measured graph node's gap after the node before it of its launch, or an op of
    # the step before's (op_carried) after another on its stream; -1 else
    op_gap: np.ndarray
    launch_ns: int  # median launch latency onto an idle stream (call start -> op start)
    spacing_ns: int  # median spacing of queued ops on a stream
    graph_first_ns: int  # graph launch call start -> its first node
    graph_spacing_ns: int
    # Per call: 1 for an event sync that waits for the previous step's op (call_waits_for
    # is this step's op of the same place, which the next step's sync waits for), else 0.
    call_lag: np.ndarray  # int8
    # Per call: for a lag-1 sync that blocked, the op of the step before (op_carried) it
    # waited for, else -1.
    call_waits_previous: np.ndarray  # int32
    # Per op: launched by the step's thread before the step (the previous step's work).
    op_carried: np.ndarray  # bool
    # Per op: a collective library's kernel (collectives.COLLECTIVE_TABLE, by name).
    op_collective: np.ndarray  # bool
    # A lever's graph launches (call indexes): their nodes start when the call returns, or
    # EARLY_GRAPH_FIRST_PCT into it for those in early_graphs (a graph holding a copy, a
    # memset or a collective); a measured graph launch's first node starts graph_first_ns
    # after the call starts.
    lever_graphs: frozenset[int] = frozenset()
    early_graphs: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class _StepCalls:
    """The step thread's outermost calls in the step, in time order (a nested call, a
    driver call inside a runtime call, is part of the call around it)."""

    position: np.ndarray  # per staged call: the index of the outer call it is in, or -1
    start: np.ndarray
    end: np.ndarray  # clipped to the step's end
    category: np.ndarray  # int8: index into CATEGORIES
    stage: np.ndarray  # int32
    cuts_graph: np.ndarray  # bool
    event_sync: np.ndarray  # bool
    event_record: np.ndarray  # bool


@dataclass(frozen=True, slots=True)
class _StepOps:
    """The process's ops in the step (launched by its calls, or running in it), in measured
    start order."""

    call: np.ndarray  # int32: launching call, or -1
    start: np.ndarray
    ns: np.ndarray
    stream: np.ndarray  # (device << 32) | stream
    wait: np.ndarray
    graph: np.ndarray
    stage: np.ndarray  # int32
    carried: np.ndarray  # bool: launched by the step's thread before the step
    collective: np.ndarray  # bool: a collective library's kernel


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
    calls = _step_calls(staged, tid, start, end)
    ops = _step_ops(projected, staged, calls, pid, tid, start, end)
    op_end = ops.start + ops.ns
    waits, tails = find_waits(calls.start, calls.end, calls.category, ops.call, ops.start, op_end)
    lags, previous = event_lags(
        calls.event_sync,
        calls.event_record,
        calls.start,
        calls.end,
        waits,
        tails,
        ops.call,
        ops.start,
        op_end,
        ops.stream,
        ops.carried,
    )
    items_call, items_ns, items_stage = host_timeline(
        start, end, calls.start, calls.end, calls.stage, stage_map, tid
    )
    launch, spacing, first, node = _latencies(
        calls.start, calls.end, ops.call, ops.start, ops.ns, ops.stream, ops.graph
    )
    return StepModel(
        step_id=int(step[STEP_ID]),
        pid=pid,
        tid=tid,
        start_ns=start,
        end_ns=end,
        item_call=items_call,
        item_ns=items_ns,
        item_stage=items_stage,
        call_ns=(calls.end - calls.start).astype(np.int64),
        call_category=calls.category,
        call_stage=calls.stage,
        call_cuts_graph=calls.cuts_graph,
        call_waits_for=waits,
        call_tail_ns=tails,
        op_start=ops.start.astype(np.int64),
        op_ns=ops.ns.astype(np.int64),
        op_stream=ops.stream,
        op_call=ops.call,
        op_stage=ops.stage,
        op_wait_ns=ops.wait.astype(np.int64),
        op_peer_at=np.where(ops.wait > 0, ops.start + ops.wait, NO_INDEX).astype(np.int64),
        op_graph=ops.graph,
        op_gap=_node_gaps(ops.call, ops.start, op_end, ops.stream, ops.graph, ops.carried),
        launch_ns=launch,
        spacing_ns=spacing,
        graph_first_ns=first,
        graph_spacing_ns=node,
        call_lag=lags,
        call_waits_previous=previous,
        op_carried=ops.carried,
        op_collective=ops.collective,
    )


def _step_calls(staged: pd.DataFrame, tid: int, start: int, end: int) -> _StepCalls:
    """The step thread's calls that start in the step, nested ones folded into their outer."""
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
    position = np.full(len(staged), NO_INDEX, dtype=np.int64)
    outer_index = np.cumsum(keep) - 1
    position[mine] = outer_index[outer_of] if len(mine) else position[mine]
    calls = mine[keep]
    c_start = call_starts[calls]
    # Only the step's calls are turned into strings (a window holds hundreds of thousands).
    category = (
        staged[CALL_CATEGORY].iloc[calls].astype(str).map(CATEGORY_CODE).fillna(OTHER).to_numpy()
    ).astype(np.int8)
    c_name = pd.Series(staged[NAME].iloc[calls].to_numpy(), dtype=object).astype(str)
    return _StepCalls(
        position=position,
        start=c_start,
        end=np.minimum(np.maximum(call_ends[calls], c_start), end),
        category=category,
        stage=staged[STAGE].to_numpy()[calls].astype(np.int32),
        cuts_graph=(category == SYNC) & ~c_name.str.contains(_HOST_FREE_SYNC).to_numpy(),
        event_sync=(category == SYNC) & c_name.str.contains(_EVENT_SYNC).to_numpy(),
        event_record=c_name.str.contains(_EVENT_RECORD).to_numpy(),
    )


def _step_ops(
    projected: pd.DataFrame,
    staged: pd.DataFrame,
    calls: _StepCalls,
    pid: int,
    tid: int,
    start: int,
    end: int,
) -> _StepOps:
    """The process's ops in the step: launched by its calls, or running in it."""
    position = calls.position
    o_start, o_end = projected[START_NS].to_numpy(), projected[END_NS].to_numpy()
    call_row = projected[CALL_ROW].to_numpy()
    launched_here = (
        np.where(call_row >= 0, position[np.maximum(call_row, 0)], NO_INDEX)
        if len(position)
        else np.full(len(call_row), NO_INDEX)  # no call in the export: no op launched here
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
    op_graph = np.zeros(len(at), dtype=bool)
    if len(at) and len(calls.category):
        op_graph = np.where(
            op_call >= 0, calls.category[np.maximum(op_call, 0)] == LAUNCH_GRAPH, False
        )
    carried = np.zeros(len(at), dtype=bool)
    if len(at) and len(staged):
        rows = call_row[at]
        has_row = (op_call < 0) & (rows >= 0)
        safe = np.maximum(rows, 0)
        carried = has_row & (staged[GLOBAL_TID].to_numpy()[safe] == tid)
        carried &= staged[START_NS].to_numpy()[safe] < start
    return _StepOps(
        call=op_call,
        start=op_start,
        ns=op_ns,
        stream=stream,
        wait=np.clip(wait_end - op_start, 0, op_ns),
        graph=op_graph,
        stage=projected[STAGE].to_numpy()[at].astype(np.int32),
        carried=carried,
        collective=_collective(projected, at),
    )


_collective_names: list[tuple[pd.Index, np.ndarray]] = []  # the last names' answer


def _collective(projected: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """Per op at these rows: a collective library's kernel, by name. The names of a
    window's ops are one categorical, matched once for all its steps."""
    if NAME not in projected.columns or not len(at):
        return np.zeros(len(at), dtype=bool)
    names = projected[NAME]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return np.asarray(is_collective(pd.Index(names.to_numpy()[at])), dtype=bool)
    categories = names.cat.categories
    if not _collective_names or _collective_names[0][0] is not categories:
        _collective_names[:] = [(categories, np.r_[is_collective(categories), False])]
    codes = names.cat.codes.to_numpy()[at]
    found: np.ndarray = _collective_names[0][1][codes]  # code -1 (no name): the appended False
    return found


def _node_gaps(
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
    stream: np.ndarray,
    op_graph: np.ndarray,
    carried: np.ndarray,
) -> np.ndarray:
    """For a measured graph node after another node of the same launch on its stream, the
    gap between them (the graph's own schedule on the GPU: its dependencies); for an op of
    the step before after another on its stream, the same (both were queued before the step
    began); -1 else."""
    gaps = np.full(len(op_start), NO_INDEX, dtype=np.int64)
    if not len(op_start):
        return gaps
    order = np.lexsort((op_start, stream))
    s, c, g, q = stream[order], op_call[order], op_graph[order], carried[order]
    same_stream = np.r_[False, s[1:] == s[:-1]]
    nodes = np.r_[False, (c[1:] == c[:-1]) & g[1:] & g[:-1] & (c[1:] >= 0)]
    queued = np.r_[False, q[1:] & q[:-1]]
    same = same_stream & (nodes | queued)
    previous_end = np.r_[0, op_end[order][:-1]]
    gaps[order[same]] = np.maximum(op_start[order][same] - previous_end[same], 0)
    return gaps


def _latencies(
    c_start: np.ndarray,
    c_end: np.ndarray,
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_ns: np.ndarray,
    stream: np.ndarray,
    op_graph: np.ndarray,
) -> tuple[int, int, int, int]:
    """Median launch latency onto an idle stream and spacing behind a queued op, for
    eager ops and graph nodes (GRAPH_NODE_SPACING_NS where the step has no graph; its
    first-node delay is then never used: a lever's graph starts when its call returns).
    A graph's first-node delay is measured on launches onto an idle stream; where every
    launch was queued behind earlier work (a run-ahead loop the GPU paces), its first node
    is taken to start as the call returns, as a lever's graph's does."""
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
    onto_idle = first_nodes & (prev_end <= ready)
    if onto_idle.any():
        first = int(np.median(st[onto_idle] - ready[onto_idle]))
    elif first_nodes.any():
        calls = call[first_nodes]
        first = int(np.median(c_end[calls] - c_start[calls]))
    later = graph & ~first_nodes
    if later.any():
        node = int(np.median(np.maximum(st[later] - prev_end[later], 0)))
    return launch, spacing, first, node
