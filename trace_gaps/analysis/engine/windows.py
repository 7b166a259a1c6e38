"""Analyse the steps a window at a time, so that memory stays bounded on exports of any size.

The steps (of every process) are cut, in start order, into windows of consecutive steps.
Window w owns the time [lo_w, lo_w+1): its steps, and the ops and calls that start there.
Rows arrive as chunks sorted by start time, each table on its own; before window w is
analysed they are read up to

    read_limit_w = max(end of w's last step + reach, lo_w+2)

so that the window sees every op and call overlapping its steps and the ops its steps
launch up to a window later (reach: how far past them its GPU metric samples reach, 0
without metrics; analysis/gpu_metrics.py). After it, rows that end before lo_w+1 are
dropped, except the window's calls (kept one more window for the ops they launched), the
calls of the ops still held (a long kernel keeps its launch while it runs) and the ops of
the calls still held (a copy call that returned after its op is a sync in every window it
reaches); the dropped ops' GPU busy time within reach of lo_w+1 goes on to the next
windows (a sample across lo_w+1 covers them).

Every result is then the whole-trace result, exactly, unless the rows break those
assumptions; the driver checks that they do not, and raises NeedsWholeTrace when
- a table's rows are not in start order;
- an op's launching call was read but already dropped (the op ran over a window after it);
- an op launched in an earlier window was read only after that window was analysed;
- an async copy call is still running at the read limit (its op may not be read yet, and
  whether the call blocked on it decides sync or launch time).
The caller then analyses the whole trace as one window.

This module plans the windows, reads and drops the rows (held by streams.RowStream),
checks the rows hold to the assumptions, and hands each window's rows to frames.py, which
computes its shared frames once (projection, ledger, idle runs, analysed and owned
subsets: frames.WindowFrames). What is measured on them is declared in metrics.py; every
declared metric runs on every window and merges by its rule (metric.py). spans.py runs
the same windows in spans, each read by a worker of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS, wait_ends
from trace_gaps.analysis.engine.frames import WindowInputs, window_frames
from trace_gaps.analysis.engine.metric import MergedMetrics, Metric, merge_parts
from trace_gaps.analysis.engine.metrics import METRICS
from trace_gaps.analysis.engine.streams import READ_AT, RowStream, concat_streams
from trace_gaps.analysis.gpu_metrics import DroppedBusy
from trace_gaps.analysis.host import HeldOsCalls, OsCallIndex, outermost_calls
from trace_gaps.analysis.launch_index import LaunchIndex
from trace_gaps.analysis.stages import (
    CALL_ROW,
    CALL_START_NS,
    LAUNCH_TID,
    project_ops,
)
from trace_gaps.model import (
    CALL_CATEGORY,
    CORRELATION_ID,
    END_NS,
    GLOBAL_TID,
    OS_CALL_COLUMNS,
    PID,
    START_NS,
    CallCategory,
    NeedsWholeTrace,
    empty_frame,
)
from trace_gaps.parallel import PoolTime, ordered_map
from trace_gaps.units import Ns

# About this many ops and calls per window; a window holds at least one step.
WINDOW_ROWS = 400_000
# The first two windows hold this fraction of WINDOW_ROWS each (plan_windows).
FIRST_WINDOWS_SHARE = 4
# Calls are read this far past the ops, so that an op never waits for a call that starts
# a little after it on the CPU clock.
CALL_LEAD_NS = 1_000_000

# A window's OS calls, read when called (on the process that analyses the window), and
# what makes one from the window's steps' span and threads (RowSources.os_calls_near).
OsCallRead = Callable[[], pd.DataFrame]
OsCallsNear = Callable[[int, int, np.ndarray], OsCallRead]

NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class WindowResults:
    """Every metric merged over the windows, and how many windows there were."""

    metrics: MergedMetrics
    windows: int
    pool: PoolTime = field(default_factory=PoolTime)  # where the workers' time went, if any


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """Where each window starts (lo), ends (its last step's end) and reads to."""

    lo: np.ndarray  # lo[0] is the earliest time; lo[w] <= every start in window w
    step_window: np.ndarray  # per row of steps
    last_end: np.ndarray  # the latest step end in each window
    sample_reach_ns: int = 0  # how far a GPU metric sample reaches (gpu_metrics.py)

    @property
    def count(self) -> int:
        return len(self.lo)

    def hi(self, w: int) -> int:
        """The end (exclusive) of the time window w owns."""
        return int(self.lo[w + 1]) if w + 1 < self.count else NEVER

    def read_limit(self, w: int) -> int:
        """Read rows up to here before analysing w (module docstring)."""
        return max(int(self.last_end[w]) + self.sample_reach_ns, self.hi(w + 1))

    def window_at(self, times: np.ndarray) -> np.ndarray:
        """The window that owns each time."""
        return np.maximum(np.searchsorted(self.lo, times, side="right") - 1, 0)


def plan_windows(
    steps: pd.DataFrame, rows: int, window_rows: int | None, *, sample_reach_ns: Ns = 0
) -> WindowPlan:
    """Cut the steps, in start order, into windows of about window_rows ops and calls each.

    window_rows None: one window. rows: the ops and calls of the trace (an estimate will do).
    sample_reach_ns: how far a GPU metric sample reaches (gpu_metrics.sample_reach_ns).
    """
    starts = steps[START_NS].to_numpy()
    per_window = max(1, len(steps))  # no step at all (no op with a possible time): one window
    if window_rows is not None and rows > 0:
        per_window = max(1, int(len(steps) * window_rows // rows))
    ordered = np.sort(starts)
    # Cut at every per_window-th step start; equal starts stay in one window. The first
    # two windows are a quarter as long: the analysis waits for their rows (read to the
    # start of window 2) before it starts, and later reads overlap it.
    first = max(1, per_window // FIRST_WINDOWS_SHARE)
    at = np.r_[first, 2 * first + np.arange(0, len(ordered), per_window)]
    cuts = np.unique(ordered[at[at < len(ordered)]]) if per_window < len(ordered) else ordered[:0]
    lo = np.r_[np.iinfo(np.int64).min, cuts].astype(np.int64)
    step_window = np.searchsorted(lo, starts, side="right") - 1
    last_end = np.full(len(lo), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_end, step_window, steps[END_NS].to_numpy())
    return WindowPlan(
        lo=lo, step_window=step_window, last_end=last_end, sample_reach_ns=sample_reach_ns
    )


def analyse_in_windows(
    op_streams: list[RowStream],
    call_stream: RowStream,
    inputs: WindowInputs,
    plan: WindowPlan,
    os_calls_near: OsCallsNear,
    on_window: Callable[[int, int], None] | None = None,
    metrics: tuple[Metric[Any, Any], ...] = METRICS,
    jobs: int = 1,
) -> WindowResults:
    """Run every window of the plan over the streams, in time order, computing each metric
    on each window, and merge the metrics; see the module docstring. os_calls_near: each
    window's OS calls (RowSources.os_calls_near), read where the window is analysed.

    jobs > 1: this process reads the rows, joins ops to calls and checks them, window by
    window, while up to `jobs` worker processes compute the windows' metrics (parallel.py);
    the parts merge in window order, so the result is the same. Workers compute the
    declared METRICS, so other metrics run in this process.
    """
    parts: dict[str, list[Any]] = {metric.name: [] for metric in metrics}
    pooled = jobs > 1 and plan.count > 1 and metrics == METRICS
    compute: Callable[..., list[Any]] = (
        measure_window if pooled else functools.partial(measure_window, metrics=metrics)
    )
    tasks = window_tasks(op_streams, call_stream, inputs, plan, os_calls_near)
    pool = PoolTime()
    for w, window_parts in enumerate(
        ordered_map(compute, inputs, tasks, jobs=jobs if pooled else 1, timing=pool)
    ):
        for metric, part in zip(metrics, window_parts, strict=True):
            parts[metric.name].append(part)
        if on_window is not None:
            on_window(w + 1, plan.count)
    return WindowResults(merge_parts(metrics, parts), plan.count, pool)


def window_tasks(
    op_streams: list[RowStream],
    call_stream: RowStream,
    inputs: WindowInputs,
    plan: WindowPlan,
    os_calls_near: OsCallsNear,
    first: int = 0,
    stop: int | None = None,
) -> Iterator[
    tuple[pd.DataFrame, pd.DataFrame, LaunchIndex, pd.DataFrame, int, int, OsCallRead, DroppedBusy]
]:
    """Per window of [first, stop), in order: read its rows, join its ops to their calls,
    check the rows hold to the module's assumptions, and hand over (projected ops, staged
    calls, the calls' LaunchIndex, steps, lo, hi, the reading of its OS calls, the busy time
    of the ops dropped before it) for measure_window, only the rows it can use
    (_rows_for_window); then drop the rows no later window needs.

    first > 0 (a span, read from before first - 1 on: analyse_in_spans): window first - 1 is
    read, joined and dropped as the whole stream would, to hold what the stream holds at
    first, but not handed over, and its rows count as read before any window (a late read
    there is the earlier span's to find)."""
    stop = plan.count if stop is None else stop
    dropped_corr: dict[int, int] = {}  # per pid, the largest correlation id of a dropped launch
    dropped_busy = DroppedBusy.none()
    reach = plan.sample_reach_ns
    for w in range(max(first - 1, 0), stop):
        warm_up = w < first
        limit = plan.read_limit(w)
        for stream in op_streams:
            stream.fill(limit, -1 if warm_up else w)
        call_stream.fill(limit if limit == NEVER else limit + CALL_LEAD_NS, -1 if warm_up else w)
        calls = call_stream.frame()  # staged as they were read (see analyse_rows)
        index = LaunchIndex.of(calls)
        projected = project_ops(concat_streams(op_streams), calls, inputs.stage_map, index)
        if not warm_up:
            projected = projected.assign(
                **{WAIT_END_NS: wait_ends(projected, inputs.collective_waits)}
            )
            _check_launches(projected, plan, w, limit, dropped_corr)
            _check_copies(calls, limit)
            steps = inputs.steps[plan.step_window == w]
            lo, hi = int(plan.lo[w]), plan.hi(w)
            window_ops, window_calls = _rows_for_window(projected, calls, steps, hi, reach)
            near = _os_calls_of(steps, os_calls_near)
            held = index.prefix(len(window_calls))
            yield window_ops, window_calls, held, steps, lo, hi, near, dropped_busy
            del window_ops, window_calls  # as large as the window's rows: let go
        del calls, index
        if w + 1 < stop:
            kept = _drop_finished(op_streams, call_stream, projected, plan, w, dropped_corr)
            if reach:
                dropped_busy = dropped_busy.adding(
                    projected[~kept], since_ns=int(plan.lo[w + 1]) - reach
                )
        del projected


def _rows_for_window(
    projected: pd.DataFrame, calls: pd.DataFrame, steps: pd.DataFrame, hi: int, reach: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The held ops and calls a window's metrics can use, without the rows read ahead.

    A window uses the rows that reach into its steps, run in its analysed steps or start in
    the time it owns, or run in a GPU metric sample across its steps' end: all start before
    until = max(its steps' end + reach, hi), and so do the calls
    of those ops (a call starts before its op, but for clock skew: the calls are cut after
    the last call of a kept op). The calls stay a prefix, so that the ops' CALL_ROW
    positions stay valid; an op launched by a kept call stays, however late it starts
    (it was queued across the window). The metrics come out the same as on every held row.
    """
    if hi == NEVER or steps.empty:
        return projected, calls
    until = max(int(steps[END_NS].max()) + reach, hi)
    call_rows = int(np.searchsorted(calls[START_NS].to_numpy(), until, side="left"))
    call_row = projected[CALL_ROW].to_numpy()
    keep = (projected[START_NS].to_numpy() < until) | ((call_row >= 0) & (call_row < call_rows))
    if keep.any():
        call_rows = max(call_rows, int(call_row[keep].max()) + 1)
    return projected[keep], calls.iloc[:call_rows]


def measure_window(
    inputs: WindowInputs,
    projected: pd.DataFrame,
    calls: pd.DataFrame,
    index: LaunchIndex,
    steps: pd.DataFrame,
    lo: int,
    hi: int,
    os_calls: OsCallRead,
    dropped_busy: DroppedBusy,
    *,
    metrics: tuple[Metric[Any, Any], ...] = METRICS,
) -> list[Any]:
    """Every metric's part of one window (lo and hi: the time it owns; os_calls: reads the
    OS calls near its steps, here; dropped_busy: the GPU busy time of the ops dropped before
    it), in metrics' order. A worker process runs it with the declared METRICS (its lambdas
    are not sent)."""
    inputs = replace(inputs, os_calls=OsCallIndex.of(outermost_calls(os_calls())))
    frames = window_frames(inputs, projected, calls, index, steps, lo, hi, dropped_busy)
    return [metric.compute(frames) for metric in metrics]


def _os_calls_of(steps: pd.DataFrame, os_calls_near: OsCallsNear) -> OsCallRead:
    """The reading of the OS calls near these steps (OsCallIndex.near_steps answers from
    them as from every call): those of the steps' threads overlapping their span."""
    if steps.empty:
        return HeldOsCalls(empty_frame(OS_CALL_COLUMNS))
    lo, hi = int(steps[START_NS].min()), int(steps[END_NS].max())
    return os_calls_near(lo, hi, np.unique(steps[GLOBAL_TID].to_numpy()))


def _check_launches(
    projected: pd.DataFrame, plan: WindowPlan, w: int, limit: int, dropped_corr: dict[int, int]
) -> None:
    """Raise NeedsWholeTrace when an op's launch fell out of the windows (module docstring)."""
    if projected.empty:
        return
    matched = projected[LAUNCH_TID].to_numpy() >= 0
    if dropped_corr:
        unmatched = projected[
            ~matched & (projected[CORRELATION_ID] >= 0) & (projected[START_NS] < limit)
        ]
        ceiling = unmatched[PID].map(dropped_corr).fillna(-1).to_numpy()
        if (unmatched[CORRELATION_ID].to_numpy() <= ceiling).any():
            raise NeedsWholeTrace("a GPU op ran more than a window after its launching call")
    if w == 0:
        return
    # Only ops launched before this window can have been read late (no frame copied).
    call_starts = projected[CALL_START_NS].to_numpy()
    earlier = matched & (call_starts < int(plan.lo[w]))
    launch_window = plan.window_at(call_starts[earlier])
    late = projected[READ_AT].to_numpy()[earlier] > launch_window
    if late.any():
        raise NeedsWholeTrace("a GPU op started more than a window after its launching call")


_COPY_LAUNCHES = [CallCategory.LAUNCH_MEMCPY.value, CallCategory.LAUNCH_MEMSET.value]


def _check_copies(staged: pd.DataFrame, limit: int) -> None:
    """Raise NeedsWholeTrace when an async copy call runs across the read limit."""
    if limit == NEVER or staged.empty:
        return
    across = (staged[START_NS].to_numpy() < limit) & (staged[END_NS].to_numpy() > limit)
    if across.any() and staged.loc[across, CALL_CATEGORY].isin(_COPY_LAUNCHES).any():
        raise NeedsWholeTrace("an async copy call outlasts its window")


def _drop_finished(
    op_streams: list[RowStream],
    call_stream: RowStream,
    projected: pd.DataFrame,
    plan: WindowPlan,
    w: int,
    dropped_corr: dict[int, int],
) -> np.ndarray:
    """Drop the rows no later window can need (module docstring); return which ops stay.

    projected: the window's ops (the op streams' rows, in order) joined to their calls.
    """
    next_lo = int(plan.lo[w + 1])
    calls = call_stream.frame()
    call_starts = calls[START_NS].to_numpy()
    needed = (calls[END_NS].to_numpy() > next_lo) | (call_starts >= next_lo)
    ends, starts = projected[END_NS].to_numpy(), projected[START_NS].to_numpy()
    call_row = projected[CALL_ROW].to_numpy()
    # An op stays while it runs, and while its launching call does: a copy call that
    # returned only after its op finished is a sync in every window it reaches.
    launch_needed = needed[np.maximum(call_row, 0)] if len(calls) else np.zeros(len(call_row), bool)
    op_keep: np.ndarray = (ends > next_lo) | (starts >= next_lo) | ((call_row >= 0) & launch_needed)
    at = 0
    for stream in op_streams:
        rows = len(stream.frame())
        stream.keep(op_keep[at : at + rows])
        at += rows
    # The calls of the ops kept: a long kernel keeps its launch while it runs.
    launched_kept = call_row[op_keep]
    if not len(calls):
        return op_keep
    # Any call may have launched an op (cudaMemcpy, older runtimes' cudaLaunch, ...): keep
    # this window's calls one window more, for the ops that run after it.
    this_window = call_starts >= int(plan.lo[w])
    keep = needed | this_window
    keep[launched_kept[launched_kept >= 0]] = True
    ids = calls[CORRELATION_ID].to_numpy()
    gone = np.flatnonzero(~keep & (ids >= 0))
    if len(gone):
        # The largest id dropped per process (a group-by of arrays, not of a frame's copy).
        latest = pd.Series(ids[gone]).groupby(calls[PID].to_numpy()[gone]).max()
        for pid, corr in zip(latest.index.tolist(), latest.tolist(), strict=True):
            dropped_corr[pid] = max(dropped_corr.get(pid, -1), corr)
    call_stream.keep(keep)
    return op_keep
