"""Open an export read-only, probe its schema, run the queries and return a Trace."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from trace_gaps.errors import MissingTableError, NotAnExportError
from trace_gaps.model import (
    API_CALL_COLUMNS,
    CALL_CATEGORY,
    END_NS,
    GPU_OP_COLUMNS,
    NAME,
    NVTX_RANGE_COLUMNS,
    OP_KIND,
    OVERHEAD_COLUMNS,
    START_NS,
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

SQLITE_MAGIC = b"SQLite format 3\x00"

_OP_INT_DTYPES = {
    name: dtype for name, dtype in GPU_OP_COLUMNS.items() if dtype not in ("category", "object")
}


@contextmanager
def open_export(path: Path) -> Iterator[sqlite3.Connection]:
    """Open an export read-only (the file is never changed), after checking it is SQLite."""
    check_is_sqlite(path)
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as error:
        raise NotAnExportError(f"{path} cannot be opened as SQLite ({error}).") from error
    try:
        yield connection
    finally:
        connection.close()


def check_is_sqlite(path: Path) -> None:
    """Raise NotAnExportError unless the path is a readable file with SQLite's header."""
    if not path.exists():
        raise NotAnExportError(f"{path} does not exist. Pass the .sqlite file that nsys export wrote.")
    if path.is_dir():
        raise NotAnExportError(f"{path} is a directory. Pass the .sqlite file that nsys export wrote.")
    with path.open("rb") as handle:
        header = handle.read(len(SQLITE_MAGIC))
    if header == SQLITE_MAGIC:
        return
    export_hint = f"nsys export --type sqlite -o {path.with_suffix('.sqlite').name} {path.name}"
    if path.suffix in (".nsys-rep", ".qdrep"):
        raise NotAnExportError(
            f"{path} is an Nsight Systems report, not a SQLite export. Export it first: {export_hint}"
        )
    if not header:
        raise NotAnExportError(
            f"{path} is empty. Re-run the export: nsys export --type sqlite -o OUT.sqlite REPORT.nsys-rep"
        )
    raise NotAnExportError(
        f"{path} is not a SQLite file. Export the report first: "
        "nsys export --type sqlite -o OUT.sqlite REPORT.nsys-rep"
    )


def list_tables(connection: sqlite3.Connection, path: Path) -> tuple[str, ...]:
    """The export's table names, sorted; raise NotAnExportError when SQLite cannot read them."""
    try:
        rows = connection.execute(queries.TABLES).fetchall()
    except sqlite3.DatabaseError as error:
        raise NotAnExportError(
            f"{path} is damaged or not a complete SQLite file ({error}). "
            "Re-run nsys export; an interrupted export leaves a truncated file."
        ) from error
    return tuple(sorted(row[0] for row in rows))


def load_trace(path: Path) -> Trace:
    """Read the columns the analysis needs from an export into a Trace."""
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        if queries.STRING_TABLE not in tables or not _has_any(tables, _GPU_TABLES + (queries.RUNTIME_TABLE,)):
            if not tables:
                raise NotAnExportError(f"{path} is a SQLite file with no tables, not an nsys export.")
            raise NotAnExportError(
                f"{path} is SQLite but not an Nsight Systems export with CUDA data "
                "(no StringIds or CUPTI_ACTIVITY_KIND_* tables). "
                "Pass the file from nsys export --type sqlite of a capture with --trace=cuda."
            )
        if not _has_any(tables, _GPU_TABLES):
            raise MissingTableError(
                f"{path} has no {queries.KERNEL_TABLE} table: the capture did not trace CUDA work. "
                "Re-run nsys profile with --trace=cuda,nvtx."
            )
        try:
            return _read_trace(connection, path, tables)
        except sqlite3.DatabaseError as error:
            raise NotAnExportError(
                f"{path} could not be read ({error}). The file may be truncated or corrupt: "
                "re-run nsys export."
            ) from error


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
    nvtx_ranges, unclosed = _read_nvtx_ranges(connection, tables)
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
        graph_trace_mode=_graph_trace_mode(capture_meta, gpu_ops),
        capture_settings=capture_meta,
        gpus=_read_gpus(connection, tables),
        untimed_events=untimed_ops + untimed_calls,
        unclosed_ranges=unclosed,
        graph_capture_events=_count(connection, tables, queries.GRAPH_EVENTS_TABLE, queries.GRAPH_EVENT_COUNT),
        sync_rows=_count(connection, tables, queries.SYNC_TABLE, queries.SYNC_COUNT),
    )
    return Trace(
        info=info,
        gpu_ops=gpu_ops,
        api_calls=api_calls,
        nvtx_ranges=nvtx_ranges,
        threads=_read_threads(connection, tables),
        processes=_read_processes(connection, tables),
        overhead=_read_overhead(connection, tables),
    )


def _columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {row[0] for row in connection.execute(queries.TABLE_COLUMNS, (table,))}


