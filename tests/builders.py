"""ExportBuilder: write small Nsight Systems exports in code, with the tables and columns we read.

Times are integer ns. Threads are given as (pid, tid); the builder encodes
globalTid = (pid << 24) | tid and globalPid = pid << 24 as nsys does.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions
from trace_gaps.analysis.integrity import integrity_notes
from trace_gaps.analysis.launches import mark_blocking_copies
from trace_gaps.analysis.stages import project_ops, stage_calls
from trace_gaps.analysis.threads import lent_threads
from trace_gaps.model import Trace
from trace_gaps.records.notes import NoteCode, NoteFacts
from trace_gaps.run.one import analyse_export

SCHEMA = {
    "StringIds": "id INTEGER PRIMARY KEY, value TEXT NOT NULL",
    "ThreadNames": "nameId INTEGER, priority INTEGER, globalTid INTEGER",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "TARGET_INFO_GPU": "vmId INTEGER, id INTEGER, name TEXT",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "META_DATA_CAPTURE": "name TEXT NOT NULL, value TEXT",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, graphNodeId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "bytes INTEGER, copyKind INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "value INTEGER, bytes INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "graphId INTEGER, graphExecId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
        "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL, callchainId INTEGER"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
        "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
        "textId INTEGER, domainId INTEGER"
    ),
    "CUDA_GRAPH_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventClass INTEGER, globalTid INTEGER, "
        "nameId INTEGER, graphId INTEGER, originalGraphId INTEGER, graphExecId INTEGER"
    ),
    "PROFILER_OVERHEAD": "start INTEGER, end INTEGER, globalTid INTEGER, nameId INTEGER",
    "GPU_METRICS": "timestamp INTEGER, typeId INTEGER, metricId INTEGER, value INTEGER",
    "TARGET_INFO_GPU_METRICS": (
        "typeId INTEGER, sourceId INTEGER, typeName TEXT, metricId INTEGER, metricName TEXT"
    ),
    "OSRT_API": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, globalTid INTEGER, "
        "nameId INTEGER NOT NULL, returnValue INTEGER, nestingLevel INTEGER, callchainId INTEGER"
    ),
}

# TARGET_INFO_GPU as an export with GPU metrics has it: the peak bandwidth is read then.
GPU_WITH_BANDWIDTH = "vmId INTEGER, id INTEGER, name TEXT, memoryBandwidth INTEGER"
H200_BYTES_PER_S = 4_800_000_000_000
GPU_METRIC_TYPE = 0x1000000000000  # one GPU's metrics (a typeId of the H100 captures' kind)

# Tables every export has; the others appear only when the builder writes rows to them.
ALWAYS = ("StringIds", "ThreadNames", "PROCESSES", "TARGET_INFO_GPU", "META_DATA_EXPORT")

PID = 100
TID = 100


def global_tid(pid: int, tid: int) -> int:
    """nsys's serialized thread id."""
    return (pid << 24) | tid


# The tables stream_export reads in chunks, in the order of their rows.
STREAMED_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
)


