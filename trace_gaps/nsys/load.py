"""Open an export read-only, probe its schema, run the queries and return a Trace."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.errors import MissingTableError, NoKernelsError, NotAnExportError
from trace_gaps.model import (
    API_CALL_COLUMNS,
    CALL_CATEGORY,
    CORRELATION_ID,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    GRAPH_EVENT_COLUMNS,
    GRAPH_NODE_COLUMNS,
    NAME,
    NVTX_RANGE_COLUMNS,
    OP_KIND,
    OS_CALL_COLUMNS,
    OVERHEAD_COLUMNS,
    PID,
    START_NS,
    STREAM_ID,
    THREAD_COLUMNS,
    ExportInfo,
    GpuInfo,
    GraphTraceMode,
    OpKind,
    Trace,
    empty_frame,
)
from trace_gaps.nsys import queries
from trace_gaps.nsys.calls import classify_call, strip_version_suffix
from trace_gaps.nsys.convert import export_command, is_report

SQLITE_MAGIC = b"SQLite format 3\x00"

_OP_INT_DTYPES = {
    name: dtype for name, dtype in GPU_OP_COLUMNS.items() if dtype not in ("category", "object")
}


@contextmanager
def open_export(path: Path, *, values: bool = True) -> Iterator[sqlite3.Connection]:
    """Open an export read-only (the file is never changed), after checking it is SQLite.

    values=False: a ValueError or TypeError raised while it is open is not taken for a
    bad value in the file (the streamed analysis runs inside; its reads say so themselves).
    """
    check_is_sqlite(path)
    uri = export_uri(path)
    try:
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as error:
        raise NotAnExportError(
            f"cannot be opened as SQLite ({error}); check the file and re-run nsys export",
            path=path,
        ) from error
    # Names are user strings (kernels, NVTX text): never let a stray byte stop the report.
    connection.text_factory = _decode_text
    try:
        with reading_export(path, values=values):
            yield connection
    finally:
        connection.close()


def export_uri(path: Path) -> str:
    """The read-only URI of an export. A WAL-mode export is opened immutable: reading it
    read-only otherwise creates -wal and -shm files beside it (and fails in a read-only folder)."""
    uri = path.resolve().as_uri() + "?mode=ro"
    return uri + "&immutable=1" if _is_wal_mode(path) else uri


def _is_wal_mode(path: Path) -> bool:
    # SQLite header bytes 18 and 19: file format write and read versions, 2 for WAL.
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18:20] == b"\x02\x02"


def _name_text(value: object) -> object:
    if isinstance(value, bytes):
        return _decode_text(value)
    return value if value is None or isinstance(value, str) else str(value)


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


@contextmanager
def reading_export(path: Path, *, values: bool = True) -> Iterator[None]:
    """Turn SQLite errors met while reading (open, schema, any query) into NotAnExportError.

    values: also take a ValueError or TypeError for a value the typed read refused.
    """
    try:
        yield
    except UnicodeDecodeError as error:
        # SQLite's own message quoted garbage bytes of a damaged schema.
        raise NotAnExportError(
            "is damaged or truncated (its schema holds bytes that are not text); re-export it "
            f"from the report: {export_command(path.with_suffix('.nsys-rep'), path, overwrite=True)}",
            path=path,
        ) from error
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as error:
        # pandas wraps the sqlite3 error with the whole SQL text; keep only SQLite's words.
        cause = str(error.__cause__ or error).splitlines()[0]
        if "database is locked" in cause:
            raise NotAnExportError(
                "is locked by another program, which is writing it (SQLite: database is "
                "locked); wait until it is done, then run trace-gaps again",
                path=path,
            ) from error
        if "no such column" in cause or "no such table" in cause:
            raise NotAnExportError(
                f"has a schema trace-gaps cannot read ({cause}); please report it with the "
                "Nsight Systems version that wrote the export",
                path=path,
            ) from error
        raise NotAnExportError(
            f"is damaged or truncated ({cause}); re-export it from the report: "
            f"{export_command(path.with_suffix('.nsys-rep'), path, overwrite=True)}",
            path=path,
        ) from error
    except (ValueError, TypeError) as error:
        if not values:
            raise
        # A NULL or a string where nsys always writes a number: the typed read refuses it.
        cause = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise NotAnExportError(
            f"holds a value trace-gaps cannot read ({cause}); the export is damaged or from an "
            "unsupported nsys version: re-export it, and report it with the nsys version if "
            "that does not help",
            path=path,
        ) from error


# First bytes of compressed files, with the command that undoes each.
_COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -k"),
    b"\xfd7zXZ\x00": ("xz", "unxz -k"),
    b"\x28\xb5\x2f\xfd": ("zstd", "unzstd"),
    b"BZh": ("bzip2", "bunzip2 -k"),
    b"PK\x03\x04": ("zip", "unzip"),
}


def check_no_pending_writes(path: Path) -> None:
    """Raise when SQLite files beside the export hold writes not yet in it: a hot journal
    or a non-empty write-ahead log (a program is writing it, or stopped midway)."""
    for suffix, what in (("-journal", "a hot journal"), ("-wal", "a write-ahead log")):
        side = path.with_name(path.name + suffix)
        try:
            pending = side.stat().st_size > 0
        except OSError:
            continue
        if pending:
            raise NotAnExportError(
                f"has {what} beside it ({side.name}) with changes not yet in the file: a "
                "program is writing it, or stopped midway; wait until it is done (or open it "
                "once with sqlite3 to finish the write), then run trace-gaps again",
                path=path,
            )


def check_is_sqlite(path: Path) -> None:
    """Raise NotAnExportError unless the path is a readable file with SQLite's header."""
    if not path.exists():
        raise NotAnExportError(
            "does not exist; pass the .sqlite file that `nsys export --type sqlite` wrote",
            path=path,
        )
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.sqlite"))[:3]
        found = f" (it holds {', '.join(inside)})" if inside else ""
        raise NotAnExportError(
            f"is a directory{found}; pass one .sqlite file that `nsys export --type sqlite` wrote",
            path=path,
        )
    if not path.is_file():
        raise NotAnExportError(
            "is not a regular file (a FIFO, socket or device); pass the .sqlite file that "
            "`nsys export --type sqlite` wrote",
            path=path,
        )
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_MAGIC))
    except OSError as error:
        raise NotAnExportError(
            f"cannot be read ({error.strerror}); check its permissions", path=path
        ) from error
    if header == SQLITE_MAGIC:
        check_no_pending_writes(path)
        return
    for magic, (kind, command) in _COMPRESSED.items():
        if header.startswith(magic):
            raise NotAnExportError(
                f"is compressed ({kind}), not an SQLite export; decompress it first: "
                f"{command} {shlex.quote(str(path))}",
                path=path,
            )
    if is_report(path):
        raise NotAnExportError(
            "is an Nsight Systems report, not its SQLite export, and nsys is not on PATH; "
            f"export it first: {export_command(path)}",
            path=path,
        )
    if not header:
        raise NotAnExportError(
            "is empty (0 bytes); re-run the export: nsys export --type sqlite -o OUT.sqlite "
            "REPORT.nsys-rep",
            path=path,
        )
    raise NotAnExportError(
        "is not a SQLite file; pass the file that `nsys export --type sqlite -o OUT.sqlite "
        "REPORT.nsys-rep` writes",
        path=path,
    )


