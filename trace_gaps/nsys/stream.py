"""Read an export's op and call tables as chunks in start order, for windowed analysis.

The head (ranges, threads, OS calls, settings) is read whole (nsys/head.py); the kernel,
copy, memset, graph and CUDA API tables stream in chunks (nsys/read.py), in the order
SQLite stores them, which is start order in every nsys export we have seen (the analysis
checks, and falls back to load_trace, these chunks concatenated, when a table is not).
Each chunk leaves out untimed rows, impossible times and copies, counted in the tally, and
carries its names as categoricals shared by every chunk.
"""

from __future__ import annotations

import queue
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
from trace_gaps.nsys.calls import classify_call, strip_version_suffix
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
    name_text,
    read_head,
    read_strings,
    table_columns,
)
from trace_gaps.nsys.read import read_chunks

# Resolve names from the whole string table when it is at most this long (one quick read);
# longer tables are searched for the ids in use.
WHOLE_STRING_TABLE = 500_000

_UNKNOWN = "?"
_OP_INTS = {n: d for n, d in GPU_OP_COLUMNS.items() if d not in ("category", "object")}
# The columns of queries.RUNTIME_CALLS (the pid comes after: with_pid).
_CALL_READ = {
    **{n: d for n, d in API_CALL_COLUMNS.items() if d not in ("category", "object") and n != PID},
    "name_id": "int64",
}
_MEMCPY_NAMES = ("memcpy HtoD", "memcpy DtoH", "memcpy DtoD", "memcpy PtoP", "memcpy")


@dataclass(slots=True)
class _Tally:
    """What the chunks showed on their way past: op counts per device, the earliest start,
    and rows left out as untimed."""

    device_ops: list[pd.DataFrame] = field(default_factory=list)
    earliest: int = np.iinfo(np.int64).max
    untimed: int = 0
    impossible: int = 0
    impossible_calls: int = 0
    op_rows: int = 0  # timed rows read, before any was left out
    call_rows: int = 0
    unresolved_calls: int = 0  # calls whose name id is not in StringIds
    unresolved_kernels: int = 0  # kernels likewise
    duplicated_ops: int = 0
    duplicated_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)  # streams count on threads

    def snapshot(self) -> dict[str, object]:
        """The counts so far (a read of every row), to restore after reading again."""
        with self.lock:
            counts = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "lock"}
            counts["device_ops"] = list(self.device_ops)
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

    def trace(self) -> Trace:
        """The head with the untimed rows the stream left out counted in its info."""
        info = replace(
            self.head.info,
            untimed_events=self.tally.untimed,
            impossible_ops=self.tally.impossible,
            impossible_calls=self.tally.impossible_calls,
            duplicated_ops=self.tally.duplicated_ops,
            duplicated_calls=self.tally.duplicated_calls,
            op_rows=self.tally.op_rows,
            call_rows=self.tally.call_rows,
            unresolved_calls=self.tally.unresolved_calls,
            unresolved_kernels=self.tally.unresolved_kernels,
        )
        return replace(self.head, info=info)


@contextmanager
def stream_export(
    path: Path, *, read_now: bool = False, read_ahead: bool = True
) -> Iterator[ExportStream]:
    """Open an export read-only for windowed analysis; the streams live while this is open.

    read_now: start reading the op and call tables at once, on their read-ahead threads,
    while the head is read and the steps are found (for a caller that reads them all).
    read_ahead False: no read-ahead threads, each chunk is read when asked for (for a
    process that shares too few cores with others busy like it: a diff's two sides).
    """
    with open_export(path, values=False) as connection:
        tables = list_tables(connection, path)
        check_is_cuda_export(tables, path, connection)
        _check_has_timed_ops(connection, path, tables)
        with reading_export(path):
            op_queries = _op_queries(connection, tables)
            capture = (capture_duration(connection, tables), capture_stop(connection, tables))
        tally = _Tally()
        names = _Names(connection, path, tables)
        readers = _Readers(threads=read_ahead)
        starts = [
            (table, _op_chunks(path, sql, names, tally, capture, readers))
            for table, sql in op_queries
        ]
        starts.append(("CUDA API", _call_chunks(path, tables, names, tally, capture, readers)))
        sources = [
            (table, _Started(start) if read_now else _lazy_source(start)) for table, start in starts
        ]
        try:
            with reading_export(path):
                head = read_head(connection, path, tables)
                rows = _rows(connection, tables)
            yield _export_stream(connection, path, tables, head, names, tally, rows, sources)
        finally:
            readers.close()  # stop the threads of streams left unread


def _lazy_source(start: Callable[[], Iterator[pd.DataFrame]]) -> ChunkSource:
    return lambda: _lazily(start)


