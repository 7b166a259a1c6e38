"""The in-memory model of an export: column names, dtypes, and the Trace that carries them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

# Columns shared by every timed frame.
START_NS = "start_ns"
END_NS = "end_ns"
PID = "pid"
GLOBAL_TID = "global_tid"
CORRELATION_ID = "correlation_id"
NAME = "name"

# GPU ops (kernels, memcpys, memsets, graph-level graph replays).
DEVICE_ID = "device_id"
STREAM_ID = "stream_id"
OP_KIND = "kind"
GRAPH_NODE_ID = "graph_node_id"

# CUDA API calls.
EVENT_CLASS = "event_class"
CALL_CATEGORY = "category"

# NVTX ranges.
END_GLOBAL_TID = "end_global_tid"
DOMAIN_ID = "domain_id"
DOMAIN = "domain"  # an NVTX range's domain name ("" for the default domain)
EVENT_TYPE = "event_type"

# Threads and processes.
TID = "tid"

NS_DTYPE = "int64"

GPU_OP_COLUMNS: dict[str, str] = {
    START_NS: NS_DTYPE,
    END_NS: NS_DTYPE,
    PID: "int64",
    DEVICE_ID: "int64",
    STREAM_ID: "int64",
    CORRELATION_ID: "int64",
    GRAPH_NODE_ID: "int64",
    OP_KIND: "category",
    NAME: "category",
}

API_CALL_COLUMNS: dict[str, str] = {
    START_NS: NS_DTYPE,
    END_NS: NS_DTYPE,
    PID: "int64",
    GLOBAL_TID: "int64",
    CORRELATION_ID: "int64",
    NAME: "category",
    CALL_CATEGORY: "category",
}

NVTX_RANGE_COLUMNS: dict[str, str] = {
    START_NS: NS_DTYPE,
    END_NS: NS_DTYPE,
    PID: "int64",
    GLOBAL_TID: "int64",
    END_GLOBAL_TID: "int64",
    DOMAIN_ID: "int64",
    EVENT_TYPE: "int64",
    NAME: "object",
    DOMAIN: "object",
}

THREAD_COLUMNS: dict[str, str] = {
    GLOBAL_TID: "int64",
    PID: "int64",
    TID: "int64",
    NAME: "object",
}

OVERHEAD_COLUMNS: dict[str, str] = {
    START_NS: NS_DTYPE,
    END_NS: NS_DTYPE,
    GLOBAL_TID: "int64",
    NAME: "object",
}


GRAPH_EVENT_COLUMNS: dict[str, str] = {PID: "int64", "events": "int64"}
GRAPH_NODE_COLUMNS: dict[str, str] = {GLOBAL_TID: "int64", START_NS: NS_DTYPE}

OS_CALL_COLUMNS: dict[str, str] = {
    START_NS: NS_DTYPE,
    END_NS: NS_DTYPE,
    GLOBAL_TID: "int64",
    NAME: "category",
}


class OpKind(StrEnum):
    """What a GPU op is."""

    KERNEL = "kernel"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    GRAPH = "graph"  # one graph-level replay row (--cuda-graph-trace=graph)


class CallCategory(StrEnum):
    """What a CUDA API call does, as far as the ledger and the launch tables care."""

    LAUNCH_KERNEL = "launch_kernel"
    LAUNCH_GRAPH = "launch_graph"
    LAUNCH_MEMCPY = "launch_memcpy"
    LAUNCH_MEMSET = "launch_memset"
    SYNC = "sync"
    MODULE_LOAD = (
        "module_load"  # loads, links or builds code (cuModuleLoad*, cuLibraryLoad*, nvrtc*)
    )
    LOOKUP = "lookup"  # finds a handle in code already loaded (cuLibraryGetKernel, ...)
    ALLOC = "alloc"
    GRAPH_SETUP = "graph_setup"
    OTHER = "other"


LAUNCH_CATEGORIES = (
    CallCategory.LAUNCH_KERNEL,
    CallCategory.LAUNCH_GRAPH,
    CallCategory.LAUNCH_MEMCPY,
    CallCategory.LAUNCH_MEMSET,
)

# Work that should not appear inside a steady-state step.
UNEXPECTED_CATEGORIES = (CallCategory.MODULE_LOAD, CallCategory.ALLOC, CallCategory.GRAPH_SETUP)


class GraphTraceMode(StrEnum):
    """How the capture recorded CUDA graph replays (--cuda-graph-trace)."""

    NODE = "node"
    GRAPH = "graph"
    UNKNOWN = "unknown"


class ExportLack(StrEnum):
    """What an export lacks that the analysis reads around, by what it holds (nsys/head.py
    knows which table or column each is)."""

    NVTX = "nvtx"  # no NVTX ranges at all
    CUDA_API = "cuda_api"  # no CUDA runtime and driver calls
    GRAPH_NODES = "graph_nodes"  # no per-node CUDA graph events
    CURRENT_METADATA = "current_metadata"  # metadata under its older table name (older schema)
    NVTX_TEXT_ID = "nvtx_text_id"  # NVTX ranges without name ids (older schema)
    KERNEL_GRAPH_NODE_ID = "kernel_graph_node_id"  # kernels without graph node ids (older schema)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU of the capture (TARGET_INFO_GPU)."""

    device_id: int
    name: str