def list_tables(connection: sqlite3.Connection, path: Path) -> tuple[str, ...]:
    """The export's table names, sorted; raise NotAnExportError when SQLite cannot read them."""
    with reading_export(path):
        rows = connection.execute(queries.TABLES).fetchall()
    return tuple(sorted(str(row[0]) for row in rows))


def check_is_cuda_export(tables: tuple[str, ...], path: Path) -> None:
    """Raise unless the tables are those of an Nsight Systems export with CUDA GPU work."""
    if not tables:
        raise NotAnExportError(
            "is an empty SQLite database (no tables), not an Nsight Systems export; pass the "
            "file that `nsys export --type sqlite` wrote",
            path=path,
        )
    is_nsys = _has_any(tables, (queries.STRING_TABLE, *queries.EXPORT_META_TABLES)) or any(
        table.startswith("CUPTI_ACTIVITY_KIND_") for table in tables
    )
    if not is_nsys:
        shown = ", ".join(tables[:4]) + (", ..." if len(tables) > 4 else "")
        raise NotAnExportError(
            f"is a SQLite database from another program (tables: {shown}), not an Nsight "
            "Systems export; pass the file that `nsys export --type sqlite` wrote",
            path=path,
        )
    if _has_any(tables, _GPU_TABLES):
        return
    if queries.RUNTIME_TABLE in tables:
        raise NoKernelsError(
            f"has CUDA API calls but no GPU work (no {queries.KERNEL_TABLE} table): no kernel "
            "ran while nsys was recording; capture a window in which the program runs on the GPU",
            path=path,
        )
    raise MissingTableError(
        f"has no {queries.KERNEL_TABLE} table: the capture did not trace CUDA; re-run "
        "nsys profile with --trace=cuda,nvtx and export again",
        path=path,
    )