def _export_stream(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    head: Trace,
    names: _Names,
    tally: _Tally,
    rows: int,
    chunk_sources: list[tuple[str, ChunkSource]],  # the op tables', then the calls'
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
    )
    return ExportStream(
        head=head,
        sources=sources,
        tally=tally,
        calls_per_thread=lambda: _calls_per_thread(connection, path, tables),
    )


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
            if table in tables and connection.execute(queries.any_timed(table)).fetchone():
                return
        untimed = sum(
            int(connection.execute(queries.count_untimed(table)).fetchone()[0])
            for table in queries.OP_TABLES
            if table in tables
        )
        raise no_timed_ops_error(connection, path, tables, untimed)


def _rows(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int:
    """Ops and calls in the export, from the largest rowid of each table (no scan)."""
    streamed = [*queries.OP_TABLES, queries.RUNTIME_TABLE]
    return sum(
        int(connection.execute(queries.largest_rowid(table)).fetchone()[0] or 0)
        for table in streamed
        if table in tables
    )


class _Names:
    """Name ids to the categorical names of ops and calls, shared by every chunk."""

    def __init__(self, connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]) -> None:
        self.connection = connection
        self.path = path
        self.tables = tables
        self._strings: pd.Series | None = None

    def strings(self, ids_in_use: str) -> pd.Series:
        """Text by string id: the whole table when short, else the ids the query lists."""
        with reading_export(self.path):
            if self._strings is None:
                largest = self.connection.execute(queries.largest_string_id()).fetchone()[0]
                if int(largest or 0) <= WHOLE_STRING_TABLE:
                    self._strings = _string_series(self.connection, queries.ALL_STRINGS)
            if self._strings is not None:
                return self._strings
            return _string_series(self.connection, ids_in_use)

    def op_categories(self) -> pd.Index:
        kernel_names: list[object] = (
            self.strings(queries.KERNEL_NAMES).tolist()
            if queries.KERNEL_TABLE in self.tables
            else []
        )
        graphs = (
            [row[0] for row in self.connection.execute(queries.GRAPH_NAMES)]
            if queries.GRAPH_TRACE_TABLE in self.tables
            else []
        )
        extra = [*_MEMCPY_NAMES, "memset", *graphs, _UNKNOWN]
        return _unique_index([*kernel_names, *extra])

    def call_names(self) -> pd.Series:
        return self.strings(queries.RUNTIME_NAMES).map(strip_version_suffix)


def _string_series(connection: sqlite3.Connection, sql: str) -> pd.Series:
    frame = read_strings(connection, sql)
    return frame.set_index("name_id")[NAME].map(name_text).astype(object)


def _unique_index(values: list[object]) -> pd.Index:
    """The values, first occurrence of each, as an Index (categories)."""
    return pd.Index(list(dict.fromkeys(values)), dtype=object)


def _codes_by_id(strings: pd.Series, categories: pd.Index) -> Callable[[np.ndarray], np.ndarray]:
    """A function from string ids to category codes (ids not in strings get '?')."""
    unknown = int(categories.get_indexer(pd.Index([_UNKNOWN]))[0])
    ids = strings.index.to_numpy().astype(np.int64)
    codes = categories.get_indexer(pd.Index(strings.tolist(), dtype=object))
    if not len(ids):  # an empty StringIds: every name is unknown

        def unknown_only(wanted: np.ndarray) -> np.ndarray:
            return np.full(len(wanted), unknown, dtype=np.int64)

        return unknown_only
    table = np.full(int(ids.max(initial=-1)) + 2, unknown, dtype=np.int64)
    if len(ids) and ids.min() >= 0 and ids.max() < 4 * len(ids) + 1_000_000:
        table[ids] = codes

        def from_table(wanted: np.ndarray) -> np.ndarray:
            inside = (wanted >= 0) & (wanted < len(table))
            result: np.ndarray = np.where(
                inside, table[np.clip(wanted, 0, len(table) - 1)], unknown
            )
            return result

        return from_table
    order = pd.Index(ids)

    def from_index(wanted: np.ndarray) -> np.ndarray:
        at = order.get_indexer(pd.Index(wanted))
        result: np.ndarray = np.where(at >= 0, codes[np.maximum(at, 0)], unknown)
        return result

    return from_index


# Chunks read ahead of the analysis, per stream (each a read.CHUNK_ROWS frame: a few MB).
READ_AHEAD = 2


