"""Windows cut into spans, each read from the export and analysed by a worker of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.frames import WindowInputs
from trace_gaps.analysis.engine.metric import merge_parts
from trace_gaps.analysis.engine.metrics import METRICS
from trace_gaps.analysis.engine.streams import RowStream, of_process
from trace_gaps.analysis.engine.windows import (
    CALL_LEAD_NS,
    NEVER,
    OsCallsNear,
    WindowPlan,
    WindowResults,
    measure_window,
    window_tasks,
)
from trace_gaps.model import API_CALL_COLUMNS, GPU_OP_COLUMNS, SpanSource, empty_frame
from trace_gaps.parallel import PoolTime, can_start_pool, ordered_map

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

    A span of windows [a, b) reads from lo(a - 1) (or the sample reach before lo(a)) less
    the export's longest op or call and CALL_LEAD_NS (window a - 1 is its warm-up:
    window_tasks). staging(calls) stages each chunk of calls as read (it pickles);
    process: only that pid's rows. Raises
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
            # Down to where a sample across lo(first) can begin (windows.py keeps the busy
            # time of the ops dropped there), should the window before be shorter.
            since = min(int(plan.lo[first - 1]), int(plan.lo[first]) - plan.sample_reach_ns)
            read_from = since - longest - CALL_LEAD_NS
        own_until = int(plan.lo[stop]) if stop < plan.count else NEVER
        # The stream reads no row starting at or after its last window's read limit (and the
        # calls' lead past it): the span's reading stops there.
        last = plan.read_limit(stop - 1)
        read_until = last if last == NEVER else last + CALL_LEAD_NS + 1
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
        tasks = window_tasks(op_streams, call_stream, inputs, plan, os_calls_near, first, stop)
        parts = [measure_window(inputs, *task) for task in tasks]
        return parts, rows.counts()