def load_trace(path: Path) -> Trace:
    """Read the columns the analysis needs from an export into a Trace."""
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        check_is_cuda_export(tables, path)
        trace = _read_trace(connection, path, tables)
        if trace.gpu_ops.empty:
            raise no_timed_ops_error(connection, path, tables, trace.info.untimed_events)
    return trace


def no_timed_ops_error(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...], untimed: int
) -> NoKernelsError:
    """The error for an export without a timed GPU op: none ran, or their records were lost."""
    launches = _count(connection, tables, queries.RUNTIME_TABLE, queries.LAUNCH_CALL_COUNT)
    if launches:
        return NoKernelsError(
            f"has {launches} launch calls but no GPU activity records ({untimed} untimed rows "
            "left out): GPU tracing was off, or the records were lost (a process that exits "
            "abnormally can lose them, and full buffers drop them); capture again with "
            "--trace=cuda and GPU activity on, and let the program exit normally or call "
            "cudaProfilerStop() before it exits",
            path=path,
        )
    return NoKernelsError(
        f"has no timed GPU ops ({untimed} untimed rows left out): no kernel, copy or graph ran "
        "while nsys was recording; capture a window in which the program runs on the GPU",
        path=path,
    )


_GPU_TABLES = (
    queries.KERNEL_TABLE,
    queries.MEMCPY_TABLE,
    queries.MEMSET_TABLE,
    queries.GRAPH_TRACE_TABLE,
)


def _has_any(tables: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    return any(table in tables for table in wanted)


def _read_trace(connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]) -> Trace:
    gpu_ops, untimed_ops = _read_gpu_ops(connection, tables)
    api_calls, untimed_calls = _read_api_calls(connection, tables)
    head = read_head(connection, path, tables, gpu_ops=gpu_ops)
    impossible = impossible_times(gpu_ops, head.info.capture_duration_ns)
    gpu_ops = gpu_ops.loc[~impossible].reset_index(drop=True)
    impossible_calls = impossible_times(api_calls, head.info.capture_duration_ns)
    api_calls = api_calls.loc[~impossible_calls].reset_index(drop=True)
    repeated_ops = gpu_ops.duplicated(OP_ROW_KEY).to_numpy()
    repeated_calls = api_calls.duplicated(CALL_ROW_KEY).to_numpy()
    info = replace(
        head.info,
        untimed_events=untimed_ops + untimed_calls,
        impossible_ops=int(impossible.sum()),
        impossible_calls=int(impossible_calls.sum()),
        duplicated_ops=int(repeated_ops.sum()),
        duplicated_calls=int(repeated_calls.sum()),
    )
    gpu_ops = gpu_ops.loc[~repeated_ops].reset_index(drop=True)
    api_calls = api_calls.loc[~repeated_calls].reset_index(drop=True)
    return replace(head, info=info, gpu_ops=gpu_ops, api_calls=api_calls)