@dataclass
class ExportBuilder:
    """Accumulate rows, then write() them as an export file under `directory`."""

    directory: Path
    rows: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)
    strings: dict[str, int] = field(default_factory=dict)
    next_correlation: int = 1
    omit: set[str] = field(default_factory=set)

    def string(self, value: str) -> int:
        """The StringIds id of a value, added on first use."""
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
        return self.strings[value]

    def _add(self, table: str, row: tuple[object, ...]) -> ExportBuilder:
        self.rows.setdefault(table, []).append(row)
        return self

    def range(
        self,
        name: str,
        start_ns: int,
        end_ns: int | None,
        *,
        pid: int = PID,
        tid: int = TID,
        domain_id: int = 0,
        event_type: int = 59,
        end_tid: int | None = None,
        inline_text: bool = False,
    ) -> ExportBuilder:
        """An NVTX push/pop range (eventType 59), or start/end (60) with event_type=60."""
        text, text_id = (name, None) if inline_text else (None, self.string(name))
        end_global = global_tid(pid, end_tid) if end_tid is not None else None
        return self._add(
            "NVTX_EVENTS",
            (
                start_ns,
                end_ns,
                event_type,
                None,
                None,
                None,
                text,
                global_tid(pid, tid),
                end_global,
                text_id,
                domain_id,
            ),
        )

    def domain(self, name: str, domain_id: int, *, pid: int = PID, tid: int = TID) -> ExportBuilder:
        """An nvtxDomainCreate row (eventType 75): names domain_id in this process."""
        row = (0, None, 75, None, None, None, name, global_tid(pid, tid), None, None, domain_id)
        return self._add("NVTX_EVENTS", row)

    def call(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        *,
        pid: int = PID,
        tid: int = TID,
        correlation_id: int | None = None,
    ) -> ExportBuilder:
        """A CUDA runtime/driver API call (name without the _v suffix; one is added)."""
        correlation = self._correlation(correlation_id)
        return self._add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            (
                start_ns,
                end_ns,
                0,
                global_tid(pid, tid),
                correlation,
                self.string(f"{name}_v3020"),
                0,
                None,
            ),
        )

    def _correlation(self, correlation_id: int | None) -> int:
        # Automatic ids count up from 1; tests that pick ids themselves use large ones.
        if correlation_id is None:
            correlation_id = self.next_correlation
            self.next_correlation += 1
        return correlation_id

    def kernel(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        *,
        pid: int = PID,
        device_id: int = 0,
        stream_id: int = 7,
        correlation_id: int = -1,
        graph_node_id: int | None = None,
    ) -> ExportBuilder:
        """A kernel row; correlation_id -1 means no launching call."""
        name_id = self.string(name)
        return self._add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            (
                start_ns,
                end_ns,
                device_id,
                1,
                stream_id,
                correlation_id,
                pid << 24,
                name_id,
                name_id,
                graph_node_id,
            ),
        )

    def launch(
        self,
        name: str,
        call_start_ns: int,
        call_end_ns: int,
        kernel_start_ns: int,
        kernel_end_ns: int,
        *,
        pid: int = PID,
        tid: int = TID,
        stream_id: int = 7,
        api: str = "cudaLaunchKernel",
    ) -> ExportBuilder:
        """A launch call and the kernel it launched, joined by a fresh correlation id."""
        correlation = self._correlation(None)
        self.call(api, call_start_ns, call_end_ns, pid=pid, tid=tid, correlation_id=correlation)
        return self.kernel(
            name,
            kernel_start_ns,
            kernel_end_ns,
            pid=pid,
            stream_id=stream_id,
            correlation_id=correlation,
        )

    def memcpy(
        self, start_ns: int, end_ns: int, *, correlation_id: int, pid: int = PID, copy_kind: int = 2
    ) -> ExportBuilder:
        """A memcpy row (copyKind 1 HtoD, 2 DtoH, 8 DtoD)."""
        return self._add(
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            (start_ns, end_ns, 0, 1, 7, correlation_id, pid << 24, 1024, copy_kind),
        )

    def memset(
        self, start_ns: int, end_ns: int, *, correlation_id: int, pid: int = PID
    ) -> ExportBuilder:
        """A memset row."""
        return self._add(
            "CUPTI_ACTIVITY_KIND_MEMSET",
            (start_ns, end_ns, 0, 1, 7, correlation_id, pid << 24, 0, 1024),
        )

    def graph_replay(
        self, start_ns: int, end_ns: int, *, correlation_id: int, pid: int = PID, graph_id: int = 1
    ) -> ExportBuilder:
        """A graph-level replay row (--cuda-graph-trace=graph)."""
        return self._add(
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
            (start_ns, end_ns, 0, 1, 7, correlation_id, pid << 24, graph_id, 1),
        )

    def graph_event(
        self, start_ns: int, *, pid: int = PID, tid: int = TID, graph_id: int = 1
    ) -> ExportBuilder:
        """A CUDA_GRAPH_EVENTS row (graph created or captured)."""
        return self._add(
            "CUDA_GRAPH_EVENTS",
            (
                start_ns,
                start_ns,
                95,
                global_tid(pid, tid),
                self.string("graph"),
                graph_id,
                None,
                None,
            ),
        )

    def overhead(
        self, start_ns: int, end_ns: int, *, pid: int = PID, tid: int = TID
    ) -> ExportBuilder:
        """A PROFILER_OVERHEAD row."""
        return self._add(
            "PROFILER_OVERHEAD",
            (start_ns, end_ns, global_tid(pid, tid), self.string("CUDA profiling data flush")),
        )

    def os_call(
        self, name: str, start_ns: int, end_ns: int, *, pid: int = PID, tid: int = TID
    ) -> ExportBuilder:
        """An OS runtime call (OSRT_API row, --trace=osrt)."""
        return self._add(
            "OSRT_API", (start_ns, end_ns, 27, global_tid(pid, tid), self.string(name), 0, 0, None)
        )

    def gpu_sample(self, time_ns: int, *, dram_read_pct: int) -> ExportBuilder:
        """A GPU metrics sample (nsys --gpu-metrics-devices) of its DRAM read share only."""
        self.rows.setdefault(
            "TARGET_INFO_GPU_METRICS",
            [(GPU_METRIC_TYPE, GPU_METRIC_TYPE, "GH100", 0, "DRAM Read Bandwidth [Throughput %]")],
        )
        return self._add("GPU_METRICS", (time_ns, GPU_METRIC_TYPE, 0, dram_read_pct))

    def thread_name(self, name: str, *, pid: int = PID, tid: int = TID) -> ExportBuilder:
        """A ThreadNames row."""
        return self._add("ThreadNames", (self.string(name), 0, global_tid(pid, tid)))

    def meta(self, name: str, value: str, *, table: str = "META_DATA_EXPORT") -> ExportBuilder:
        """A metadata row (META_DATA_EXPORT or META_DATA_CAPTURE)."""
        return self._add(table, (name, value))

    def in_start_order(self) -> ExportBuilder:
        """Sort the streamed tables' rows by start, as nsys writes them (stream_export needs it)."""
        for table in STREAMED_TABLES:
            self.rows.get(table, []).sort(key=lambda row: row[0])  # start is the first column
        return self

    def without(self, *tables: str) -> ExportBuilder:
        """Leave these tables out of the file."""
        self.omit.update(tables)
        return self

    def write(self, name: str = "run.sqlite") -> Path:
        """Write the export and return its path."""
        path = self.directory / name
        path.unlink(missing_ok=True)
        connection = sqlite3.connect(path)
        self.rows.setdefault("META_DATA_EXPORT", []).insert(
            0, ("EXPORT_PRODUCT_VERSION", "2025.3.1.90")
        )
        self.rows.setdefault("PROCESSES", []).append((PID << 24, PID, "python3"))
        schema = SCHEMA
        if self.rows.get("GPU_METRICS"):
            schema = {**SCHEMA, "TARGET_INFO_GPU": GPU_WITH_BANDWIDTH}
            self.rows.setdefault("TARGET_INFO_GPU", []).append(
                (0, 0, "NVIDIA H200", H200_BYTES_PER_S)
            )
        else:
            self.rows.setdefault("TARGET_INFO_GPU", []).append((0, 0, "NVIDIA H200"))
        tables = [t for t in schema if (t in ALWAYS or self.rows.get(t)) and t not in self.omit]
        for table in tables:
            connection.execute(f"CREATE TABLE {table} ({schema[table]})")
            rows = self.rows.get(table, [])
            if rows:
                marks = ",".join("?" * len(rows[0]))
                connection.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        if "StringIds" in tables:
            connection.executemany(
                "INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in self.strings.items()]
            )
        connection.commit()
        connection.close()
        return path


def projected_frames(trace: Trace, analysis: Analysis) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The whole trace's staged calls and projected ops, as one window of the analysis sees them.

    The Analysis keeps only merged totals; tests that check op by op rebuild these.
    """
    calls = lent_threads(trace.api_calls, analysis.borrowed_threads)
    staged = stage_calls(calls, analysis.stage_map)
    projected = project_ops(trace.gpu_ops, staged, analysis.stage_map)
    return mark_blocking_copies(staged, projected), projected


def note_facts(path: Path, options: AnalysisOptions | None = None) -> dict[NoteCode, NoteFacts]:
    """The integrity notes the analysis of an export finds, by code, before they are words
    (a code the analysis notes twice, like domains_left_out, keeps its last)."""
    trace, analysis = analyse_export(path, options or AnalysisOptions())
    return {note.code: note for note in integrity_notes(trace, analysis)}
