"""How far the step's GPU work is from the GPU's limits: its stages' speeds of light added up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from trace_gaps.figures.stage import StageSummary


@dataclass(frozen=True, slots=True)
class SpeedOfLight:
    """How far the step's GPU work is from the GPU's limits: every stage's speed of light
    (StageGpuMetrics.sol_ns_per_step) added up, beside the measured step and GPU busy time."""

    step_ns: int  # the measured step, mean over the analysed steps
    busy_ns_per_step: int  # GPU busy, every stage's (the ledger)
    sol_ns_per_step: int  # the stages' speed of light, summed
    memory_sol_ns_per_step: int  # of which their DRAM bytes at peak bandwidth
    dram_bytes_per_step: int  # read and written, every stage's
    # The step predicted with every stage's GPU work at its speed of light: the what-if of
    # `levers` (each stage's sol; docs/what-if.md). None: no step replayed.
    predicted_step_ns: int | None = None
    levers: list[str] = field(default_factory=list)


def speed_of_light(
    stages: Sequence[StageSummary], step_ns: int, busy_ns_per_step: int
) -> SpeedOfLight | None:
    """The step's speed of light from its stages' (None without GPU metrics)."""
    measured = [stage.gpu_metrics for stage in stages if stage.gpu_metrics is not None]
    if not measured:
        return None
    return SpeedOfLight(
        step_ns=step_ns,
        busy_ns_per_step=busy_ns_per_step,
        sol_ns_per_step=sum(m.sol_ns_per_step for m in measured),
        memory_sol_ns_per_step=sum(m.memory_sol_ns_per_step for m in measured),
        dram_bytes_per_step=sum(
            m.dram_read_bytes_per_step + m.dram_write_bytes_per_step for m in measured
        ),
    )