def read_head(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    *,
    gpu_ops: pd.DataFrame | None = None,
) -> Trace:
    """Everything but the op and call rows: ranges, threads, OS calls, settings, counts.

    gpu_ops, when already read, tells the graph trace mode of exports that do not record it;
    without them the loader asks SQLite.
    """
    nvtx_ranges, unclosed = _read_nvtx_ranges(connection, tables)
    impossible_ranges = impossible_times(nvtx_ranges, None)
    nvtx_ranges = nvtx_ranges.loc[~impossible_ranges].reset_index(drop=True)
    export_meta = _read_pairs(connection, _first_present(tables, queries.EXPORT_META_TABLES))
    capture_meta = (
        _read_pairs(connection, queries.CAPTURE_META_TABLE)
        if queries.CAPTURE_META_TABLE in tables
        else ()
    )
    info = ExportInfo(
        path=path,
        size_bytes=path.stat().st_size,
        nsys_version=dict(export_meta).get("EXPORT_PRODUCT_VERSION"),
        schema_version=dict(export_meta).get("EXPORT_SCHEMA_VERSION"),
        tables=tables,
        graph_trace_mode=_graph_trace_mode(capture_meta, connection, tables, gpu_ops),
        capture_settings=capture_meta,
        gpus=_read_gpus(connection, tables),
        unclosed_ranges=unclosed,
        impossible_ranges=int(impossible_ranges.sum()),
        graph_capture_events=_count(
            connection, tables, queries.GRAPH_EVENTS_TABLE, queries.GRAPH_EVENT_COUNT
        ),
        sync_rows=_count(connection, tables, queries.SYNC_TABLE, queries.SYNC_COUNT),
        export_settings=export_meta,
        missing_columns=_missing_columns(connection, tables),
        capture_duration_ns=capture_duration(connection, tables),
        lost_event_messages=_lost_event_messages(connection, tables),
        session_start_utc_ns=_session_start(connection, tables),
    )
    return Trace(
        info=info,
        gpu_ops=empty_frame(GPU_OP_COLUMNS),
        api_calls=empty_frame(API_CALL_COLUMNS),
        nvtx_ranges=nvtx_ranges,
        threads=_read_threads(connection, tables),
        processes=_read_processes(connection, tables),
        overhead=_read_overhead(connection, tables),
        os_calls=_read_os_calls(connection, tables),
        graph_events=_read_if(
            connection,
            tables,
            queries.GRAPH_EVENTS_TABLE,
            queries.GRAPH_EVENTS_BY_PROCESS,
            GRAPH_EVENT_COLUMNS,
        ),
        graph_nodes=_read_if(
            connection,
            tables,
            queries.GRAPH_NODE_EVENTS_TABLE,
            queries.GRAPH_NODE_EVENTS,
            GRAPH_NODE_COLUMNS,
        ),
    )


def _read_if(
    connection: sqlite3.Connection,
    tables: tuple[str, ...],
    table: str,
    sql: str,
    columns: dict[str, str],
) -> pd.DataFrame:
    """A query's rows, or an empty frame when the export lacks its table."""
    if table not in tables:
        return empty_frame(columns)
    return pd.read_sql_query(sql, connection, dtype=columns)


def _read_frame(connection: sqlite3.Connection, sql: str, dtype: dict[str, str]) -> pd.DataFrame:
    """Run one big query into a frame with these dtypes.

    Through Arrow (adbc-driver-sqlite + pyarrow, the `fast` extra) when installed: several
    times faster and leaner than pandas over sqlite3, which stays the fallback (and is used
    for any query the Arrow path cannot take). Both give the same frame.
    """
    frame = _read_frame_arrow(connection, sql)
    if frame is None:
        frame = pd.read_sql_query(sql, connection)
    return typed_frame(frame, dtype, sql)


