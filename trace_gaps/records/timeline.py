"""The records of a step drawn as a timeline: its stages, calls, streams, idle runs and GPU
metrics as spans."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class StepTimeline:
    """Everything a timeline picture draws for one step of one thread."""

    view: str  # the TimelineRequest.view that chose this step
    pid: int
    thread: int  # the step's thread id (tid, not globalTid)
    step_id: int
    step_index: int
    step_name: str | None
    is_warmup: bool
    start_offset_ns: int  # the step's start, from the trace start
    wall_ns: int
    stages: Spans  # the innermost stage open on the step's thread, as the ledger charges it
    api_calls: Spans  # CUDA calls on the step's thread; group is the CallCategory value
    streams: list[StreamLane]  # every stream of the process with an op in the step
    idle: Spans  # GPU idle runs of one cause each; group and name are the IdleCause value
    # view "finding": the picks.Finding drawn at its largest, and its time in this step
    finding: str = ""
    finding_ns: int = 0
    # The GPU's metric samples over the step (left out where the export has none).
    gpu_metrics: GpuMetricLane | None = None


@dataclass(frozen=True, slots=True)
class GpuMetricLane:
    """The GPU's metric samples over one step (--gpu-metrics-devices): each sample's period
    as ns offsets from the step start, cut to the step, and its values there."""

    start_ns: list[int]
    end_ns: list[int]
    dram_read_pct: list[float]  # % of peak DRAM bandwidth
    sm_active_pct: list[float]  # % of SMs with a warp resident


@dataclass(frozen=True, slots=True)
class StreamLane:
    """The GPU ops of one stream in one step; each op's group is the stage that launched it."""

    device_id: int
    stream_id: int
    ops: Spans
    # The parts of collective ops spent waiting for a peer process (group: the op's stage).
    waits: Spans = field(default_factory=lambda: Spans([], [], [], []))


@dataclass(frozen=True, slots=True)
class Spans:
    """Columns of time spans: ns offsets from the step start, a colour group and a text each."""

    start_ns: list[int]
    end_ns: list[int]
    group: list[str]  # what colours the span: a stage, a call category or an idle cause
    name: list[str]  # what to write on it when it is wide enough
    # CUDA calls and GPU ops: each span's correlation id, what ties a launch to its op
    # (export perfetto's flows); empty for other spans.
    correlation_id: list[int] = field(default_factory=list)