def _drop_untimed(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    # CUPTI writes start = end = 0 when it could not time an activity.
    untimed = (frame[START_NS] == 0) & (frame[END_NS] == 0)
    return frame.loc[~untimed].reset_index(drop=True), int(untimed.sum())


def _read_gpu_ops(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[pd.DataFrame, int]:
    parts: list[pd.DataFrame] = []
    if queries.KERNEL_TABLE in tables:
        sql = (
            queries.KERNELS
            if "graphNodeId" in _columns(connection, queries.KERNEL_TABLE)
            else queries.KERNELS_WITHOUT_GRAPH_NODES
        )
        kernels = pd.read_sql_query(sql, connection, dtype={**_OP_INT_DTYPES, "name_id": "int64"})
        names = pd.read_sql_query(queries.KERNEL_NAMES, connection, dtype={"name_id": "int64"})
        kernels[NAME] = kernels.pop("name_id").map(names.set_index("name_id")[NAME]).fillna("?")
        parts.append(kernels.assign(**{OP_KIND: OpKind.KERNEL.value}))
    for table, sql, kind in (
        (queries.MEMCPY_TABLE, queries.MEMCPYS, OpKind.MEMCPY),
        (queries.MEMSET_TABLE, queries.MEMSETS, OpKind.MEMSET),
        (queries.GRAPH_TRACE_TABLE, queries.GRAPH_TRACES, OpKind.GRAPH),
    ):
        if table in tables:
            frame = pd.read_sql_query(sql, connection, dtype=_OP_INT_DTYPES)
            parts.append(frame.assign(**{OP_KIND: kind.value}))
    if not parts:
        return empty_frame(GPU_OP_COLUMNS), 0
    ops = pd.concat(parts, ignore_index=True)
    ops, untimed = _drop_untimed(ops)
    ops[OP_KIND] = pd.Categorical(ops[OP_KIND], categories=[k.value for k in OpKind])
    ops[NAME] = ops[NAME].astype("category")
    return ops[list(GPU_OP_COLUMNS)], untimed


def _read_api_calls(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[pd.DataFrame, int]:
    if queries.RUNTIME_TABLE not in tables:
        return empty_frame(API_CALL_COLUMNS), 0
    int_dtypes = {n: d for n, d in API_CALL_COLUMNS.items() if d not in ("category", "object")}
    calls = pd.read_sql_query(queries.RUNTIME_CALLS, connection, dtype={**int_dtypes, "name_id": "int64"})
    names = pd.read_sql_query(queries.RUNTIME_NAMES, connection, dtype={"name_id": "int64"})
    names[NAME] = names[NAME].map(strip_version_suffix)
    names[CALL_CATEGORY] = names[NAME].map(lambda n: classify_call(n).value)
    name_ids = calls.pop("name_id")
    # Map through categoricals: one Python call per distinct name, not per row.
    lookup = names.set_index("name_id")
    calls[NAME] = pd.Categorical(name_ids.map(lookup[NAME]).fillna("?"))
    calls[CALL_CATEGORY] = pd.Categorical(name_ids.map(lookup[CALL_CATEGORY]).fillna("other"))
    calls, untimed = _drop_untimed(calls)
    return calls[list(API_CALL_COLUMNS)], untimed


def _read_nvtx_ranges(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[pd.DataFrame, int]:
    if queries.NVTX_TABLE not in tables:
        return empty_frame(NVTX_RANGE_COLUMNS), 0
    sql = (
        queries.NVTX_RANGES
        if "textId" in _columns(connection, queries.NVTX_TABLE)
        else queries.NVTX_RANGES_TEXT_ONLY
    )
    int_dtypes = {n: d for n, d in NVTX_RANGE_COLUMNS.items() if d not in ("category", "object")}
    ranges = pd.read_sql_query(sql, connection, dtype=int_dtypes)
    unclosed = int(connection.execute(queries.UNCLOSED_NVTX_RANGES).fetchone()[0])
    ranges[NAME] = ranges[NAME].astype(object)
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
    return pd.read_sql_query(queries.PROFILER_OVERHEAD, connection, dtype=dtypes)


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
    capture_meta: tuple[tuple[str, str], ...], gpu_ops: pd.DataFrame
) -> GraphTraceMode:
    for key, value in capture_meta:
        if key.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE"):
            return GraphTraceMode.NODE if value.lower() == "node" else GraphTraceMode.GRAPH
    if (gpu_ops[OP_KIND] == OpKind.GRAPH.value).any():
        return GraphTraceMode.GRAPH
    if (gpu_ops["graph_node_id"] >= 0).any():
        return GraphTraceMode.NODE
    return GraphTraceMode.UNKNOWN


def count_rows(path: Path) -> dict[str, int]:
    """Row counts of the tables `trace-gaps info` reports on (absent tables are left out)."""
    with open_export(path) as connection:
        tables = list_tables(connection, path)
        return {
            table: int(connection.execute(sql).fetchone()[0])
            for table, sql in queries.ROW_COUNTS.items()
            if table in tables
        }