class _Turns:
    """Whose turn it is to read a chunk: one stream at a time, and among the streams waiting
    for a turn, the one whose rows are furthest behind in time (on a tie, the first to ask).

    The analysis needs every stream read up to the same time: the CUDA API table holds about
    twice the kernel table's rows per second, so turns taken in any order leave it behind
    while the kernel stream reads ahead, and the first windows wait for it.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._busy = False
        self._waiting: dict[object, tuple[int, int]] = {}  # reader -> (reached, ask order)
        self._asked = 0

    @contextmanager
    def turn(self, reader: object, reached: int) -> Iterator[None]:
        """Hold the turn while reading one chunk; reached: the start of the reader's last row."""
        with self._changed:
            self._asked += 1
            self._waiting[reader] = (reached, self._asked)
            while self._busy or min(self._waiting.values()) != self._waiting[reader]:
                self._changed.wait()
            del self._waiting[reader]
            self._busy = True
        try:
            yield
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


class _ReadAhead:
    """produce()'s chunks, made on a thread of their own up to READ_AHEAD chunks ahead,
    from the moment this is made.

    An exception raised there is raised here, at the chunk it replaced. close() stops the
    thread after the chunk it is reading. One chunk is made at a time among the streams
    sharing `turns` (reading them all at once would only add their working memory up).
    """

    def __init__(self, produce: Callable[[], Iterator[pd.DataFrame]], turns: _Turns) -> None:
        self._turns = turns
        self._made: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=READ_AHEAD)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(
            target=self._work, args=(produce,), name="trace-gaps read-ahead", daemon=True
        )
        self._thread.start()

    def _hand_over(self, kind: str, value: object) -> bool:
        while not self._stop.is_set():
            try:
                self._made.put((kind, value), timeout=0.05)
            except queue.Full:
                continue
            return True
        return False

    def _work(self, produce: Callable[[], Iterator[pd.DataFrame]]) -> None:
        chunks = produce()
        try:
            reached = np.iinfo(np.int64).min  # the start of the last row handed over
            while True:
                with self._turns.turn(self, reached):
                    chunk = next(chunks, None)
                if chunk is None:
                    break
                if len(chunk):
                    reached = int(chunk[START_NS].iloc[-1])
                if not self._hand_over("chunk", chunk):
                    return
            self._hand_over("end", None)
        except BaseException as error:  # noqa: BLE001 - raised again in the reading thread
            self._hand_over("error", error)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> _ReadAhead:
        return self

    def __next__(self) -> pd.DataFrame:
        if self._finished:
            raise StopIteration
        kind, value = self._made.get()
        if kind == "chunk":
            assert isinstance(value, pd.DataFrame)
            return value
        self.close()
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        raise StopIteration

    def close(self) -> None:
        self._finished = True
        self._stop.set()
        self._thread.join()


class _Readers:
    """The read-ahead threads of one open export: they take turns, and stop with it.

    Both readers read ahead. Arrow spends its time in C, without the GIL. The sqlite3 path
    builds Python rows under the GIL, but SQLite's own stepping releases it: on the 1M
    capture a thread took the sqlite3 path from 7.76 to 6.87 s for +88 MB (100,000-row
    chunks; with 250,000-row chunks it had gained little for +0.2 GB).
    """

    def __init__(self, *, threads: bool = True) -> None:
        self._threads = threads
        self._turns = _Turns()
        self._started: list[_ReadAhead] = []

    def start(self, produce: Callable[[], Iterator[pd.DataFrame]]) -> Iterator[pd.DataFrame]:
        if not self._threads:
            return produce()
        self._started.append(_ReadAhead(produce, self._turns))
        return self._started[-1]

    def close(self) -> None:
        for started in self._started:
            started.close()


class _Started:
    """A ChunkSource whose first chunks are read from the moment this is made (while the
    head is analysed); later calls start afresh. An error in starting it is raised where
    the chunks are first asked for, as without the early start."""

    def __init__(self, start: Callable[[], Iterator[pd.DataFrame]]) -> None:
        self._start = start
        self._first: Iterator[pd.DataFrame] | None
        try:
            self._first = start()
        except Exception as error:  # noqa: BLE001 - raised when the chunks are asked for
            self._first = _raising(error)

    def __call__(self) -> Iterator[pd.DataFrame]:
        first, self._first = self._first, None
        return first if first is not None else _lazily(self._start)


def _raising(error: Exception) -> Iterator[pd.DataFrame]:
    raise error
    yield  # a generator: the error comes with the first chunk


def _lazily(start: Callable[[], Iterator[pd.DataFrame]]) -> Iterator[pd.DataFrame]:
    """start()'s chunks, started when the first is asked for."""
    yield from start()


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


