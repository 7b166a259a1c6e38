"""The export's head: everything but its op, call and OS-call rows (ranges, threads,
settings, counts), read whole, as they are small; and the checks every timed row passes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import (
    API_CALL_COLUMNS,
    CORRELATION_ID,
    DEVICE_ID,
    DOMAIN,
    DOMAIN_ID,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    GRAPH_EVENT_COLUMNS,
    GRAPH_NODE_COLUMNS,
    NAME,
    NVTX_RANGE_COLUMNS,
    OVERHEAD_COLUMNS,
    PID,
    START_NS,
    STREAM_ID,
    THREAD_COLUMNS,
    ExportInfo,
    ExportLack,
    GpuInfo,
    GraphTraceMode,
    Trace,
    empty_frame,
)
from trace_gaps.nsys import queries
from trace_gaps.nsys.export import LOST_EVENTS, table_count
from trace_gaps.nsys.read import read_frame
from trace_gaps.nsys.sql import query_frame, query_row, query_rows, query_value


def read_head(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
) -> Trace:
    """Everything but the op, call and OS-call rows: ranges, threads, settings, counts (the
    OS calls are read a window at a time or whole: nsys/os_calls.py)."""
    nvtx_ranges, unclosed = _read_nvtx_ranges(connection, path, tables)
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
        graph_trace_mode=_graph_trace_mode(capture_meta, connection, tables),
        capture_settings=capture_meta,
        gpus=_read_gpus(connection, tables),
        unclosed_ranges=unclosed,
        impossible_ranges=int(impossible_ranges.sum()),
        graph_capture_events=table_count(
            connection, tables, queries.GRAPH_EVENTS_TABLE, queries.GRAPH_EVENT_COUNT
        ),
        sync_rows=table_count(connection, tables, queries.SYNC_TABLE, queries.SYNC_COUNT),
        export_settings=export_meta,
        lacks=_lacks(connection, tables),
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
        overhead=_read_overhead(path, tables),
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
    return query_frame(connection, sql, columns)


def name_text(value: object) -> str:
    """A name as text: a BLOB or a number where nsys writes text still names something."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return "" if value is None else str(value)


def read_strings(connection: sqlite3.Connection, sql: str) -> pd.DataFrame:
    """name_id → name rows of StringIds; an id written twice (a damaged table, since nsys
    declares it a primary key) keeps its first value, so every reader resolves it the same."""
    names = query_frame(connection, sql, {"name_id": "int64"})
    return names.drop_duplicates("name_id", keep="first").reset_index(drop=True)


def table_columns(connection: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[0]) for row in query_rows(connection, queries.TABLE_COLUMNS, (table,))}


# Columns newer exports have that the loader reads around when they are absent.
_OPTIONAL_COLUMNS = ((queries.KERNEL_TABLE, "graphNodeId"), (queries.NVTX_TABLE, "textId"))


def _missing_columns(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        f"{table}.{column}"
        for table, column in _OPTIONAL_COLUMNS
        if table in tables and column not in table_columns(connection, table)
    )


def _lacks(connection: sqlite3.Connection, tables: tuple[str, ...]) -> frozenset[ExportLack]:
    missing = _missing_columns(connection, tables)
    current, older = queries.EXPORT_META_TABLES
    lacking = {
        ExportLack.NVTX: queries.NVTX_TABLE not in tables,
        ExportLack.CUDA_API: queries.RUNTIME_TABLE not in tables,
        ExportLack.GRAPH_NODES: queries.GRAPH_NODE_EVENTS_TABLE not in tables,
        ExportLack.CURRENT_METADATA: older in tables and current not in tables,
        ExportLack.NVTX_TEXT_ID: f"{queries.NVTX_TABLE}.textId" in missing,
        ExportLack.KERNEL_GRAPH_NODE_ID: f"{queries.KERNEL_TABLE}.graphNodeId" in missing,
    }
    return frozenset(lack for lack, is_lacking in lacking.items() if is_lacking)


# A row equal to an earlier one on these columns is a copy (nsys writes each activity once).
OP_ROW_KEY = [PID, DEVICE_ID, STREAM_ID, CORRELATION_ID, START_NS, END_NS]
CALL_ROW_KEY = [GLOBAL_TID, CORRELATION_ID, START_NS, END_NS]

