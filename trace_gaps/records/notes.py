"""The integrity notes as records: their codes, severities and the figures they make
unreliable (the words: report/notes.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Figures(StrEnum):
    """Report figures that damaged rows can make unreliable (UnreliableFigures.figures), and
    that an integrity note affects (Note.figures)."""

    GPU_TIME = "gpu_time"  # GPU busy and idle time, the ledger, top kernels
    LAUNCHES = "launches"  # launch counts, launches per step, idle split by cause, verdicts
    STEPS = "steps"  # which steps and stages there are, and so every per-step figure
    KERNELS = "kernels"  # per-kernel evidence and the top kernels
    WAITS = "waits"  # collective waits across ranks
    HOST_IDLE = "host_idle"  # idle time charged to host, and the host-gap findings


class Severity(StrEnum):
    """How an integrity note bears on the figures it names."""

    INFO = "info"  # how the export was read: a choice made, a convention followed
    PARTIAL = "partial"  # the figures miss some rows or cover part of the run
    UNRELIABLE = "unreliable"  # the figures may be wrong: check before acting on them


class NoteCode(StrEnum):
    """What an integrity note is about: a stable code for tools and tests. Each has its words
    in notes.py."""

    # How the export was captured and read
    NO_NVTX = "no_nvtx"
    NO_STEP_RANGE = "no_step_range"
    NO_CUDA_API = "no_cuda_api"
    GRAPH_LEVEL_TRACE = "graph_level_trace"
    OVERLAPPING_STEP_RANGES = "overlapping_step_ranges"
    TIME_WINDOW_EXPORT = "time_window_export"
    OLDER_SCHEMA = "older_schema"
    NVTX_WITHOUT_TEXT_ID = "nvtx_without_text_id"
    KERNELS_WITHOUT_GRAPH_NODE_ID = "kernels_without_graph_node_id"
    # Rows lost, damaged or left out
    LOST_LAUNCH_RECORDS = "lost_launch_records"
    NSYS_LOST_EVENTS = "nsys_lost_events"
    UNTIMED_ROWS = "untimed_rows"
    DUPLICATE_ROWS = "duplicate_rows"
    IMPOSSIBLE_OP_TIMES = "impossible_op_times"
    IMPOSSIBLE_CALL_TIMES = "impossible_call_times"
    UNRESOLVED_CALL_NAMES = "unresolved_call_names"
    UNRESOLVED_KERNEL_NAMES = "unresolved_kernel_names"
    IMPOSSIBLE_RANGE_TIMES = "impossible_range_times"
    UNCLOSED_RANGES = "unclosed_ranges"
    RANGES_CLOSED_ELSEWHERE = "ranges_closed_elsewhere"
    PROFILER_OVERHEAD_IN_STEPS = "profiler_overhead_in_steps"
    # Ranges, threads, processes and steps: where the time is charged
    NAMED_DOMAINS_USED = "named_domains_used"
    DOMAINS_LEFT_OUT = "domains_left_out"
    PROCESSES_WITHOUT_STEPS = "processes_without_steps"
    LAUNCHING_THREAD_BORROWED = "launching_thread_borrowed"
    STEP_KINDS = "step_kinds"
    OPS_WITHOUT_LAUNCH_CALL = "ops_without_launch_call"
    OPS_FROM_OTHER_THREADS = "ops_from_other_threads"
    STEPS_WITHOUT_GPU_WORK = "steps_without_gpu_work"
    WARMUP_STEADY_LOADS = "warmup_steady_loads"
    WARMUP_LENGTH_ONLY = "warmup_length_only"
    # Processes, GPUs and collectives
    UNMATCHED_COLLECTIVES = "unmatched_collectives"
    SEVERAL_PROCESSES = "several_processes"
    PROCESS_ON_SEVERAL_GPUS = "process_on_several_gpus"
    # Several exports as one run (multi.py)
    EXPORTS_ALIGNED = "exports_aligned"
    EXPORTS_APART = "exports_apart"  # an export not of the first one's run, analysed apart
    COLLECTIVES_UNSPLIT = "collectives_unsplit"  # one rank's export alone: its peers missing
    WAITS_WITHIN_CLOCK_ERROR = "waits_within_clock_error"
    EXPORT_NOT_ANALYSED = "export_not_analysed"


# A note's number, name or list of them (each code's keys: its words in notes.py).
NoteNumber = int | float | str | tuple[int, ...] | tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NoteFacts:
    """An integrity note as the analysis finds it: what (code), how it bears (severity) on
    which figures, and the numbers its sentence is written from (notes.write_note)."""

    code: NoteCode
    severity: Severity
    figures: tuple[Figures, ...]
    numbers: dict[str, NoteNumber] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Note:
    """An integrity note: what in the export bears on which figures, as a stable code (for
    tools and tests), a severity and the figures affected, with its sentence for people."""

    code: str  # NoteCode
    severity: str  # Severity
    figures: list[str]  # Figures values ([] when no figure in particular)
    text: str


@dataclass(frozen=True, slots=True)
class UnreliableFigures:
    """Figures flagged: more than UNRELIABLE_SHARE of the rows they come from are damaged."""

    figures: Figures
    table: str  # "gpu_ops" or "api_calls"
    problem: str  # "impossible_times" or "unresolved_names"
    rows: int
    of_rows: int
