"""Every SQL statement run against an export, and the tables each one needs.

(queries_chunked.py wraps these table queries to read them in chunks: by rowid range, from
a row number on, packed; nowhere else is there SQL.)

Queries select explicit columns aliased to model names, so nsys's camelCase stops here.
Process ids come from the serialized ids: globalTid = (vm << 48) | (pid << 24) | tid.
"""

import re

TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
TABLE_COLUMNS = "SELECT name FROM pragma_table_info(?)"

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX_TABLE = "NVTX_EVENTS"
STRING_TABLE = "StringIds"
THREAD_TABLE = "ThreadNames"
PROCESS_TABLE = "PROCESSES"
GPU_TABLE = "TARGET_INFO_GPU"
EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
CAPTURE_META_TABLE = "META_DATA_CAPTURE"
GRAPH_EVENTS_TABLE = "CUDA_GRAPH_EVENTS"
OVERHEAD_TABLE = "PROFILER_OVERHEAD"

# The GPU op tables, in the order their rows are read.
OP_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, GRAPH_TRACE_TABLE)

# Kernel names come back as ids; KERNEL_NAMES resolves only the ids in use.
KERNELS = """
SELECT start AS start_ns, "end" AS end_ns, (globalPid >> 24) & 16777215 AS pid,
       deviceId AS device_id, streamId AS stream_id,
       COALESCE(correlationId, -1) AS correlation_id,
       COALESCE(graphNodeId, -1) AS graph_node_id, shortName AS name_id
FROM CUPTI_ACTIVITY_KIND_KERNEL
"""

# Exports older than graph-node tracing have no graphNodeId column.
KERNELS_WITHOUT_GRAPH_NODES = """
SELECT start AS start_ns, "end" AS end_ns, (globalPid >> 24) & 16777215 AS pid,
       deviceId AS device_id, streamId AS stream_id,
       COALESCE(correlationId, -1) AS correlation_id,
       -1 AS graph_node_id, shortName AS name_id
FROM CUPTI_ACTIVITY_KIND_KERNEL
"""

KERNEL_NAMES = """
SELECT id AS name_id, value AS name FROM StringIds
WHERE id IN (SELECT DISTINCT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL)
"""

# copyKind follows ENUM_CUDA_MEMCPY_OPER.
MEMCPYS = """
SELECT start AS start_ns, "end" AS end_ns, (globalPid >> 24) & 16777215 AS pid,
       deviceId AS device_id, streamId AS stream_id,
       COALESCE(correlationId, -1) AS correlation_id, -1 AS graph_node_id,
       CASE copyKind WHEN 1 THEN 'memcpy HtoD' WHEN 2 THEN 'memcpy DtoH'
                     WHEN 8 THEN 'memcpy DtoD' WHEN 10 THEN 'memcpy PtoP'
                     ELSE 'memcpy' END AS name
FROM CUPTI_ACTIVITY_KIND_MEMCPY
"""

MEMSETS = """
SELECT start AS start_ns, "end" AS end_ns, (globalPid >> 24) & 16777215 AS pid,
       deviceId AS device_id, streamId AS stream_id,
       COALESCE(correlationId, -1) AS correlation_id, -1 AS graph_node_id,
       'memset' AS name
FROM CUPTI_ACTIVITY_KIND_MEMSET
"""

GRAPH_TRACES = """
SELECT start AS start_ns, "end" AS end_ns, (globalPid >> 24) & 16777215 AS pid,
       deviceId AS device_id, streamId AS stream_id,
       COALESCE(correlationId, -1) AS correlation_id, -1 AS graph_node_id,
       'graph ' || COALESCE(graphId, '?') AS name
FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE
"""

# No pid column: the reader derives it from global_tid (nsys/stream.with_pid), one column
# fewer for SQLite to compute and for the reader to convert, row by row.
RUNTIME_CALLS = """
SELECT start AS start_ns, "end" AS end_ns, globalTid AS global_tid,
       COALESCE(correlationId, -1) AS correlation_id, nameId AS name_id
FROM CUPTI_ACTIVITY_KIND_RUNTIME
"""

RUNTIME_NAMES = """
SELECT id AS name_id, value AS name FROM StringIds
WHERE id IN (SELECT DISTINCT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME)
"""

# Push/pop (59) and start/end (60) ranges. Unclosed ranges (NULL end) are counted, not loaded.
NVTX_RANGES = """
SELECT e.start AS start_ns, e."end" AS end_ns, (e.globalTid >> 24) & 16777215 AS pid,
       e.globalTid AS global_tid, COALESCE(e.endGlobalTid, -1) AS end_global_tid,
       COALESCE(e.domainId, 0) AS domain_id, e.eventType AS event_type,
       COALESCE(e.text, s.value, '') AS name
FROM NVTX_EVENTS AS e LEFT JOIN StringIds AS s ON s.id = e.textId
WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL
"""

