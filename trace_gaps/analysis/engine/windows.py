"""Analyse the steps a window at a time, so that memory stays bounded on exports of any size.

The steps (of every process) are cut, in start order, into windows of consecutive steps.
Window w owns the time [lo_w, lo_w+1): its steps, and the ops and calls that start there.
Rows arrive as chunks sorted by start time, each table on its own; before window w is
analysed they are read up to

    read_limit_w = max(end of w's last step, lo_w+2)

so that the window sees every op and call overlapping its steps and the ops its steps
launch up to a window later. After it, rows that end before lo_w+1 are dropped, except
the window's calls (kept one more window for the ops they launched), the calls of the
ops still held (a long kernel keeps its launch while it runs) and the ops of the calls
still held (a copy call that returned after its op is a sync in every window it reaches).

Every result is then the whole-trace result, exactly, unless the rows break those
assumptions; the driver checks that they do not, and raises NeedsWholeTrace when
- a table's rows are not in start order;
- an op's launching call was read but already dropped (the op ran over a window after it);
- an op launched in an earlier window was read only after that window was analysed;
- an async copy call is still running at the read limit (its op may not be read yet, and
  whether the call blocked on it decides sync or launch time).
The caller then analyses the whole trace as one window.

This module is the engine: it plans the windows, streams and drops the rows, checks the
rows hold to the assumptions, and computes each window's shared frames once (projection,
ledger, idle runs, analysed and owned subsets: metrics.WindowFrames). What is measured
on them is declared in metrics.py; the engine runs every declared metric on every window
and merges each by its rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS, wait_ends
from trace_gaps.analysis.engine.metrics import (
    METRICS,
    MergedMetrics,
    Metric,
    WindowFrames,
    WindowInputs,
    merge_parts,
)
from trace_gaps.analysis.host import HeldOsCalls, OsCallIndex, outermost_calls
from trace_gaps.analysis.launches import (
    calls_in_analysed_steps,
    mark_blocking_copies,
    ops_in_analysed_steps,
)
from trace_gaps.analysis.ledger import build_ledger
from trace_gaps.analysis.stages import (
    CALL_END_NS,
    CALL_ROW,
    CALL_START_NS,
    LAUNCH_TID,
    STAGE,
    LaunchIndex,
    project_ops,
)
from trace_gaps.model import (
    API_CALL_COLUMNS,
    CALL_CATEGORY,
    CORRELATION_ID,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    OS_CALL_COLUMNS,
    PID,
    START_NS,
    CallCategory,
    NeedsWholeTrace,
    SpanSource,
    empty_frame,
)
from trace_gaps.parallel import PoolTime, can_start_pool, ordered_map

# About this many ops and calls per window; a window holds at least one step.
WINDOW_ROWS = 400_000
# The first two windows hold this fraction of WINDOW_ROWS each (plan_windows).
FIRST_WINDOWS_SHARE = 4
# Calls are read this far past the ops, so that an op never waits for a call that starts
# a little after it on the CPU clock.
CALL_LEAD_NS = 1_000_000

READ_AT = "read_at"  # the window whose reading brought the row in

# A window's OS calls, read when called (on the process that analyses the window), and
# what makes one from the window's steps' span and threads (RowSources.os_calls_near).
OsCallRead = Callable[[], pd.DataFrame]
OsCallsNear = Callable[[int, int, np.ndarray], OsCallRead]

_NEVER = np.iinfo(np.int64).max


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

    @property
    def count(self) -> int:
        return len(self.lo)

    def hi(self, w: int) -> int:
        """The end (exclusive) of the time window w owns."""
        return int(self.lo[w + 1]) if w + 1 < self.count else _NEVER

    def read_limit(self, w: int) -> int:
        """Read rows up to here before analysing w (module docstring)."""
        return max(int(self.last_end[w]), self.hi(w + 1))

    def window_at(self, times: np.ndarray) -> np.ndarray:
        """The window that owns each time."""
        return np.maximum(np.searchsorted(self.lo, times, side="right") - 1, 0)


def plan_windows(steps: pd.DataFrame, rows: int, window_rows: int | None) -> WindowPlan:
    """Cut the steps, in start order, into windows of about window_rows ops and calls each.

    window_rows None: one window. rows: the ops and calls of the trace (an estimate will do).
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
    return WindowPlan(lo=lo, step_window=step_window, last_end=last_end)