def with_pid(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls with their pid, from the upper bits of their global thread id (as nsys
    packs them): derived here, not in the query (queries.RUNTIME_CALLS)."""
    pids = (calls[GLOBAL_TID].to_numpy() >> 24) & 0xFFFFFF
    return calls.assign(**{PID: pids})


def _op_chunks(
    path: Path,
    query: tuple[str, OpKind],
    names: _Names,
    tally: _Tally,
    capture: tuple[int | None, int | None],  # its duration and stop (ANALYSIS_DETAILS)
    readers: _Readers,
) -> Callable[[], Iterator[pd.DataFrame]]:
    """A function that starts reading the op table and returns its chunks."""
    sql, kind = query

    def start() -> Iterator[pd.DataFrame]:
        categories = names.op_categories()
        by_id = (
            _codes_by_id(names.strings(queries.KERNEL_NAMES), categories)
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
        unknown = int(categories.get_indexer(pd.Index([_UNKNOWN]))[0])
        for chunk in read:
            # Values are checked as they are read (typed_frame in read_chunks).
            chunk = _drop_untimed(chunk, tally)
            impossible = impossible_times(chunk, *capture)
            with tally.lock:
                tally.op_rows += len(chunk)
            if impossible.any():
                with tally.lock:
                    tally.impossible += int(impossible.sum())
                chunk = chunk.loc[~impossible].reset_index(drop=True)
            repeated = _repeated_rows(chunk, OP_ROW_KEY)
            if repeated.any():
                with tally.lock:
                    tally.duplicated_ops += int(repeated.sum())
                chunk = chunk.loc[~repeated].reset_index(drop=True)
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
    names: _Names,
    tally: _Tally,
    capture: tuple[int | None, int | None],  # its duration and stop (ANALYSIS_DETAILS)
    readers: _Readers,
) -> Callable[[], Iterator[pd.DataFrame]]:
    """A function that starts reading the CUDA API table and returns its chunks."""

    def start() -> Iterator[pd.DataFrame]:
        if queries.RUNTIME_TABLE not in tables:
            return iter(())
        call_names = names.call_names()
        categories = _unique_index([*call_names.tolist(), _UNKNOWN])
        by_id = _codes_by_id(call_names, categories)
        kinds = [c.value for c in CallCategory]
        category_of = np.array([kinds.index(classify_call(n).value) for n in categories])
        read = read_chunks(path, queries.RUNTIME_CALLS, _CALL_READ)
        # Read and decoded on a thread of their own (the names above are looked up here).
        unknown = int(categories.get_indexer(pd.Index([_UNKNOWN]))[0])
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
            chunk = _drop_untimed(chunk, tally)
            impossible = impossible_times(chunk, *capture)
            with tally.lock:
                tally.call_rows += len(chunk)
            if impossible.any():
                with tally.lock:
                    tally.impossible_calls += int(impossible.sum())
                chunk = chunk.loc[~impossible].reset_index(drop=True)
            repeated = _repeated_rows(chunk, CALL_ROW_KEY)
            if repeated.any():
                with tally.lock:
                    tally.duplicated_calls += int(repeated.sum())
                chunk = chunk.loc[~repeated].reset_index(drop=True)
            chunk = with_pid(chunk)
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
    names: _Names,
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
        calls = pd.read_sql_query(
            queries.runtime_calls_named(loading.index.tolist(), bound),
            connection,
            dtype=_CALL_READ,
        )
    calls = with_pid(calls[calls[START_NS] <= until_ns])
    calls[NAME] = pd.Categorical(calls.pop("name_id").map(loading))
    calls[CALL_CATEGORY] = pd.Categorical([CallCategory.MODULE_LOAD.value] * len(calls))
    return calls[list(API_CALL_COLUMNS)]


def _launches_per_thread(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    names: _Names,
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
        counts = pd.read_sql_query(
            queries.launches_per_thread(launching.index.tolist(), lo, hi),
            connection,
            dtype={GLOBAL_TID: "int64", "launches": "int64"},
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
    names: _Names,
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
        found = pd.read_sql_query(
            queries.kernels_named(picked.index.tolist()),
            connection,
            dtype={**columns, "name_id": "int64"},
        )
    found[NAME] = found.pop("name_id").map(picked).astype(str)
    return found


def _first_rowid_after(connection: sqlite3.Connection, table: str, time_ns: int) -> int:
    """The smallest rowid whose row starts after time_ns, in a table sorted by start."""
    largest = int(connection.execute(queries.largest_rowid(table)).fetchone()[0] or 0)
    lo, hi = 0, largest + 1  # the answer lies in (lo, hi]
    probe = queries.start_at_rowid(table)
    while hi - lo > 1:
        middle = (lo + hi) // 2
        row = connection.execute(probe, (middle,)).fetchone()
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
                found.update(int(row[0]) for row in connection.execute(queries.pids_in(table)))
    return sorted(found)


def _calls_per_thread(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> pd.Series:
    if queries.RUNTIME_TABLE not in tables:
        return pd.Series(dtype="int64")
    with reading_export(path):
        counts = pd.read_sql_query(
            queries.calls_per_thread(), connection, dtype={"global_tid": "int64", "calls": "int64"}
        )
    return counts.set_index("global_tid")["calls"].astype("int64")
