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
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import (
    API_CALL_COLUMNS,
    CALL_CATEGORY,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    NAME,
    OP_KIND,
    PID,
    START_NS,
    CallCategory,
    ChunkSource,
    OpKind,
    RowSources,
    Trace,
    empty_frame,
)
from trace_gaps.nsys import queries
from trace_gaps.nsys.calls import classify_call
from trace_gaps.nsys.export import (
    check_is_cuda_export,
    list_tables,
    no_timed_ops_error,
    open_export,
    reading_export,
)
from trace_gaps.nsys.head import (
    CALL_ROW_KEY,
    OP_ROW_KEY,
    capture_duration,
    capture_stop,
    impossible_times,
    read_head,
    read_os_calls,
    table_columns,
)
from trace_gaps.nsys.names import UNKNOWN, Names, codes_by_id, unique_index
from trace_gaps.nsys.os_calls import MappedOsCalls
from trace_gaps.nsys.read import read_chunks
from trace_gaps.nsys.read_ahead import Readers, Started, lazily
from trace_gaps.nsys.sql import query_frame, query_row, query_rows, query_value

_OP_INTS = {n: d for n, d in GPU_OP_COLUMNS.items() if d not in ("category", "object")}
# The columns of queries.RUNTIME_CALLS (the pid comes after: with_pid).
_CALL_READ = {
    **{n: d for n, d in API_CALL_COLUMNS.items() if d not in ("category", "object") and n != PID},
    "name_id": "int64",
}


@dataclass(slots=True)
class _Rows:
    """The timed rows of the op tables, or of the CUDA API table, read and left out."""

    read: int = 0  # timed rows read, before any was left out
    impossible: int = 0  # times no capture can hold (head.impossible_times)
    duplicated: int = 0  # copies of an earlier row


@dataclass(slots=True)
class _Tally:
    """What the chunks showed on their way past: op counts per device, the earliest start,
    and rows left out as untimed, impossible or copies."""

    device_ops: list[pd.DataFrame] = field(default_factory=list)
    earliest: int = np.iinfo(np.int64).max
    untimed: int = 0
    op_rows: _Rows = field(default_factory=_Rows)
    call_rows: _Rows = field(default_factory=_Rows)
    unresolved_calls: int = 0  # calls whose name id is not in StringIds
    unresolved_kernels: int = 0  # kernels likewise
    lock: threading.Lock = field(default_factory=threading.Lock)  # streams count on threads

    def snapshot(self) -> dict[str, object]:
        """The counts so far (a read of every row), to restore after reading again."""
        with self.lock:
            counts = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "lock"}
            counts["device_ops"] = list(self.device_ops)
            counts["op_rows"] = replace(self.op_rows)
            counts["call_rows"] = replace(self.call_rows)
            return counts

    def restore(self, counts: dict[str, object]) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, value)

    def ops(self) -> pd.DataFrame:
        if not self.device_ops:
            return pd.DataFrame({PID: [], DEVICE_ID: [], OP_KIND: [], "ops": []}, dtype="int64")
        counts = pd.concat(self.device_ops, ignore_index=True)
        counts[OP_KIND] = counts[OP_KIND].astype(str)
        return counts.groupby([PID, DEVICE_ID, OP_KIND], sort=True)["ops"].sum().reset_index()


@dataclass(frozen=True, slots=True)
class ExportStream:
    """An open export: its small tables read, its op and call tables ready to stream."""

    head: Trace  # gpu_ops and api_calls empty
    sources: RowSources
    tally: _Tally
    calls_per_thread: Callable[[], pd.Series]  # timed CUDA API calls per globalTid
    os_calls: Callable[[], pd.DataFrame]  # every OS call, read whole (head.read_os_calls)

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
    path: Path, *, read_now: bool = False, read_ahead: bool = True, windowed: bool = True
) -> Iterator[ExportStream]:
    """Open an export read-only for windowed analysis; the streams live while this is open.

    read_now: start reading the op and call tables at once, on their read-ahead threads,
    while the head is read and the steps are found (for a caller that reads them all), and
    mapping the OS calls (nsys/os_calls.py) on a thread of its own.
    read_ahead False: no read-ahead threads, each chunk is read when asked for (for a
    process that shares too few cores with others busy like it: a diff's two sides).
    windowed False: the caller reads the OS calls whole (ExportStream.os_calls), so they
    are mapped only if a window asks.
    """
    with open_export(path, values=False) as connection:
        tables = list_tables(connection, path)
        check_is_cuda_export(tables, path, connection)
        _check_has_timed_ops(connection, path, tables)
        with reading_export(path):
            op_queries = _op_queries(connection, tables)
            capture = (capture_duration(connection, tables), capture_stop(connection, tables))
        tally = _Tally()
        names = Names(connection, path, tables)
        readers = Readers(threads=read_ahead)
        starts = [
            (table, _op_chunks(path, sql, names, tally, capture, readers))
            for table, sql in op_queries
        ]
        starts.append(("CUDA API", _call_chunks(path, tables, names, tally, capture, readers)))
        sources = [
            (table, Started(start) if read_now else _lazy_source(start)) for table, start in starts
        ]
        os_calls = MappedOsCalls(path, tables, early=read_now and read_ahead and windowed)
        try:
            with reading_export(path):
                head = read_head(connection, path, tables)
                rows = _rows(connection, tables)
            yield _export_stream(
                connection, path, tables, head, names, tally, rows, sources, os_calls
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
    tally: _Tally,
    rows: int,
    chunk_sources: list[tuple[str, ChunkSource]],  # the op tables', then the calls'
    os_calls: MappedOsCalls,
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
    )
    return ExportStream(
        head=head,
        sources=sources,
        tally=tally,
        calls_per_thread=lambda: _calls_per_thread(connection, path, tables),
        os_calls=lambda: _read_whole(connection, path, tables),
    )