# Exports without textId keep every name inline.
NVTX_RANGES_TEXT_ONLY = """
SELECT start AS start_ns, "end" AS end_ns, (globalTid >> 24) & 16777215 AS pid,
       globalTid AS global_tid, COALESCE(endGlobalTid, -1) AS end_global_tid,
       COALESCE(domainId, 0) AS domain_id, eventType AS event_type,
       COALESCE(text, '') AS name
FROM NVTX_EVENTS
WHERE eventType IN (59, 60) AND "end" IS NOT NULL
"""

# Domain names (nvtxDomainCreate rows), per process: ids are given out per process.
NVTX_DOMAINS = """
SELECT (globalTid >> 24) & 16777215 AS pid, domainId AS domain_id, COALESCE(text, '') AS domain
FROM NVTX_EVENTS WHERE eventType = 75 AND domainId IS NOT NULL
"""

UNCLOSED_NVTX_RANGES = """
SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND "end" IS NULL
"""

THREADS = """
SELECT t.globalTid AS global_tid, (t.globalTid >> 24) & 16777215 AS pid,
       t.globalTid & 16777215 AS tid, COALESCE(s.value, '') AS name
FROM ThreadNames AS t LEFT JOIN StringIds AS s ON s.id = t.nameId
"""

PROCESSES = "SELECT pid AS pid, name AS name FROM PROCESSES"

GPUS = "SELECT id AS device_id, name AS name FROM TARGET_INFO_GPU ORDER BY id"

EXPORT_META = {
    "META_DATA_EXPORT": "SELECT name, value FROM META_DATA_EXPORT",
    "EXPORT_META_DATA": "SELECT name, value FROM EXPORT_META_DATA",
}

CAPTURE_META = "SELECT name, value FROM META_DATA_CAPTURE"

GRAPH_EVENT_COUNT = "SELECT COUNT(*) FROM CUDA_GRAPH_EVENTS"

# Graph events (graphs created, captured, cloned, instantiated) per process.
GRAPH_EVENTS_BY_PROCESS = """
SELECT (globalTid >> 24) & 16777215 AS pid, COUNT(*) AS events FROM CUDA_GRAPH_EVENTS
WHERE globalTid IS NOT NULL GROUP BY pid ORDER BY pid
"""

# Graph nodes as they are created (during a stream capture, on the capturing thread).
GRAPH_NODE_EVENTS_TABLE = "CUDA_GRAPH_NODE_EVENTS"
GRAPH_NODE_COUNT = "SELECT COUNT(*) FROM CUDA_GRAPH_NODE_EVENTS"
GRAPH_NODE_EVENTS = """
SELECT globalTid AS global_tid, start AS start_ns FROM CUDA_GRAPH_NODE_EVENTS
WHERE globalTid IS NOT NULL
"""

SYNC_COUNT = "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"

PROFILER_OVERHEAD = """
SELECT o.start AS start_ns, o."end" AS end_ns, o.globalTid AS global_tid,
       COALESCE(s.value, '') AS name
FROM PROFILER_OVERHEAD AS o LEFT JOIN StringIds AS s ON s.id = o.nameId
WHERE o.start IS NOT NULL AND o."end" IS NOT NULL AND o.globalTid IS NOT NULL
"""

# OS runtime calls (--trace=osrt): what a thread blocked in while not in a CUDA call.
OS_CALL_TABLE = "OSRT_API"
OS_CALLS = """
SELECT start AS start_ns, "end" AS end_ns, globalTid AS global_tid, nameId AS name_id
FROM OSRT_API
WHERE start IS NOT NULL AND "end" IS NOT NULL AND globalTid IS NOT NULL
"""

# The OS calls that start before ? and end after ?, with their rowids: a window's, read
# over rowid ranges (read_table_chunks) where the window is analysed (nsys/os_calls.py).
OS_CALLS_OVERLAPPING = """
SELECT start AS start_ns, "end" AS end_ns, globalTid AS global_tid, nameId AS name_id,
       rowid AS row_id
FROM OSRT_API
WHERE start IS NOT NULL AND "end" IS NOT NULL AND globalTid IS NOT NULL
  AND start < ? AND "end" > ?
"""
OS_CALL_ROWIDS = "SELECT MIN(rowid), MAX(rowid) FROM OSRT_API"