# Past this, a time is no nanosecond count nsys writes (about 146 years): a damaged row.
LATEST_POSSIBLE_NS = 1 << 62


def impossible_times(
    ops: pd.DataFrame, capture_duration_ns: int | None, capture_stop_ns: int | None = None
) -> np.ndarray:
    """Mask of the ops (or ranges) whose times cannot be real: a start before 0, an end before the start,
    past LATEST_POSSIBLE_NS, or a duration longer than the capture itself.

    capture_stop_ns (ANALYSIS_DETAILS.stopTime, when the export states it): also a start of
    exactly 0 (the session's first nanosecond: a zeroed start, not an event) and an end after
    the capture stopped. The capture's startTime is no bound: exports of nsys 2022-2025 hold
    rows before it (a clock of its own)."""
    starts = ops[START_NS].to_numpy()
    ends = ops[END_NS].to_numpy()
    longest = LATEST_POSSIBLE_NS if capture_duration_ns is None else capture_duration_ns
    latest = LATEST_POSSIBLE_NS if capture_stop_ns is None else capture_stop_ns
    earliest = 0 if capture_stop_ns is None else 1
    # ends >= starts first: end - start cannot overflow once both are in [0, 2**62].
    sane = (starts >= earliest) & (ends >= starts) & (ends <= min(latest, LATEST_POSSIBLE_NS))
    sane[sane] = (ends[sane] - starts[sane]) <= longest
    return ~sane