def _read_whole(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> pd.DataFrame:
    with reading_export(path):
        return read_os_calls(connection, path, tables)


_OP_KINDS = {
    queries.KERNEL_TABLE: OpKind.KERNEL,
    queries.MEMCPY_TABLE: OpKind.MEMCPY,
    queries.MEMSET_TABLE: OpKind.MEMSET,
    queries.GRAPH_TRACE_TABLE: OpKind.GRAPH,
}


def _op_queries(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> list[tuple[str, tuple[str, OpKind]]]:
    """Each op table's query and the kind of its ops, in queries.OP_TABLES order."""
    found = []
    for table in queries.OP_TABLES:
        if table not in tables:
            continue
        kind = _OP_KINDS[table]
        sql = {
            queries.MEMCPY_TABLE: queries.MEMCPYS,
            queries.MEMSET_TABLE: queries.MEMSETS,
            queries.GRAPH_TRACE_TABLE: queries.GRAPH_TRACES,
        }.get(table)
        if sql is None:
            # Exports older than graph-node tracing have no graphNodeId column.
            has_nodes = "graphNodeId" in table_columns(connection, table)
            sql = queries.KERNELS if has_nodes else queries.KERNELS_WITHOUT_GRAPH_NODES
        found.append((table, (sql, kind)))
    return found


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


def _repeated_rows(chunk: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Rows equal on keys to an earlier row of the chunk.

    The stream's rows are in start order (checked as windows fill; when they are not, the
    analysis reads the export whole and load_trace counts copies itself), so a copy shares a
    run of equal starts with its original: only rows in such runs are hashed, which keeps
    this check cheap (a full duplicated() costs ~0.1 s per chunk).
    """
    starts = chunk[START_NS].to_numpy()
    tied = np.zeros(len(starts), dtype=bool)
    if len(starts) > 1:
        same = starts[1:] == starts[:-1]
        tied[1:] |= same
        tied[:-1] |= same
    repeated = np.zeros(len(starts), dtype=bool)
    if tied.any():
        repeated[tied] = chunk.loc[tied].duplicated(keys).to_numpy()
    return repeated


def _drop_untimed(chunk: pd.DataFrame, tally: _Tally) -> pd.DataFrame:
    starts = chunk[START_NS].to_numpy()
    untimed = (starts == 0) & (chunk[END_NS].to_numpy() == 0)
    if untimed.any():
        with tally.lock:
            tally.untimed += int(untimed.sum())
        chunk = chunk[~untimed].reset_index(drop=True)
        starts = chunk[START_NS].to_numpy()
    if len(chunk):
        earliest = int(starts.min())
        with tally.lock:
            tally.earliest = min(tally.earliest, earliest)
    index = chunk.index
    fresh = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    return chunk if fresh else chunk.reset_index(drop=True)


def _cleaned(
    chunk: pd.DataFrame,
    tally: _Tally,
    rows: _Rows,
    capture: tuple[int | None, int | None],
    key: list[str],
) -> pd.DataFrame:
    """The chunk without its untimed rows, impossible times and copies, each counted."""
    chunk = _drop_untimed(chunk, tally)
    impossible = impossible_times(chunk, *capture)
    with tally.lock:
        rows.read += len(chunk)
    if impossible.any():
        with tally.lock:
            rows.impossible += int(impossible.sum())
        chunk = chunk.loc[~impossible].reset_index(drop=True)
    repeated = _repeated_rows(chunk, key)
    if repeated.any():
        with tally.lock:
            rows.duplicated += int(repeated.sum())
        chunk = chunk.loc[~repeated].reset_index(drop=True)
    return chunk


def with_pid(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls with their pid, from the upper bits of their global thread id (as nsys
    packs them): derived here, not in the query (queries.RUNTIME_CALLS)."""
    pids = (calls[GLOBAL_TID].to_numpy() >> 24) & 0xFFFFFF
    return calls.assign(**{PID: pids})


def _op_chunks(
    path: Path,
    query: tuple[str, OpKind],
    names: Names,
    tally: _Tally,
    capture: tuple[int | None, int | None],  # its duration and stop (ANALYSIS_DETAILS)
    readers: Readers,
) -> Callable[[], Iterator[pd.DataFrame]]:
    """A function that starts reading the op table and returns its chunks."""
    sql, kind = query

    def start() -> Iterator[pd.DataFrame]:
        categories = names.op_categories()
        by_id = (
            codes_by_id(names.strings(queries.KERNEL_NAMES), categories)
            if kind is OpKind.KERNEL
            else None
        )
        dtypes = {**_OP_INTS, "name_id": "int64"} if by_id else _OP_INTS
        # Read and decoded on a thread of their own (the names above are looked up here,
        # on the main connection).
        return readers.start(lambda: decoded(read_chunks(path, sql, dtypes), categories, by_id))

    def decoded(
        read: Iterator[pd.DataFrame],
        categories: pd.Index,
        by_id: Callable[[np.ndarray], np.ndarray] | None,
    ) -> Iterator[pd.DataFrame]:
        kinds = pd.CategoricalDtype([k.value for k in OpKind])
        kind_code = list(OpKind).index(kind)
        unknown = int(categories.get_indexer(pd.Index([UNKNOWN]))[0])
        for chunk in read:
            # Values are checked as they are read (typed_frame in read_chunks).
            chunk = _cleaned(chunk, tally, tally.op_rows, capture, OP_ROW_KEY)
            if by_id is not None:
                codes = by_id(chunk.pop("name_id").to_numpy())
                unresolved = int(np.count_nonzero(codes == unknown))
                if unresolved:
                    with tally.lock:
                        tally.unresolved_kernels += unresolved
            else:
                codes = categories.get_indexer(pd.Index(chunk.pop(NAME).tolist(), dtype=object))
            chunk[NAME] = pd.Categorical.from_codes(codes, categories=categories)
            # Codes, not a string per row: this thread holds the GIL the analysis wants.
            chunk[OP_KIND] = pd.Categorical.from_codes(
                np.full(len(chunk), kind_code, dtype=np.int8), dtype=kinds, validate=False
            )
            counts = _ops_per_device(chunk)
            with tally.lock:
                tally.device_ops.append(counts.assign(**{OP_KIND: kind.value}))
            yield chunk[list(GPU_OP_COLUMNS)]

    return start


def _ops_per_device(chunk: pd.DataFrame) -> pd.DataFrame:
    """pid, device_id, ops: the chunk's ops per (pid, device), from one sort of a combined
    key (a pandas group-by per chunk cost the analysis thread its GIL)."""
    pids, devices = chunk[PID].to_numpy(), chunk[DEVICE_ID].to_numpy()
    if len(pids) and devices.min() >= 0 and devices.max() < 2**16 and pids.min() >= 0:
        keys, counts = np.unique((pids << 16) | devices, return_counts=True)
        return pd.DataFrame(
            {PID: keys >> 16, DEVICE_ID: keys & 0xFFFF, "ops": counts.astype(np.int64)}
        )
    return chunk.groupby([PID, DEVICE_ID]).size().rename("ops").reset_index()


def _call_chunks(
    path: Path,
    tables: tuple[str, ...],
    names: Names,
    tally: _Tally,
    capture: tuple[int | None, int | None],  # its duration and stop (ANALYSIS_DETAILS)
    readers: Readers,
) -> Callable[[], Iterator[pd.DataFrame]]:
    """A function that starts reading the CUDA API table and returns its chunks."""

    def start() -> Iterator[pd.DataFrame]:
        if queries.RUNTIME_TABLE not in tables:
            return iter(())
        call_names = names.call_names()
        categories = unique_index([*call_names.tolist(), UNKNOWN])
        by_id = codes_by_id(call_names, categories)
        kinds = [c.value for c in CallCategory]
        category_of = np.array([kinds.index(classify_call(n).value) for n in categories])
        read = read_chunks(path, queries.RUNTIME_CALLS, _CALL_READ)
        # Read and decoded on a thread of their own (the names above are looked up here).
        unknown = int(categories.get_indexer(pd.Index([UNKNOWN]))[0])
        return readers.start(lambda: decoded(read, categories, by_id, kinds, category_of, unknown))

    def decoded(
        read: Iterator[pd.DataFrame],
        categories: pd.Index,
        by_id: Callable[[np.ndarray], np.ndarray],
        kinds: list[str],
        category_of: np.ndarray,
        unknown: int,
    ) -> Iterator[pd.DataFrame]:
        for chunk in read:
            chunk = with_pid(_cleaned(chunk, tally, tally.call_rows, capture, CALL_ROW_KEY))
            codes = by_id(chunk.pop("name_id").to_numpy())
            unresolved = int(np.count_nonzero(codes == unknown))
            if unresolved:
                with tally.lock:
                    tally.unresolved_calls += unresolved
            chunk[NAME] = pd.Categorical.from_codes(codes, categories=categories)
            chunk[CALL_CATEGORY] = pd.Categorical.from_codes(
                category_of[codes], categories=pd.Index(kinds)
            )
            yield chunk[list(API_CALL_COLUMNS)]

    return start


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
            connection, queries.runtime_calls_named(loading.index.tolist(), bound), _CALL_READ
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
