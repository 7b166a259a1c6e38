"""A stage's GPU metric figures (StageGpuMetrics), each declared once, computed from its
GPU metric integrals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trace_gaps.figures.inputs import StageInputs, per_step
from trace_gaps.units import format_ms

_FIGURE = "figure"


@dataclass(frozen=True, slots=True)
class GpuFigure:
    """One GPU metric figure of a stage: unit, doc, and its column in the GPU metrics table."""

    name: str
    unit: str
    doc: str
    header: str
    cell: Callable[[Any], str]


def _gpu(unit: str, doc: str, header: str, cell: Callable[[Any], str]) -> Any:
    return field(metadata={_FIGURE: GpuFigure("", unit, doc, header, cell)})


def _pct(value: float) -> str:
    return f"{value:.1f}"


def _mb(value: int) -> str:
    return f"{value / 1e6:.1f}"


@dataclass(frozen=True, slots=True)
class StageGpuMetrics:
    """A stage's GPU metrics over its busy time (each sample's rate while some op ran, shared
    among the stages by their busy time in it), per analysed step, and its speed of light."""

    samples_per_step: float = _gpu(
        "samples/step",
        "sampling periods of the stage's busy time per step: under MIN_SAMPLES_PER_STEP the "
        "rates are rough",
        "samples",
        lambda n: f"{n:g}",
    )
    dram_read_pct: float = _gpu("% of peak", "DRAM read bandwidth while busy", "DRAM read %", _pct)
    dram_write_pct: float = _gpu("% of peak", "DRAM write bandwidth while busy", "write %", _pct)
    dram_read_bytes_per_step: int = _gpu(
        "bytes/step", "bytes read from DRAM: read % x peak x busy time", "read MB", _mb
    )
    dram_write_bytes_per_step: int = _gpu("bytes/step", "bytes written to DRAM", "write MB", _mb)
    sm_active_pct: float = _gpu("%", "SMs with a warp resident", "SM active %", _pct)
    sm_issue_pct: float = _gpu("%", "SM sub-partition cycles issuing", "SM issue %", _pct)
    tensor_active_pct: float = _gpu("%", "cycles the tensor pipes ran", "tensor %", _pct)
    gpc_clock_mhz: int = _gpu("MHz", "mean GPC clock over the busy time", "clock MHz", str)
    memory_sol_ns_per_step: int = _gpu(
        "ns/step", "what its DRAM bytes (read and written) need at peak bandwidth", "", format_ms
    )
    tensor_sol_ns_per_step: int = _gpu(
        "ns/step",
        "its tensor-active time: what its tensor work needs at full tensor use",
        "",
        format_ms,
    )
    sol_ns_per_step: int = _gpu(
        "ns/step",
        "speed of light: the larger of the two (the GPU busy time it cannot go below)",
        "SoL ms",
        format_ms,
    )
    sol_fraction: float | None = _gpu(
        "fraction",
        "speed of light over busy time: 1 at the limit (null: no busy time)",
        "busy/SoL",
        lambda r: "" if not r else f"{1 / r:.1f}x",
    )


# Fewer sampling periods per step than this: a stage's rates are rough (said by the verdict).
MIN_SAMPLES_PER_STEP = 4


def summarise_gpu_metrics(stage: StageInputs) -> StageGpuMetrics | None:
    """A stage's GPU metric figures (None without GPU metrics)."""
    gpu = stage.gpu_metrics
    if gpu is None:
        return None
    busy = stage.busy_ns_per_step
    read, write = gpu.share("dram_read_ns"), gpu.share("dram_write_ns")
    tensor = gpu.share("tensor_active_ns")
    memory_ns = int(round((read + write) * busy))
    tensor_ns = int(round(tensor * busy))
    sol = max(memory_ns, tensor_ns)
    return StageGpuMetrics(
        samples_per_step=per_step(gpu.integrals["sampled_ns"] / gpu.period_ns, stage.steps),
        dram_read_pct=round(100 * read, 1),
        dram_write_pct=round(100 * write, 1),
        dram_read_bytes_per_step=int(round(read * gpu.peak_bytes_per_s * busy / 1e9)),
        dram_write_bytes_per_step=int(round(write * gpu.peak_bytes_per_s * busy / 1e9)),
        sm_active_pct=round(100 * gpu.share("sm_active_ns"), 1),
        sm_issue_pct=round(100 * gpu.share("sm_issue_ns"), 1),
        tensor_active_pct=round(100 * tensor, 1),
        gpc_clock_mhz=int(round(gpu.share("gpc_clock_mhz_ns"))),
        memory_sol_ns_per_step=memory_ns,
        tensor_sol_ns_per_step=tensor_ns,
        sol_ns_per_step=sol,
        sol_fraction=round(sol / busy, 3) if busy else None,
    )


def gpu_figures() -> list[GpuFigure]:
    """The GPU metric figures of a stage, in their order, each with its name."""
    return [
        dataclasses.replace(f.metadata[_FIGURE], name=f.name)
        for f in dataclasses.fields(StageGpuMetrics)
    ]