def _lost_event_messages(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> tuple[str, ...]:
    if queries.DIAGNOSTIC_TABLE not in tables:
        return ()
    try:
        texts = [str(row[0]) for row in query_rows(connection, queries.DIAGNOSTICS)]
    except sqlite3.Error:  # an older schema: no diagnostics to quote
        return ()
    return tuple(dict.fromkeys(t for t in texts if LOST_EVENTS.search(t)))


def capture_window(path: Path) -> tuple[int, int] | None:
    """The capture's session start (UTC ns) and length, or None where the export lacks them."""
    from trace_gaps.nsys.export import list_tables, open_export

    with open_export(path, values=False) as connection:
        tables = list_tables(connection, path)
        start = _session_start(connection, tables)
        length = capture_duration(connection, tables)
    return (start, length) if start is not None and length is not None else None


def read_session_start(path: Path) -> int | None:
    """When the export's capture session started (ns since the Unix epoch), or None when the
    export does not say. Raises NotAnExportError for a file that is not a SQLite export."""
    from trace_gaps.nsys.export import list_tables, open_export

    with open_export(path) as connection:
        return _session_start(connection, list_tables(connection, path))


def _session_start(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int | None:
    if queries.SESSION_START_TABLE not in tables:
        return None
    try:
        row = query_row(connection, queries.SESSION_START)
    except sqlite3.Error:  # a schema without the column
        return None
    value = row[0] if row else None
    return int(value) if isinstance(value, int) and value > 0 else None


def capture_stop(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int | None:
    """When the capture stopped (ANALYSIS_DETAILS.stopTime), or None when the export does not say."""
    if queries.ANALYSIS_TABLE not in tables:
        return None
    try:
        value = query_value(connection, queries.CAPTURE_STOP)
    except sqlite3.Error:  # an older schema without the column
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def capture_duration(connection: sqlite3.Connection, tables: tuple[str, ...]) -> int | None:
    """The capture's length from ANALYSIS_DETAILS, or None when the export does not say."""
    if queries.ANALYSIS_TABLE not in tables:
        return None
    try:
        value = query_value(connection, queries.CAPTURE_DURATION)
    except sqlite3.Error:  # an older schema without the column: no capture-length check
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def _read_nvtx_ranges(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> tuple[pd.DataFrame, int]:
    if queries.NVTX_TABLE not in tables:
        return empty_frame(NVTX_RANGE_COLUMNS), 0
    sql = (
        queries.NVTX_RANGES
        if "textId" in table_columns(connection, queries.NVTX_TABLE)
        else queries.NVTX_RANGES_TEXT_ONLY
    )
    int_dtypes = {n: d for n, d in NVTX_RANGE_COLUMNS.items() if d not in ("category", "object")}
    ranges = read_frame(path, sql, int_dtypes)
    unclosed = int(query_value(connection, queries.UNCLOSED_NVTX_RANGES) or 0)
    ranges[DOMAIN] = _domain_names(connection, ranges)
    ranges[NAME] = ranges[NAME].astype(object)
    if pd.api.types.infer_dtype(ranges[NAME], skipna=True) not in ("string", "empty"):
        # A BLOB (or a number) where nsys writes text: still a name, decoded like text.
        ranges[NAME] = ranges[NAME].map(name_text).astype(object)
    return ranges[list(NVTX_RANGE_COLUMNS)], unclosed


def _domain_names(connection: sqlite3.Connection, ranges: pd.DataFrame) -> np.ndarray:
    """Per range, its domain's name: "" for the default domain, "domain N" for one that was
    never named (no nvtxDomainCreate row), else the name given to nvtxDomainCreate."""
    domain_ids = ranges[DOMAIN_ID].to_numpy()
    names = np.where(domain_ids == 0, "", np.char.add("domain ", domain_ids.astype(str)))
    names = names.astype(object)
    if not (domain_ids != 0).any():
        return names
    created = query_frame(connection, queries.NVTX_DOMAINS)
    created = created.drop_duplicates(["pid", "domain_id"], keep="last")
    keys = pd.MultiIndex.from_arrays([ranges[PID].to_numpy(), domain_ids])
    found = (
        pd.Series(
            created["domain"].astype(str).to_numpy(),
            index=pd.MultiIndex.from_frame(created[["pid", "domain_id"]]),
        )
        .reindex(keys)
        .to_numpy()
    )
    named = (domain_ids != 0) & pd.notna(found)
    names[named] = found[named]
    return names


def _read_threads(connection: sqlite3.Connection, tables: tuple[str, ...]) -> pd.DataFrame:
    if queries.THREAD_TABLE not in tables:
        return empty_frame(THREAD_COLUMNS)
    dtypes = {n: d for n, d in THREAD_COLUMNS.items() if d != "object"}
    threads = query_frame(connection, queries.THREADS, dtypes)
    return threads.drop_duplicates("global_tid", keep="last").reset_index(drop=True)


def _read_processes(connection: sqlite3.Connection, tables: tuple[str, ...]) -> dict[int, str]:
    if queries.PROCESS_TABLE not in tables:
        return {}
    rows = query_rows(connection, queries.PROCESSES)
    return {int(pid): str(name or "") for pid, name in rows if pid is not None}


def _read_overhead(path: Path, tables: tuple[str, ...]) -> pd.DataFrame:
    if queries.OVERHEAD_TABLE not in tables:
        return empty_frame(OVERHEAD_COLUMNS)
    dtypes = {n: d for n, d in OVERHEAD_COLUMNS.items() if d != "object"}
    return read_frame(path, queries.PROFILER_OVERHEAD, dtypes)


def _read_gpus(connection: sqlite3.Connection, tables: tuple[str, ...]) -> tuple[GpuInfo, ...]:
    if queries.GPU_TABLE not in tables:
        return ()
    rows = query_rows(connection, queries.GPUS)
    return tuple(GpuInfo(device_id=int(i), name=str(n)) for i, n in rows)


def _first_present(tables: tuple[str, ...], candidates: tuple[str, ...]) -> str | None:
    return next((table for table in candidates if table in tables), None)


def _read_pairs(connection: sqlite3.Connection, table: str | None) -> tuple[tuple[str, str], ...]:
    if table is None:
        return ()
    sql = queries.EXPORT_META.get(table, queries.CAPTURE_META)
    return tuple((str(k), "" if v is None else str(v)) for k, v in query_rows(connection, sql))


def _graph_trace_mode(
    capture_meta: tuple[tuple[str, str], ...],
    connection: sqlite3.Connection,
    tables: tuple[str, ...],
) -> GraphTraceMode:
    for key, value in capture_meta:
        if key.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE"):
            return GraphTraceMode.NODE if value.lower() == "node" else GraphTraceMode.GRAPH
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
    return table in tables and query_row(connection, query(table)) is not None
