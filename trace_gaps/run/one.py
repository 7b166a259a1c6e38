"""Analyse one export, and report it: streamed a window of steps at a time, or whole when it
must be.

Streaming keeps memory bounded whatever the export's size (see analysis/engine/windows.py); an
export whose rows break its assumptions (tables out of start order, an op far from its
launch) is loaded whole and analysed as one window instead, with the same results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from trace_gaps.allocator import keep_freed_memory, python_string_storage
from trace_gaps.analysis.collectives import CollectiveMatch
from trace_gaps.analysis.engine.picks import TimelineRequest
from trace_gaps.analysis.engine.pipeline import (
    Analysis,
    AnalysisOptions,
    analyse_kinds,
    analyse_rows,
    analyse_trace,
)
from trace_gaps.analysis.engine.spans import SPAN_WINDOW_ROWS_MIN
from trace_gaps.analysis.engine.windows import WINDOW_ROWS
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.model import NeedsWholeTrace, Trace
from trace_gaps.nsys.load import load_trace
from trace_gaps.nsys.stream import ExportStream, stream_export
from trace_gaps.parallel import can_start_pool, default_jobs
from trace_gaps.report.build import Report, build_report

if TYPE_CHECKING:
    import pandas as pd


def analyse_export(
    path: Path,
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    window_rows: int | None = WINDOW_ROWS,
    on_window: Callable[[int, int], None] | None = None,
    collectives: CollectiveMatch | None = None,
    jobs: int | None = None,
    read_ahead: bool = True,
    on_steps: Callable[[pd.DataFrame], None] | None = None,
) -> tuple[Trace, Analysis]:
    """The export's Trace (its ops and calls left out when streamed) and its Analysis.

    on_window(done, total) is called as windows finish, for progress display. jobs: worker
    processes for the windows' metrics (None: parallel.default_jobs(); 1: none, all in
    this process); an export of one window is always analysed in this process. read_ahead
    False: no read-ahead threads (stream_export). on_steps: see analyse_rows (called again
    if the export is analysed whole after all).
    """
    keep_freed_memory()
    python_string_storage()
    jobs = default_jobs() if jobs is None else jobs
    try:
        with stream_export(
            path, read_now=True, read_ahead=read_ahead, spans_early=_spans_early(jobs, window_rows)
        ) as stream:
            analysis = analyse_stream(
                stream,
                options,
                timelines=timelines,
                window_rows=window_rows,
                on_window=on_window,
                collectives=collectives,
                jobs=jobs,
                on_steps=on_steps,
            )
            return _analysed(stream.trace()), analysis
    except NeedsWholeTrace:
        trace = load_trace(path)
        try:
            analysis = analyse_trace(
                trace, options, timelines=timelines, collectives=collectives, on_steps=on_steps
            )
            return _analysed(trace), analysis
        except NeedsWholeTrace as error:  # the rows break an assumption even when whole
            raise TraceGapsError(
                f"holds rows trace-gaps cannot analyse ({error}); the export is damaged: "
                "re-export it, and report it with the nsys version if that does not help",
                path=path,
            ) from error


def _spans_early(jobs: int, window_rows: int | None) -> Callable[[int], bool] | None:
    """For an export big enough for spans (analysis/engine/spans.spans_can_run), once its size is
    known: start the longest-row scan at once, while the head is read."""
    if jobs < 2 or window_rows is None or not can_start_pool():
        return None
    return lambda rows: rows >= 4 * min(window_rows, SPAN_WINDOW_ROWS_MIN)


def _analysed(trace: Trace) -> Trace:
    """The Trace as the report needs it, after the analysis: without its OS calls (millions
    with --trace=osrt, read only for the windows' host-time split; 29 of the 33 MB a Dask
    worker sent back per export of 1M kernels)."""
    return replace(trace, os_calls=trace.os_calls.iloc[:0])


def analyse_stream(
    stream: ExportStream,
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    window_rows: int | None = WINDOW_ROWS,
    on_window: Callable[[int, int], None] | None = None,
    collectives: CollectiveMatch | None = None,
    jobs: int = 1,
    on_steps: Callable[[pd.DataFrame], None] | None = None,
) -> Analysis:
    """The Analysis of a streamed export, every kind of step on its own (analyse_kinds): each
    kind reads the rows again, and the export's counts are left as those of one read.
    Raises NeedsWholeTrace where the rows break the windows' assumptions."""
    tallied = None

    def analyse(chosen: AnalysisOptions) -> Analysis:
        nonlocal tallied
        analysis = analyse_rows(
            stream.head,
            stream.sources,
            chosen,
            timelines=timelines,
            window_rows=window_rows,
            on_window=on_window,
            collectives=collectives,
            jobs=jobs,
            on_steps=on_steps,
        )
        tallied = stream.tally.snapshot() if tallied is None else tallied
        return analysis

    analysis = analyse_kinds(analyse, options)
    if tallied is not None:
        stream.tally.restore(tallied)
    return analysis


def load_and_report(
    path: Path,
    options: AnalysisOptions,
    *,
    top: int = 10,
    timelines: tuple[TimelineRequest, ...] = (),
) -> tuple[Trace, Report]:
    """Load an export and build its Report; errors raised on the way name the file."""
    with about_file(path):
        trace, analysis = analyse_export(path, options, timelines=timelines)
        return trace, build_report(trace, analysis, top=top)