class RowStream:
    """Rows of one table, chunk by chunk in start order; holds those still needed."""

    def __init__(
        self,
        name: str,
        chunks: Iterator[pd.DataFrame],
        empty: pd.DataFrame,
        prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
    ) -> None:
        """prepare: applied to each chunk as it is read (the calls are staged once)."""
        self.name = name
        self.prepare = prepare
        empty = prepare(empty) if prepare is not None else empty
        self.empty = empty.assign(**{READ_AT: np.zeros(0, dtype=np.int32)})
        self.chunks = chunks
        self.held: list[pd.DataFrame] = []
        self.last_start = np.iinfo(np.int64).min
        self.done = False

    def fill(self, limit: int, window: int) -> None:
        """Read chunks until every row starting before limit is held."""
        while not self.done and self.last_start < limit:
            chunk = next(self.chunks, None)
            if chunk is None:
                self.done = True
                return
            if chunk.empty:
                continue
            starts = chunk[START_NS].to_numpy()
            if starts[0] < self.last_start or (np.diff(starts) < 0).any():
                raise NeedsWholeTrace(f"{self.name} rows are not in start order")
            self.last_start = int(starts[-1])
            if self.prepare is not None:
                chunk = self.prepare(chunk)
            self.held.append(chunk.assign(**{READ_AT: np.int32(window)}))

    def frame(self) -> pd.DataFrame:
        """The rows held, as one frame with a fresh RangeIndex (positions are row ids)."""
        if len(self.held) > 1:
            self.held = [pd.concat(self.held, ignore_index=True)]
        return self.held[0] if self.held else self.empty

    def keep(self, keep: np.ndarray) -> None:
        frame = self.frame()
        if len(frame):
            # The rows kept are mostly a suffix (those starting after the next window's
            # start) and a few before it (still running): the suffix is held as a slice,
            # not copied; frame() concatenates the parts once, with the next chunks.
            dropped = np.flatnonzero(~keep)
            tail = int(dropped[-1]) + 1 if len(dropped) else 0
            self.held = [frame.iloc[:tail][keep[:tail]], frame.iloc[tail:]]


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
        _window_parts if pooled else functools.partial(_window_parts, metrics=metrics)
    )
    tasks = _window_tasks(op_streams, call_stream, inputs, plan, os_calls_near)
    pool = PoolTime()
    for w, window_parts in enumerate(
        ordered_map(compute, inputs, tasks, jobs=jobs if pooled else 1, timing=pool)
    ):
        for metric, part in zip(metrics, window_parts, strict=True):
            parts[metric.name].append(part)
        if on_window is not None:
            on_window(w + 1, plan.count)
    return WindowResults(merge_parts(metrics, parts), plan.count, pool)


def _window_tasks(
    op_streams: list[RowStream],
    call_stream: RowStream,
    inputs: WindowInputs,
    plan: WindowPlan,
    os_calls_near: OsCallsNear,
    first: int = 0,
    stop: int | None = None,
) -> Iterator[tuple[pd.DataFrame, pd.DataFrame, LaunchIndex, pd.DataFrame, int, int, OsCallRead]]:
    """Per window of [first, stop), in order: read its rows, join its ops to their calls,
    check the rows hold to the module's assumptions, and hand over (projected ops, staged
    calls, the calls' LaunchIndex, steps, lo, hi, the reading of its OS calls) for
    _window_parts, only the rows it can use (_rows_for_window); then drop the rows no later
    window needs.

    first > 0 (a span, read from before first - 1 on: analyse_in_spans): window first - 1 is
    read, joined and dropped as the whole stream would, to hold what the stream holds at
    first, but not handed over, and its rows count as read before any window (a late read
    there is the earlier span's to find)."""
    stop = plan.count if stop is None else stop
    dropped_corr: dict[int, int] = {}  # per pid, the largest correlation id of a dropped launch
    for w in range(max(first - 1, 0), stop):
        warm_up = w < first
        limit = plan.read_limit(w)
        for stream in op_streams:
            stream.fill(limit, -1 if warm_up else w)
        call_stream.fill(limit if limit == _NEVER else limit + CALL_LEAD_NS, -1 if warm_up else w)
        calls = call_stream.frame()  # staged as they were read (see analyse_rows)
        index = LaunchIndex.of(calls)
        projected = project_ops(_concat_streams(op_streams), calls, inputs.stage_map, index)
        if not warm_up:
            projected = projected.assign(
                **{WAIT_END_NS: wait_ends(projected, inputs.collective_waits)}
            )
            _check_launches(projected, plan, w, limit, dropped_corr)
            _check_copies(calls, limit)
            steps = inputs.steps[plan.step_window == w]
            lo, hi = int(plan.lo[w]), plan.hi(w)
            window_ops, window_calls = _rows_for_window(projected, calls, steps, hi)
            near = _os_calls_of(steps, os_calls_near)
            yield window_ops, window_calls, index.prefix(len(window_calls)), steps, lo, hi, near
            del window_ops, window_calls  # as large as the window's rows: let go
        del calls, index
        if w + 1 < stop:
            _drop_finished(op_streams, call_stream, projected, plan, w, dropped_corr)
        del projected