# Of the OS calls (as OS_CALLS selects them) in rows [?, ?): how many, how many name a
# name, the earliest and latest start, the latest end and thread id, and the name ids. Text
# or a BLOB sorts after every number in SQLite, so a maximum that is no integer shows one.
OS_CALL_BLOCK = """
SELECT COUNT(*), COUNT(nameId), MIN(start), MAX(start), MAX("end"), MAX(globalTid),
       GROUP_CONCAT(DISTINCT nameId)
FROM OSRT_API
WHERE start IS NOT NULL AND "end" IS NOT NULL AND globalTid IS NOT NULL
  AND rowid >= ? AND rowid < ?
"""

OS_CALL_NAMES = """
SELECT id AS name_id, value AS name FROM StringIds
WHERE id IN (SELECT DISTINCT nameId FROM OSRT_API)
"""
# Up to this many distinct ids are looked up by a list of them, not by OS_CALL_NAMES' scan.
LISTED_IDS_MAX = 10_000


def strings_with_ids(ids: list[int]) -> str:
    """The StringIds rows of these ids (ints, written into the query as numbers)."""
    listed = ", ".join(str(int(i)) for i in ids)
    return f"SELECT id AS name_id, value AS name FROM StringIds WHERE id IN ({listed})"


# Launch calls, for the message of an export whose op records were all lost.
# Which GPU each process ran ops on, per GPU op table (for `trace-gaps info`).
DEVICES_PER_PROCESS = {
    KERNEL_TABLE: "SELECT DISTINCT (globalPid >> 24) & 16777215 AS pid, deviceId AS device_id "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL",
    MEMCPY_TABLE: "SELECT DISTINCT (globalPid >> 24) & 16777215 AS pid, deviceId AS device_id "
    "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    MEMSET_TABLE: "SELECT DISTINCT (globalPid >> 24) & 16777215 AS pid, deviceId AS device_id "
    "FROM CUPTI_ACTIVITY_KIND_MEMSET",
}

LAUNCH_CALL_COUNT = """
SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME
WHERE nameId IN (SELECT id FROM StringIds WHERE value LIKE 'cudaLaunch%' OR value LIKE 'cuLaunch%'
                 OR value LIKE 'cudaGraphLaunch%' OR value LIKE 'cuGraphLaunch%')
"""

# nsys's own messages about the capture ("events were lost", "buffers were not flushed").
DIAGNOSTIC_TABLE = "DIAGNOSTIC_EVENT"
DIAGNOSTICS = "SELECT text FROM DIAGNOSTIC_EVENT ORDER BY timestamp"

ANALYSIS_TABLE = "ANALYSIS_DETAILS"
CAPTURE_DURATION = "SELECT MAX(duration) FROM ANALYSIS_DETAILS"
CAPTURE_STOP = "SELECT MAX(stopTime) FROM ANALYSIS_DETAILS"

# Row counts for `trace-gaps info`, one statement per table it reports on.
ROW_COUNTS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS": "SELECT COUNT(*) FROM NVTX_EVENTS",
    "CUDA_GRAPH_EVENTS": "SELECT COUNT(*) FROM CUDA_GRAPH_EVENTS",
    "PROFILER_OVERHEAD": "SELECT COUNT(*) FROM PROFILER_OVERHEAD",
    "OSRT_API": "SELECT COUNT(*) FROM OSRT_API",
    "ThreadNames": "SELECT COUNT(*) FROM ThreadNames",
}

# Streaming (nsys/stream.py). Table names come from the constants above, never from input.
ALL_STRINGS = "SELECT id AS name_id, value AS name FROM StringIds"

GRAPH_NAMES = """
SELECT DISTINCT 'graph ' || COALESCE(graphId, '?') FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE
"""


def largest_string_id() -> str:
    return "SELECT MAX(id) FROM StringIds"


def timed_start_from_rowid(table: str) -> str:
    """The rowid and start of the first row at or after a rowid with a start that can be
    real (untimed rows, zeroed 0/0, and an end before the start are stepped over)."""
    return (
        f'SELECT rowid, start FROM {table} WHERE rowid >= ? AND start > 0 AND "end" >= start '
        "ORDER BY rowid LIMIT 1"
    )


def longest_row(table: str) -> str:
    """The longest duration among rowids [?, ?), of at most ? ns (one scan of the range)."""
    return (
        f'SELECT MAX("end" - start) FROM {table} WHERE rowid >= ? AND rowid < ? '
        'AND start > 0 AND "end" >= start AND "end" - start <= ?'
    )


def largest_rowid(table: str) -> str:
    """One b-tree descent, no scan: rows in a table nsys filled in order."""
    return f"SELECT MAX(rowid) FROM {table}"


def any_timed(table: str) -> str:
    return f'SELECT 1 FROM {table} WHERE NOT (start = 0 AND "end" = 0) LIMIT 1'


