"""Read an export's op and call tables as chunks in start order, for windowed analysis.

The head (ranges, threads, settings) is read whole (nsys/head.py); the OS calls are read
a window at a time (nsys/os_calls.py); the kernel,
copy, memset, graph and CUDA API tables stream in chunks (nsys/read.py), in the order
SQLite stores them, which is start order in every nsys export we have seen (the analysis
checks, and falls back to load_trace, these chunks concatenated, when a table is not).
Each chunk leaves out untimed rows, impossible times and copies, counted in the tally, and
carries its names as categoricals shared by every chunk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import (
    API_CALL_COLUMNS,
    CALL_CATEGORY,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    CallCategory,
    ChunkSource,
    RowSources,
    Trace,
    empty_frame,
)
from trace_gaps.nsys import queries
from trace_gaps.nsys.calls import classify_call
from trace_gaps.nsys.chunks import CALL_READ, call_chunks, op_chunks, op_queries, with_pid
from trace_gaps.nsys.cleaning import Tally
from trace_gaps.nsys.export import (
    check_is_cuda_export,
    list_tables,
    no_timed_ops_error,
    open_export,
    reading_export,
)
from trace_gaps.nsys.gpu_metrics import GpuMetricTable, open_gpu_metrics
from trace_gaps.nsys.head import capture_duration, capture_stop, read_head
from trace_gaps.nsys.names import Names
from trace_gaps.nsys.os_calls import MappedOsCalls, read_os_calls
from trace_gaps.nsys.read_ahead import Readers, Started, lazily
from trace_gaps.nsys.spans import ExportSpans
from trace_gaps.nsys.sql import query_frame, query_row, query_rows, query_value


@dataclass(frozen=True, slots=True)
class ExportStream:
    """An open export: its small tables read, its op and call tables ready to stream."""

    head: Trace  # gpu_ops and api_calls empty
    sources: RowSources
    tally: Tally
    calls_per_thread: Callable[[], pd.Series]  # timed CUDA API calls per globalTid
    os_calls: Callable[[], pd.DataFrame]  # every OS call, read whole (os_calls.read_os_calls)

    def trace(self) -> Trace:
        """The head with the untimed rows the stream left out counted in its info (without
        its OS calls: sources.os_calls_near reads them a window at a time)."""
        info = replace(
            self.head.info,
            untimed_events=self.tally.untimed,
            impossible_ops=self.tally.op_rows.impossible,
            impossible_calls=self.tally.call_rows.impossible,
            duplicated_ops=self.tally.op_rows.duplicated,
            duplicated_calls=self.tally.call_rows.duplicated,
            op_rows=self.tally.op_rows.read,
            call_rows=self.tally.call_rows.read,
            unresolved_calls=self.tally.unresolved_calls,
            unresolved_kernels=self.tally.unresolved_kernels,
        )
        return replace(self.head, info=info)


@contextmanager
def stream_export(
    path: Path,
    *,
    read_now: bool = False,
    read_ahead: bool = True,
    windowed: bool = True,
    spans_early: Callable[[int], bool] | None = None,
) -> Iterator[ExportStream]:
    """Open an export read-only for windowed analysis; the streams live while this is open.

    read_now: start reading the op and call tables at once, on their read-ahead threads,
    while the head is read and the steps are found (for a caller that reads them all), and
    mapping the OS calls (nsys/os_calls.py) on a thread of its own.
    read_ahead False: no read-ahead threads, each chunk is read when asked for (for a
    process that shares too few cores with others busy like it: a diff's two sides).
    windowed False: the caller reads the OS calls whole (ExportStream.os_calls), so they
    are mapped only if a window asks.
    spans_early(rows): called with the ops and calls of the export once its tables are
    known; True starts the scan for the longest row (RowSources.spans) on threads at once,
    for a caller whose workers will read spans.
    """
    with open_export(path, values=False) as connection:
        tables = list_tables(connection, path)
        check_is_cuda_export(tables, path, connection)
        _check_has_timed_ops(connection, path, tables)
        with reading_export(path):
            queried = op_queries(connection, tables)
            capture = (capture_duration(connection, tables), capture_stop(connection, tables))
        tally = Tally()
        names = Names(connection, path, tables)
        readers = Readers(threads=read_ahead)
        starts = [
            (table, op_chunks(path, sql, names, tally, capture, readers)) for table, sql in queried
        ]
        starts.append(("CUDA API", call_chunks(path, tables, names, tally, capture, readers)))
        sources = [
            (table, Started(start) if read_now else _lazy_source(start)) for table, start in starts
        ]
        os_calls = MappedOsCalls(path, tables, early=read_now and read_ahead and windowed)
        with reading_export(path):
            rows = _rows(connection, tables)
        early = spans_early is not None and spans_early(rows)
        started = [source for _, source in sources if isinstance(source, Started)]
        spans = ExportSpans(
            path, tables, tally, readers, os_calls, started, read_ahead=read_ahead, early=early
        )
        try:
            with reading_export(path):
                head = read_head(connection, path, tables)
            yield _export_stream(
                connection, path, tables, head, names, tally, rows, sources, os_calls, spans
            )
        finally:
            readers.close()  # stop the threads of streams left unread
            os_calls.close()


def _lazy_source(start: Callable[[], Iterator[pd.DataFrame]]) -> ChunkSource:
    return lambda: lazily(start)


def _export_stream(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    head: Trace,
    names: Names,
    tally: Tally,
    rows: int,
    chunk_sources: list[tuple[str, ChunkSource]],  # the op tables', then the calls'
    os_calls: MappedOsCalls,
    spans: ExportSpans,
) -> ExportStream:
    sources = RowSources(
        ops=tuple(chunk_sources[:-1]),
        calls=chunk_sources[-1][1],
        rows=rows,
        module_loads=lambda until_ns: _module_loads(connection, path, tables, names, until_ns),
        device_ops=tally.ops,
        trace_start_ns=lambda: tally.earliest,
        known_pids=lambda: _known_pids(connection, path, tables),
        collectives=lambda chooser: _collectives(connection, path, tables, names, chooser),
        launches_per_thread=lambda from_ns, until_ns: _launches_per_thread(
            connection, path, tables, names, from_ns, until_ns
        ),
        os_calls_near=os_calls,
        spans=spans,
        gpu_metrics=_gpu_metrics(connection, path, tables),
    )
    return ExportStream(
        head=head,
        sources=sources,
        tally=tally,
        calls_per_thread=lambda: _calls_per_thread(connection, path, tables),
        os_calls=lambda: _read_whole(connection, path, tables),
    )


def _gpu_metrics(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> GpuMetricTable | None:
    with reading_export(path):
        return open_gpu_metrics(connection, path, tables)


def _read_whole(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> pd.DataFrame:
    with reading_export(path):
        return read_os_calls(connection, path, tables)


def _check_has_timed_ops(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> None:
    with reading_export(path):
        for table in queries.OP_TABLES:
            if table in tables and query_row(connection, queries.any_timed(table)):
                return
        untimed = sum(
            int(query_value(connection, queries.count_untimed(table)) or 0)
            for table in queries.OP_TABLES
            if table in tables
        )
        raise no_timed_ops_error(connection, path, tables, untimed)


def _rows(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int:
    """Ops and calls in the export, from the largest rowid of each table (no scan)."""
    streamed = [*queries.OP_TABLES, queries.RUNTIME_TABLE]
    return sum(
        int(query_value(connection, queries.largest_rowid(table)) or 0)
        for table in streamed
        if table in tables
    )


def _module_loads(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    names: Names,
    until_ns: int,
) -> pd.DataFrame:
    """The module-load calls starting at or before until_ns (for the warm-up rule).

    Only the table's first rows are scanned, up to the first row starting after until_ns
    (found by binary search on rowid): the table is in start order, which the stream
    checks as it reads; when it is not, the analysis falls back to load_trace.
    """
    if queries.RUNTIME_TABLE not in tables:
        return empty_frame(API_CALL_COLUMNS)
    call_names = names.call_names()
    loading = call_names[
        call_names.map(lambda n: classify_call(n) is CallCategory.MODULE_LOAD).astype(bool)
    ]
    if loading.empty:
        return empty_frame(API_CALL_COLUMNS)
    with reading_export(path):
        bound = _first_rowid_after(connection, queries.RUNTIME_TABLE, until_ns)
        calls = query_frame(
            connection, queries.runtime_calls_named(loading.index.tolist(), bound), CALL_READ
        )
    calls = with_pid(calls[calls[START_NS] <= until_ns])
    calls[NAME] = pd.Categorical(calls.pop("name_id").map(loading))
    calls[CALL_CATEGORY] = pd.Categorical([CallCategory.MODULE_LOAD.value] * len(calls))
    return calls[list(API_CALL_COLUMNS)]


def _launches_per_thread(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    names: Names,
    from_ns: int,
    until_ns: int,
) -> pd.DataFrame:
    """Launch calls per (pid, thread) starting in [from_ns, until_ns]: the rows between two
    rowids found by binary search (the table is in start order, as for _module_loads)."""
    empty = pd.DataFrame({PID: [], GLOBAL_TID: [], "launches": []}, dtype="int64")
    if queries.RUNTIME_TABLE not in tables:
        return empty
    call_names = names.call_names()
    launching = call_names[
        call_names.map(lambda n: classify_call(n).value.startswith("launch")).astype(bool)
    ]
    if launching.empty:
        return empty
    with reading_export(path):
        lo = _first_rowid_after(connection, queries.RUNTIME_TABLE, from_ns - 1)
        hi = _first_rowid_after(connection, queries.RUNTIME_TABLE, until_ns)
        counts = query_frame(
            connection,
            queries.launches_per_thread(launching.index.tolist(), lo, hi),
            {GLOBAL_TID: "int64", "launches": "int64"},
        )
    tids = counts[GLOBAL_TID].to_numpy(dtype=np.int64)
    return pd.DataFrame(
        {
            PID: (tids >> 24) & 0xFFFFFF,
            GLOBAL_TID: tids,
            "launches": counts["launches"].to_numpy(dtype=np.int64),
        }
    )


def _collectives(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    names: Names,
    chooser: Callable[[pd.Index], np.ndarray],
) -> pd.DataFrame:
    """The kernels whose names `chooser` picks (start, end, pid, device_id, name)."""
    columns = {START_NS: "int64", END_NS: "int64", PID: "int64", DEVICE_ID: "int64"}
    if queries.KERNEL_TABLE not in tables:
        return empty_frame({**columns, NAME: "object"})
    kernel_names = names.strings(queries.KERNEL_NAMES)
    picked = kernel_names[chooser(pd.Index(kernel_names.astype(str)))]
    if picked.empty:
        return empty_frame({**columns, NAME: "object"})
    with reading_export(path):
        found = query_frame(
            connection,
            queries.kernels_named(picked.index.tolist()),
            {**columns, "name_id": "int64"},
        )
    found[NAME] = found.pop("name_id").map(picked).astype(str)
    return found


def _first_rowid_after(connection: sqlite3.Connection, table: str, time_ns: int) -> int:
    """The smallest rowid whose row starts after time_ns, in a table sorted by start."""
    largest = int(query_value(connection, queries.largest_rowid(table)) or 0)
    lo, hi = 0, largest + 1  # the answer lies in (lo, hi]
    probe = queries.start_at_rowid(table)
    while hi - lo > 1:
        middle = (lo + hi) // 2
        row = query_row(connection, probe, (middle,))
        if row is None or row[0] is None or int(row[0]) > time_ns:
            hi = middle
        else:
            lo = middle
    return hi


def _known_pids(connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]) -> list[int]:
    with reading_export(path):
        found: set[int] = set()
        for table in [*queries.OP_TABLES, queries.RUNTIME_TABLE]:
            if table in tables:
                found.update(int(row[0]) for row in query_rows(connection, queries.pids_in(table)))
    return sorted(found)


def _calls_per_thread(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> pd.Series:
    if queries.RUNTIME_TABLE not in tables:
        return pd.Series(dtype="int64")
    with reading_export(path):
        counts = query_frame(
            connection, queries.calls_per_thread(), {"global_tid": "int64", "calls": "int64"}
        )
    return counts.set_index("global_tid")["calls"].astype("int64")