def typed_frame(frame: pd.DataFrame, dtype: dict[str, str], sql: str) -> pd.DataFrame:
    """The frame with these dtypes; a NULL or text where a number belongs raises a
    NotAnExportError naming the table, the column and how many rows hold it."""
    try:
        return frame.astype(dtype)
    except (ValueError, TypeError, OverflowError) as error:
        for column in dtype:
            if column not in frame.columns or dtype[column] in ("object", "category"):
                continue
            values = frame[column]
            nulls = int(values.isna().sum())
            text = int((pd.to_numeric(values, errors="coerce").isna() & values.notna()).sum())
            if nulls or text:
                what = f"NULL in {nulls:,}" if nulls else f"text in {text:,}"
                raise NotAnExportError(
                    f"has {what} rows of {_source_column(sql, column)}, where nsys always "
                    "writes a number; the export is damaged or from an unsupported nsys "
                    "version: re-export it, and report it with the nsys version if that does "
                    "not help"
                ) from error
        raise


def _source_column(sql: str, alias: str) -> str:
    """TABLE.column behind a query's `column AS alias` (the alias when it is an expression)."""
    table = re.search(r"\bFROM\s+(\w+)", sql)
    column = re.search(rf"([\w.\"]+)\s+AS\s+{re.escape(alias)}\b", sql)
    name = column.group(1).split(".")[-1].strip('"') if column else alias
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        name = alias
    return f"{table.group(1)}.{name}" if table else name


# Set to 1 to read through sqlite3 even when the Arrow driver is installed.
ARROW_READER_ENV = "TRACE_GAPS_NO_ARROW"


def _read_frame_arrow(connection: sqlite3.Connection, sql: str) -> pd.DataFrame | None:
    """The query's rows through ADBC's SQLite driver, or None to use the sqlite3 path."""
    if os.environ.get(ARROW_READER_ENV):
        return None
    try:
        import adbc_driver_sqlite.dbapi as adbc_sqlite
        import pyarrow as pa  # type: ignore[import-untyped]
    except ImportError:
        return None
    database = connection.execute("PRAGMA database_list").fetchone()[2]
    if not database:
        return None
    try:
        uri = export_uri(Path(database))
        with adbc_sqlite.connect(uri) as arrow_connection, arrow_connection.cursor() as cursor:
            cursor.execute(sql)
            table = cursor.fetch_arrow_table()
        for column in table.columns:
            if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                return None  # a BLOB where text belongs: sqlite3 decodes it as text, as always
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                column.validate(full=True)  # invalid UTF-8: let sqlite3 decode it with replacement
            elif column.null_count:
                return None  # NULL where the sqlite3 path expects a value: let it report it
    except Exception:  # noqa: BLE001 - any driver problem: the sqlite3 path reads it, or raises the usual error
        return None
    if table.num_rows == 0:
        return None  # no rows to infer column types from
    # Hand each column's Arrow memory back as it is converted: the peak stays near one copy.
    frame: pd.DataFrame = table.to_pandas(split_blocks=True, self_destruct=True)
    return frame


def read_strings(connection: sqlite3.Connection, sql: str) -> pd.DataFrame:
    """name_id → name rows of StringIds; an id written twice (a damaged table, since nsys
    declares it a primary key) keeps its first value, so every reader resolves it the same."""
    names = pd.read_sql_query(sql, connection, dtype={"name_id": "int64"})
    return names.drop_duplicates("name_id", keep="first").reset_index(drop=True)


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[0] for row in connection.execute(queries.TABLE_COLUMNS, (table,))}


# Columns newer exports have that the loader reads around when they are absent.
_OPTIONAL_COLUMNS = ((queries.KERNEL_TABLE, "graphNodeId"), (queries.NVTX_TABLE, "textId"))


def _missing_columns(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        f"{table}.{column}"
        for table, column in _OPTIONAL_COLUMNS
        if table in tables and column not in _columns(connection, table)
    )