def count_untimed(table: str) -> str:
    return f'SELECT COUNT(*) FROM {table} WHERE start = 0 AND "end" = 0'


def any_graph_node(table: str) -> str:
    return f"SELECT 1 FROM {table} WHERE graphNodeId >= 0 LIMIT 1"


def pids_in(table: str) -> str:
    """Processes with timed rows in an op table or the CUDA API table."""
    column = "globalTid" if table == RUNTIME_TABLE else "globalPid"
    return (
        f"SELECT DISTINCT ({column} >> 24) & 16777215 FROM {table} "
        f'WHERE {column} IS NOT NULL AND NOT (start = 0 AND "end" = 0)'
    )


def runtime_calls_named(name_ids: list[int], below_rowid: int) -> str:
    """RUNTIME_CALLS limited to calls with these name ids, stored before a rowid."""
    listed = ", ".join(str(int(i)) for i in name_ids)
    return f"{RUNTIME_CALLS} WHERE rowid < {int(below_rowid)} AND nameId IN ({listed})"


def launches_per_thread(name_ids: list[int], from_rowid: int, below_rowid: int) -> str:
    """Calls with these name ids (the launches) per thread, stored in [from, below) rowids."""
    listed = ", ".join(str(int(i)) for i in name_ids)
    return (
        "SELECT globalTid AS global_tid, COUNT(*) AS launches FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        f"WHERE rowid >= {int(from_rowid)} AND rowid < {int(below_rowid)} "
        f"AND nameId IN ({listed}) GROUP BY globalTid"
    )


SESSION_START_TABLE = "TARGET_INFO_SESSION_START_TIME"
SESSION_START = "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1"


def kernels_named(name_ids: list[int]) -> str:
    """Timed kernels with these name ids (the collectives, for matching across processes)."""
    listed = ", ".join(str(int(i)) for i in name_ids)
    return (
        'SELECT start AS start_ns, "end" AS end_ns, (globalPid >> 24) & 16777215 AS pid, '
        "deviceId AS device_id, shortName AS name_id FROM CUPTI_ACTIVITY_KIND_KERNEL "
        f'WHERE shortName IN ({listed}) AND NOT (start = 0 AND "end" = 0)'
    )


def start_at_rowid(table: str) -> str:
    """The start of the first row stored at or after a rowid (one b-tree descent)."""
    return f"SELECT start FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"


def calls_per_thread() -> str:
    """Timed CUDA API calls per thread (one grouped scan)."""
    return (
        "SELECT globalTid AS global_tid, COUNT(*) AS calls FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        'WHERE NOT (start = 0 AND "end" = 0) GROUP BY globalTid'
    )


# GPU metrics (`nsys profile --gpu-metrics-devices=...`): nsys/gpu_metrics.py.
GPU_METRICS_TABLE = "GPU_METRICS"
GPU_METRIC_NAMES_TABLE = "TARGET_INFO_GPU_METRICS"
GPU_METRIC_NAMES = """
SELECT DISTINCT typeId AS type_id, metricId AS metric_id, metricName AS metric_name
FROM TARGET_INFO_GPU_METRICS
"""
GPU_PEAK_BANDWIDTH = "SELECT id, memoryBandwidth FROM TARGET_INFO_GPU ORDER BY id"
GPU_METRIC_ROWIDS = "SELECT MIN(rowid), MAX(rowid) FROM GPU_METRICS"
# The timestamp of the first sample row at or after a rowid (one b-tree descent).
GPU_METRIC_TIME_AT_ROWID = (
    "SELECT timestamp FROM GPU_METRICS WHERE rowid >= ? ORDER BY rowid LIMIT 1"
)
GPU_METRIC_TIMES = "SELECT timestamp FROM GPU_METRICS WHERE rowid >= ? AND rowid < ?"
GPU_METRIC_SAMPLES = """
SELECT timestamp AS time_ns, metricId AS metric_id, value AS value
FROM GPU_METRICS
"""


def bad_values(table: str, column: str, kind: str) -> str:
    """How many rows of a table hold a NULL, text or a BLOB (sql.BadValues's kind) in a
    column (both names from this module's own queries, checked to be plain names)."""
    if not re.fullmatch(r"[A-Za-z_]\w*", table) or not re.fullmatch(r"[A-Za-z_]\w*", column):
        raise ValueError(f"not a plain name: {table}.{column}")
    test = {"NULL": "IS NULL", "a BLOB": "= 'blob'", "text": "= 'text'"}[kind]
    value = f'"{column}"' if kind == "NULL" else f'typeof("{column}")'
    return f"SELECT COUNT(*) FROM {table} WHERE {value} {test}"