@dataclass(frozen=True, slots=True)
class ExportInfo:
    """Facts about the export file itself, and counts of rows the loader set aside."""

    path: Path
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    tables: tuple[str, ...]
    graph_trace_mode: GraphTraceMode
    capture_settings: tuple[tuple[str, str], ...]
    gpus: tuple[GpuInfo, ...]
    untimed_events: int = 0
    # GPU ops with impossible times (start < 0, end < start, longer than the capture): left out.
    impossible_ops: int = 0
    impossible_calls: int = 0  # CUDA API calls likewise
    # GPU op and CUDA API rows written twice (identical key columns): the copies left out.
    duplicated_ops: int = 0
    duplicated_calls: int = 0
    # nsys's DIAGNOSTIC_EVENT messages that say it lost or dropped events, as written.
    lost_event_messages: tuple[str, ...] = ()
    # How long nsys recorded (ANALYSIS_DETAILS), when the export says.
    capture_duration_ns: int | None = None
    unclosed_ranges: int = 0
    # NVTX ranges with impossible times (start < 0, end < start): left out.
    impossible_ranges: int = 0
    graph_capture_events: int = 0
    sync_rows: int = 0
    # META_DATA_EXPORT (older: EXPORT_META_DATA) rows: nsys version, export options.
    export_settings: tuple[tuple[str, str], ...] = ()
    # Tables and columns newer or fuller exports have and this one lacks.
    lacks: frozenset[ExportLack] = frozenset()
    # When the capture session started, ns since the Unix epoch (TARGET_INFO_SESSION_START_TIME):
    # the export's own times count from it, so it aligns several exports' clocks.
    session_start_utc_ns: int | None = None
    # Timed GPU op and CUDA API rows read, before any was left out (the shares of damage).
    op_rows: int = 0
    call_rows: int = 0
    # CUDA API calls whose name id is not in StringIds: named '?', classed as no known call.
    unresolved_calls: int = 0
    # Kernels whose name id is not in StringIds: named '?'.
    unresolved_kernels: int = 0


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything the analysis reads from one export, as frames with model columns."""

    info: ExportInfo
    gpu_ops: pd.DataFrame
    api_calls: pd.DataFrame
    nvtx_ranges: pd.DataFrame
    threads: pd.DataFrame
    processes: dict[int, str] = field(default_factory=dict)
    overhead: pd.DataFrame = field(default_factory=pd.DataFrame)
    os_calls: pd.DataFrame = field(default_factory=lambda: empty_frame(OS_CALL_COLUMNS))
    # CUDA_GRAPH_EVENTS rows per process; CUDA_GRAPH_NODE_EVENTS rows (thread, time).
    graph_events: pd.DataFrame = field(default_factory=lambda: empty_frame(GRAPH_EVENT_COLUMNS))
    graph_nodes: pd.DataFrame = field(default_factory=lambda: empty_frame(GRAPH_NODE_COLUMNS))
    # The GPU's metric samples, read a window at a time from the export (nsys/gpu_metrics.py),
    # so that a Trace loaded whole is analysed with them as a streamed export is; None: none.
    gpu_metrics: GpuMetricSource | None = None


# Chunks of an op or call table in start order, and how to get them.
ChunkSource = Callable[[], Iterator[pd.DataFrame]]


@dataclass(frozen=True, slots=True)
class RowSources:
    """The op tables and the call table of one export, each as chunks in start order."""

    ops: tuple[tuple[str, ChunkSource], ...]
    calls: ChunkSource
    rows: int  # ops + calls, an estimate is enough
    # At least the module-load calls starting at or before a time, with call columns.
    module_loads: Callable[[int], pd.DataFrame]
    device_ops: Callable[[], pd.DataFrame]  # per (pid, device, kind), after the chunks ran
    trace_start_ns: Callable[[], int]  # after the chunks ran
    known_pids: Callable[[], list[int]]  # processes with CUDA activity
    # Kernels of collective libraries (analysis/collectives.py decides which names are).
    collectives: Callable[[Callable[[pd.Index], np.ndarray]], pd.DataFrame] = lambda _: (
        pd.DataFrame()
    )
    # Launch calls per (pid, global_tid) starting in [from_ns, until_ns]: which threads launch.
    launches_per_thread: Callable[[int, int], pd.DataFrame] = lambda _from, _until: pd.DataFrame(
        {PID: [], GLOBAL_TID: [], "launches": []}, dtype="int64"
    )
    # The OS calls a window whose steps span [lo, hi) on these threads needs, as a callable
    # that reads them where the window is analysed (a worker process: it is pickled):
    # nsys/os_calls.py. None: the Trace's os_calls, read whole, serve every window.
    os_calls_near: Callable[[int, int, np.ndarray], Callable[[], pd.DataFrame]] | None = None
    # Spans of the tables read by the window workers themselves (nsys/spans.py); None: the
    # rows come only from ops and calls (in memory, or an export read whole).
    spans: SpanSource | None = None
    # The GPU's metric samples (--gpu-metrics-devices), read a window at a time where the
    # window is analysed (it pickles): nsys/gpu_metrics.py. None: the export has none.
    gpu_metrics: GpuMetricSource | None = None


class GpuMetric(StrEnum):
    """The GPU metrics the speed of light reads (nsys/gpu_metrics.py names each)."""

    DRAM_READ = "dram_read"  # % of peak DRAM bandwidth
    DRAM_WRITE = "dram_write"
    SM_ACTIVE = "sm_active"  # % of SMs with a warp resident
    SM_ISSUE = "sm_issue"  # % of SM sub-partition cycles issuing an instruction
    TENSOR_ACTIVE = "tensor_active"  # % of cycles the tensor pipes are busy
    GPC_CLOCK = "gpc_clock"  # Hz (nsys names it [MHz] but writes Hz)


@dataclass(frozen=True, slots=True)
class GpuSamples:
    """GPU metric samples in time order: sample i is the mean over [time_ns[i], ends_ns[i])
    (measured: tests/test_gpu_metrics.py); values per GpuMetric, NaN where not sampled."""

    time_ns: np.ndarray  # int64
    ends_ns: np.ndarray  # int64: the next sample's time, GpuMetricSource.longest_sample_ns at most
    values: dict[GpuMetric, np.ndarray]  # float64, one per sample


class GpuMetricSource(Protocol):
    """An export's GPU metric samples, one GPU's, read by time range."""

    @property
    def peak_bytes_per_s(self) -> int: ...  # TARGET_INFO_GPU.memoryBandwidth

    @property
    def period_ns(self) -> int: ...  # the sampling period (median spacing)

    @property
    def longest_sample_ns(self) -> int: ...  # no sample lasts longer (ends_ns - time_ns)

    def samples(self, lo: int, hi: int) -> GpuSamples: ...  # those overlapping [lo, hi)


class SpanSource(Protocol):
    """What window workers need to read their own spans of an export (nsys/spans.py)."""

    @property
    def reader(self) -> Any:  # it pickles; reader.rows(read_from, own_from, own_until)
        ...

    def longest_row_ns(self) -> int: ...

    def os_calls_near(self) -> Callable[[int, int, np.ndarray], Callable[[], pd.DataFrame]]: ...

    def stop_reading(self) -> None: ...

    def settle(self, counts: list[dict[str, object]]) -> None: ...


class NeedsWholeTrace(Exception):
    """The rows cannot be analysed window by window (out of start order, or an op far from
    its launch); the caller analyses the whole trace at once instead."""


def require_columns(frame: pd.DataFrame, columns: dict[str, str]) -> None:
    """Raise ValueError when a frame lacks a model column: a wrong frame is our bug."""
    missing = [name for name in columns if name not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks columns {missing}; has {list(frame.columns)}")


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with the model's columns and dtypes."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})