# A row equal to an earlier one on these columns is a copy (nsys writes each activity once).
OP_ROW_KEY = [PID, DEVICE_ID, STREAM_ID, CORRELATION_ID, START_NS, END_NS]
CALL_ROW_KEY = [GLOBAL_TID, CORRELATION_ID, START_NS, END_NS]

# Past this, a time is no nanosecond count nsys writes (about 146 years): a damaged row.
LATEST_POSSIBLE_NS = 1 << 62


def impossible_times(ops: pd.DataFrame, capture_duration_ns: int | None) -> np.ndarray:
    """Mask of the ops (or ranges) whose times cannot be real: a start before 0, an end before the start,
    past LATEST_POSSIBLE_NS, or a duration longer than the capture itself."""
    starts = ops[START_NS].to_numpy()
    ends = ops[END_NS].to_numpy()
    longest = LATEST_POSSIBLE_NS if capture_duration_ns is None else capture_duration_ns
    # ends >= starts first: end - start cannot overflow once both are in [0, 2**62].
    sane = (starts >= 0) & (ends >= starts) & (ends <= LATEST_POSSIBLE_NS)
    sane[sane] = (ends[sane] - starts[sane]) <= longest
    return ~sane


# What nsys writes when it could not keep every event.
_LOST_EVENTS = re.compile(
    r"\blost\b|\bdropp|\bdiscard|overflow|not (?:been )?flushed|\bincomplete\b", re.IGNORECASE
)