# Spans per worker (analyse_in_spans), and windows per span (span_window_rows). A span reads
# two windows more than its own (its warm-up, and the next span's first, read ahead for its
# last), and each window costs a fixed part besides its rows: on 1.1M kernels run one span
# after the other, 4 spans of 4-5 windows took 8.56 s, 4 of 8 windows 8.85 s, 8 of 8 windows
# 11.93 s (one process: 5.95 s). Equal spans keep the workers evenly loaded.
SPANS_PER_JOB = 1
WINDOWS_PER_SPAN = 4
SPAN_WINDOW_ROWS_MIN = 50_000  # each window has a fixed cost besides its rows (above)


def span_window_rows(rows: int, jobs: int, window_rows: int) -> int:
    """The window size for analyse_in_spans: SPANS_PER_JOB spans per worker, each of about
    WINDOWS_PER_SPAN windows, none over window_rows (the memory bound) nor under
    SPAN_WINDOW_ROWS_MIN, unless window_rows is smaller still. Any size gives the same
    result."""
    wanted = rows // max(1, jobs * SPANS_PER_JOB * WINDOWS_PER_SPAN)
    return min(window_rows, max(SPAN_WINDOW_ROWS_MIN, wanted))


def spans_can_run(jobs: int, plan: WindowPlan) -> bool:
    """Whether analyse_in_spans pays: workers to run them, and two windows a span at least."""
    return jobs > 1 and plan.count >= 4 and can_start_pool()