def _lost_event_messages(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> tuple[str, ...]:
    if queries.DIAGNOSTIC_TABLE not in tables:
        return ()
    try:
        texts = [str(row[0]) for row in connection.execute(queries.DIAGNOSTICS)]
    except sqlite3.Error:  # an older schema: no diagnostics to quote
        return ()
    return tuple(dict.fromkeys(t for t in texts if _LOST_EVENTS.search(t)))


def _session_start(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int | None:
    if queries.SESSION_START_TABLE not in tables:
        return None
    try:
        row = connection.execute(queries.SESSION_START).fetchone()
    except sqlite3.Error:  # a schema without the column
        return None
    value = row[0] if row else None
    return int(value) if isinstance(value, int) and value > 0 else None


def capture_duration(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int | None:
    """The capture's length from ANALYSIS_DETAILS, or None when the export does not say."""
    if queries.ANALYSIS_TABLE not in tables:
        return None
    try:
        value = connection.execute(queries.CAPTURE_DURATION).fetchone()[0]
    except sqlite3.Error:  # an older schema without the column: no capture-length check
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def _drop_untimed(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    # CUPTI writes start = end = 0 when it could not time an activity.
    untimed = (frame[START_NS] == 0) & (frame[END_NS] == 0)
    return frame.loc[~untimed].reset_index(drop=True), int(untimed.sum())


def _read_gpu_ops(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> tuple[pd.DataFrame, int]:
    parts: list[pd.DataFrame] = []
    if queries.KERNEL_TABLE in tables:
        sql = (
            queries.KERNELS
            if "graphNodeId" in _columns(connection, queries.KERNEL_TABLE)
            else queries.KERNELS_WITHOUT_GRAPH_NODES
        )
        kernels = _read_frame(connection, sql, {**_OP_INT_DTYPES, "name_id": "int64"})
        names = read_strings(connection, queries.KERNEL_NAMES)
        kernels[NAME] = (
            kernels.pop("name_id").map(names.set_index("name_id")[NAME]).astype(object).fillna("?")
        )
        parts.append(kernels.assign(**{OP_KIND: OpKind.KERNEL.value}))
    for table, sql, kind in (
        (queries.MEMCPY_TABLE, queries.MEMCPYS, OpKind.MEMCPY),
        (queries.MEMSET_TABLE, queries.MEMSETS, OpKind.MEMSET),
        (queries.GRAPH_TRACE_TABLE, queries.GRAPH_TRACES, OpKind.GRAPH),
    ):
        if table in tables:
            frame = _read_frame(connection, sql, _OP_INT_DTYPES)
            parts.append(frame.assign(**{OP_KIND: kind.value}))
    if not parts:
        return empty_frame(GPU_OP_COLUMNS), 0
    ops = pd.concat(parts, ignore_index=True)
    ops, untimed = _drop_untimed(ops)
    ops[OP_KIND] = pd.Categorical(ops[OP_KIND], categories=[k.value for k in OpKind])
    ops[NAME] = ops[NAME].astype("category")
    return ops[list(GPU_OP_COLUMNS)], untimed


def _read_api_calls(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> tuple[pd.DataFrame, int]:
    if queries.RUNTIME_TABLE not in tables:
        return empty_frame(API_CALL_COLUMNS), 0
    int_dtypes = {n: d for n, d in API_CALL_COLUMNS.items() if d not in ("category", "object")}
    calls = _read_frame(connection, queries.RUNTIME_CALLS, {**int_dtypes, "name_id": "int64"})
    names = read_strings(connection, queries.RUNTIME_NAMES)
    names[NAME] = names[NAME].map(strip_version_suffix)
    names[CALL_CATEGORY] = names[NAME].map(lambda n: classify_call(n).value)
    name_ids = calls.pop("name_id")
    # Map through categoricals: one Python call per distinct name, not per row.
    lookup = names.set_index("name_id")
    calls[NAME] = pd.Categorical(name_ids.map(lookup[NAME]).astype(object).fillna("?"))
    calls[CALL_CATEGORY] = pd.Categorical(
        name_ids.map(lookup[CALL_CATEGORY]).astype(object).fillna("other")
    )
    calls, untimed = _drop_untimed(calls)
    return calls[list(API_CALL_COLUMNS)], untimed


def _read_nvtx_ranges(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> tuple[pd.DataFrame, int]:
    if queries.NVTX_TABLE not in tables:
        return empty_frame(NVTX_RANGE_COLUMNS), 0
    sql = (
        queries.NVTX_RANGES
        if "textId" in _columns(connection, queries.NVTX_TABLE)
        else queries.NVTX_RANGES_TEXT_ONLY
    )
    int_dtypes = {n: d for n, d in NVTX_RANGE_COLUMNS.items() if d not in ("category", "object")}
    ranges = _read_frame(connection, sql, int_dtypes)
    unclosed = int(connection.execute(queries.UNCLOSED_NVTX_RANGES).fetchone()[0])
    ranges[NAME] = ranges[NAME].astype(object)
    if pd.api.types.infer_dtype(ranges[NAME], skipna=True) not in ("string", "empty"):
        # A BLOB (or a number) where nsys writes text: still a name, decoded like text.
        ranges[NAME] = ranges[NAME].map(_name_text).astype(object)
    return ranges[list(NVTX_RANGE_COLUMNS)], unclosed


def _read_threads(connection: sqlite3.Connection, tables: tuple[str, ...]) -> pd.DataFrame:
    if queries.THREAD_TABLE not in tables:
        return empty_frame(THREAD_COLUMNS)
    dtypes = {n: d for n, d in THREAD_COLUMNS.items() if d != "object"}
    threads = pd.read_sql_query(queries.THREADS, connection, dtype=dtypes)
    return threads.drop_duplicates("global_tid", keep="last").reset_index(drop=True)


def _read_processes(connection: sqlite3.Connection, tables: tuple[str, ...]) -> dict[int, str]:
    if queries.PROCESS_TABLE not in tables:
        return {}
    rows = connection.execute(queries.PROCESSES).fetchall()
    return {int(pid): str(name or "") for pid, name in rows if pid is not None}


def _read_overhead(connection: sqlite3.Connection, tables: tuple[str, ...]) -> pd.DataFrame:
    if queries.OVERHEAD_TABLE not in tables:
        return empty_frame(OVERHEAD_COLUMNS)
    dtypes = {n: d for n, d in OVERHEAD_COLUMNS.items() if d != "object"}
    return _read_frame(connection, queries.PROFILER_OVERHEAD, dtypes)


def _read_os_calls(connection: sqlite3.Connection, tables: tuple[str, ...]) -> pd.DataFrame:
    if queries.OS_CALL_TABLE not in tables:
        return empty_frame(OS_CALL_COLUMNS)
    dtypes = {n: d for n, d in OS_CALL_COLUMNS.items() if d != "category"}
    calls = _read_frame(connection, queries.OS_CALLS, {**dtypes, "name_id": "int64"})
    names = read_strings(connection, queries.OS_CALL_NAMES)
    # Each distinct id named once (a million calls use a few dozen names).
    codes, ids = pd.factorize(calls.pop("name_id").to_numpy())
    named = pd.Categorical(
        pd.Series(ids).map(names.set_index("name_id")[NAME]).astype(object).fillna("?")
    )
    calls[NAME] = pd.Categorical.from_codes(
        named.codes[codes] if len(codes) else codes, categories=named.categories
    )
    return calls[list(OS_CALL_COLUMNS)]


def _read_gpus(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[GpuInfo, ...]:
    if queries.GPU_TABLE not in tables:
        return ()
    rows = connection.execute(queries.GPUS).fetchall()
    return tuple(GpuInfo(device_id=int(i), name=str(n)) for i, n in rows)


def _first_present(tables: tuple[str, ...], candidates: tuple[str, ...]) -> str | None:
    return next((table for table in candidates if table in tables), None)


def _read_pairs(connection: sqlite3.Connection, table: str | None) -> tuple[tuple[str, str], ...]:
    if table is None:
        return ()
    sql = queries.EXPORT_META.get(table, queries.CAPTURE_META)
    return tuple((str(k), "" if v is None else str(v)) for k, v in connection.execute(sql))


def _count(connection: sqlite3.Connection, tables: tuple[str, ...], table: str, sql: str) -> int:
    return int(connection.execute(sql).fetchone()[0]) if table in tables else 0


def _graph_trace_mode(
    capture_meta: tuple[tuple[str, str], ...],
    connection: sqlite3.Connection,
    tables: tuple[str, ...],
    gpu_ops: pd.DataFrame | None,
) -> GraphTraceMode:
    for key, value in capture_meta:
        if key.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE"):
            return GraphTraceMode.NODE if value.lower() == "node" else GraphTraceMode.GRAPH
    if gpu_ops is not None:
        has_graph_ops = bool((gpu_ops[OP_KIND] == OpKind.GRAPH.value).any())
        has_nodes = bool((gpu_ops["graph_node_id"] >= 0).any())
    else:
        has_graph_ops = _any(connection, tables, queries.GRAPH_TRACE_TABLE, queries.any_timed)
        node_column = f"{queries.KERNEL_TABLE}.graphNodeId"
        has_nodes = node_column not in _missing_columns(connection, tables) and _any(
            connection, tables, queries.KERNEL_TABLE, queries.any_graph_node
        )
    if has_graph_ops:
        return GraphTraceMode.GRAPH
    if has_nodes:
        return GraphTraceMode.NODE
    return GraphTraceMode.UNKNOWN


def _any(
    connection: sqlite3.Connection,
    tables: tuple[str, ...],
    table: str,
    query: Callable[[str], str],
) -> bool:
    return table in tables and connection.execute(query(table)).fetchone() is not None


def count_rows(path: Path) -> dict[str, int]:
    """Row counts of the tables `trace-gaps info` reports on (absent tables are left out)."""
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        return {
            table: int(connection.execute(sql).fetchone()[0])
            for table, sql in queries.ROW_COUNTS.items()
            if table in tables
        }


def devices_per_process(path: Path) -> dict[int, list[int]]:
    """The GPUs (device ids) each process ran kernels, copies or memsets on."""
    devices: dict[int, set[int]] = {}
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        for table, sql in queries.DEVICES_PER_PROCESS.items():
            if table not in tables:
                continue
            for pid, device_id in connection.execute(sql):
                if pid is not None and device_id is not None:
                    devices.setdefault(int(pid), set()).add(int(device_id))
    return {pid: sorted(ids) for pid, ids in sorted(devices.items())}