def analyse_in_spans(
    spans: SpanSource,
    staging: Callable[[pd.DataFrame], pd.DataFrame],
    process: int | None,
    inputs: WindowInputs,
    plan: WindowPlan,
    on_window: Callable[[int, int], None] | None = None,
    jobs: int = 2,
) -> WindowResults:
    """Every window of the plan, the windows cut into consecutive spans, each span read and
    analysed by a worker process of its own from the export itself (nsys/spans.py): the
    reading is shared by the workers, not done by this process. The result is
    analyse_in_windows', exactly.

    A span of windows [a, b) reads from lo(a - 1) less the export's longest op or call and
    CALL_LEAD_NS (window a - 1 is its warm-up: _window_tasks). staging(calls) stages each
    chunk of calls as read (it pickles); process: only that pid's rows. Raises
    NeedsWholeTrace as the windows would (a span's rows out of order, an op far from its
    launch), and where an op's launch lies before the span's reading: the caller then
    streams the export in this process (analyse_in_windows).
    """
    count = max(2, min(jobs * SPANS_PER_JOB, plan.count // 2))  # 2 windows a span at least
    cuts = np.unique(np.linspace(0, plan.count, count + 1).round().astype(np.int64))
    longest = spans.longest_row_ns()
    near = spans.os_calls_near()
    spans.stop_reading()  # no other thread runs on here: the workers are forked from here
    tasks = []
    for first, stop in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        read_from = np.iinfo(np.int64).min
        if first >= 2:
            read_from = int(plan.lo[first - 1]) - longest - CALL_LEAD_NS
        own_until = int(plan.lo[stop]) if stop < plan.count else _NEVER
        # The stream reads no row starting at or after its last window's read limit (and the
        # calls' lead past it): the span's reading stops there.
        last = plan.read_limit(stop - 1)
        read_until = last if last == _NEVER else last + CALL_LEAD_NS + 1
        own = (int(plan.lo[first]) if first else read_from, own_until, read_until)
        tasks.append((spans.reader, staging, process, plan, first, stop, read_from, own, near))
    parts: dict[str, list[Any]] = {metric.name: [] for metric in METRICS}
    counts = []
    pool = PoolTime()
    for stop, (span_parts, tally) in zip(
        cuts[1:].tolist(),
        ordered_map(_span_parts, inputs, tasks, jobs=jobs, timing=pool),
        strict=True,
    ):
        for window_parts in span_parts:
            for metric, part in zip(METRICS, window_parts, strict=True):
                parts[metric.name].append(part)
        counts.append(tally)
        if on_window is not None:
            on_window(stop, plan.count)
    spans.settle(counts)
    # Each span also reads, joins and drops its warm-up window and reads the next span's
    # first: about two windows one process would read once.
    read = plan.count + 2 * (len(cuts) - 2)
    pool.own_share = plan.count / read
    pool.extra = f"{read - plan.count} windows read twice (each span's first and last)"
    return WindowResults(merge_parts(METRICS, parts), plan.count, pool)


def _span_parts(
    inputs: WindowInputs,
    reader: Any,
    staging: Callable[[pd.DataFrame], pd.DataFrame],
    process: int | None,
    plan: WindowPlan,
    first: int,
    stop: int,
    read_from: int,
    own: tuple[int, int, int],
    os_calls_near: OsCallsNear,
) -> tuple[list[list[Any]], dict[str, object]]:
    """Every metric's part of each window of [first, stop), read here (a worker), and the
    tally of the rows the span owns (own: the times its rows start from and until, then the
    time its reading stops)."""
    with reader.rows(read_from, *own) as rows:
        op_streams = [
            RowStream(name, of_process(process, chunks), empty_frame(GPU_OP_COLUMNS))
            for name, chunks in rows.ops
        ]
        call_stream = RowStream(
            "CUDA API",
            of_process(process, rows.calls),
            empty_frame(API_CALL_COLUMNS),
            staging,
        )
        tasks = _window_tasks(op_streams, call_stream, inputs, plan, os_calls_near, first, stop)
        parts = [_window_parts(inputs, *task) for task in tasks]
        return parts, rows.counts()


def of_process(pid: int | None, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The chunks, only pid's rows in each (every row: pid None)."""
    for chunk in chunks:
        yield chunk if pid is None else chunk[chunk[PID].to_numpy() == pid]


def _rows_for_window(
    projected: pd.DataFrame, calls: pd.DataFrame, steps: pd.DataFrame, hi: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The held ops and calls a window's metrics can use, without the rows read ahead.

    A window uses the rows that reach into its steps, run in its analysed steps or start in
    the time it owns: all start before until = max(its steps' end, hi), and so do the calls
    of those ops (a call starts before its op, but for clock skew: the calls are cut after
    the last call of a kept op). The calls stay a prefix, so that the ops' CALL_ROW
    positions stay valid; an op launched by a kept call stays, however late it starts
    (it was queued across the window). The metrics come out the same as on every held row.
    """
    if hi == _NEVER or steps.empty:
        return projected, calls
    until = max(int(steps[END_NS].max()), hi)
    call_rows = int(np.searchsorted(calls[START_NS].to_numpy(), until, side="left"))
    call_row = projected[CALL_ROW].to_numpy()
    keep = (projected[START_NS].to_numpy() < until) | ((call_row >= 0) & (call_row < call_rows))
    if keep.any():
        call_rows = max(call_rows, int(call_row[keep].max()) + 1)
    return projected[keep], calls.iloc[:call_rows]


def _window_parts(
    inputs: WindowInputs,
    projected: pd.DataFrame,
    calls: pd.DataFrame,
    index: LaunchIndex,
    steps: pd.DataFrame,
    lo: int,
    hi: int,
    os_calls: OsCallRead,
    *,
    metrics: tuple[Metric[Any, Any], ...] = METRICS,
) -> list[Any]:
    """Every metric's part of one window (lo and hi: the time it owns; os_calls: reads the
    OS calls near its steps, here), in metrics' order. A worker process runs it with the
    declared METRICS (its lambdas are not sent)."""
    inputs = replace(inputs, os_calls=OsCallIndex.of(outermost_calls(os_calls())))
    frames = _window_frames(inputs, projected, calls, index, steps, lo, hi)
    return [metric.compute(frames) for metric in metrics]


def _os_calls_of(steps: pd.DataFrame, os_calls_near: OsCallsNear) -> OsCallRead:
    """The reading of the OS calls near these steps (OsCallIndex.near_steps answers from
    them as from every call): those of the steps' threads overlapping their span."""
    if steps.empty:
        return HeldOsCalls(empty_frame(OS_CALL_COLUMNS))
    lo, hi = int(steps[START_NS].min()), int(steps[END_NS].max())
    return os_calls_near(lo, hi, np.unique(steps[GLOBAL_TID].to_numpy()))


def _concat_streams(streams: list[RowStream]) -> pd.DataFrame:
    """The op streams' held rows as one frame, stream after stream (_drop_finished relies on
    that order). Streams holding rows share their name categories, so the names stay
    categorical; empty ones (no categories) are left out of the concat.

    Every stream's held parts are concatenated at once (one copy, not one per stream and
    one more across them); each stream then holds its rows as a slice of the result."""
    lengths = [sum(len(part) for part in s.held) for s in streams]
    parts = [part for s in streams for part in s.held if len(part)]
    if not parts:
        return streams[0].frame()
    whole = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    whole = whole.reset_index(drop=True)  # a slice's index need not start at 0 (no copy)
    at = 0
    for stream, rows in zip(streams, lengths, strict=True):
        stream.held = [whole.iloc[at : at + rows].reset_index(drop=True)] if rows else []
        at += rows
    return whole


def _window_frames(
    inputs: WindowInputs,
    projected: pd.DataFrame,
    calls: pd.DataFrame,
    index: LaunchIndex,
    steps: pd.DataFrame,
    lo: int,
    hi: int,
) -> WindowFrames:
    """The frames every metric of a window reads, each computed once (index: the calls'
    LaunchIndex)."""
    staged = mark_blocking_copies(calls, projected, index)
    ledger, gaps, idle_runs = build_ledger(
        *_touching_steps(projected, staged, steps), inputs.stage_map
    )
    return WindowFrames(
        inputs=inputs,
        steps=steps,
        projected=projected,
        staged=staged,
        launch_index=index,
        ledger=ledger,
        gaps=gaps,
        idle_runs=idle_runs,
        analysed_ops=ops_in_analysed_steps(projected, steps),
        analysed_calls=calls_in_analysed_steps(staged, steps),
        owned_ops=projected[(projected[START_NS] >= lo) & (projected[START_NS] < hi)],
        owned_calls=staged[(staged[START_NS] >= lo) & (staged[START_NS] < hi)],
    )


# The columns build_ledger reads.
_LEDGER_OP_COLUMNS = [PID, START_NS, END_NS, STAGE, CALL_END_NS, WAIT_END_NS]
_LEDGER_CALL_COLUMNS = [PID, GLOBAL_TID, CALL_CATEGORY, START_NS, END_NS]


def _touching_steps(
    projected: pd.DataFrame, staged: pd.DataFrame, steps: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The ops and calls that can reach into the window's steps: those overlapping their
    span, and ops queued across it (launched before its end, started after its start);
    only the columns build_ledger reads."""
    if steps.empty:
        return projected.iloc[:0], staged.iloc[:0], steps
    lo, hi = int(steps[START_NS].min()), int(steps[END_NS].max())
    starts, ends = projected[START_NS].to_numpy(), projected[END_NS].to_numpy()
    call_ends = projected[CALL_END_NS].to_numpy()
    overlapping = (ends > lo) & (starts < hi)
    queued = (call_ends >= 0) & (call_ends < hi) & (starts > lo)
    calls = (staged[END_NS].to_numpy() > lo) & (staged[START_NS].to_numpy() < hi)
    return (
        _taken(projected, overlapping | queued, _LEDGER_OP_COLUMNS),
        _taken(staged, calls, _LEDGER_CALL_COLUMNS),
        steps,
    )


def _taken(frame: pd.DataFrame, keep: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """frame.loc[keep, columns] (those it has), with a fresh RangeIndex, taken column by
    column in numpy: a window selects from hundreds of thousands of rows."""
    at = np.flatnonzero(keep)
    taken: dict[str, Any] = {}
    for column in columns:
        if column not in frame.columns:
            continue
        values = frame[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            codes = values.cat.codes.to_numpy()[at]
            taken[column] = pd.Categorical.from_codes(codes, dtype=values.dtype, validate=False)
        else:
            taken[column] = values.to_numpy()[at]
    return pd.DataFrame(taken, copy=False)


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
    if limit == _NEVER or staged.empty:
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
) -> None:
    """Drop the rows no later window can need (module docstring).

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
    op_keep = (ends > next_lo) | (starts >= next_lo) | ((call_row >= 0) & launch_needed)
    at = 0
    for stream in op_streams:
        rows = len(stream.frame())
        stream.keep(op_keep[at : at + rows])
        at += rows
    # The calls of the ops kept: a long kernel keeps its launch while it runs.
    launched_kept = call_row[op_keep]
    if not len(calls):
        return
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
