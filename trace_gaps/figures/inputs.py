"""What a stage's figures are computed from: its totals and per-step values over the
analysed steps, the ledger's means, and its GPU metric integrals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StageInputs:
    """What one stage's figures are computed from (analysis/summary.py gathers it)."""

    name: str
    steps: int  # analysed steps
    totals: Mapping[str, int]  # every Total, summed over the analysed steps
    busy_ns_per_step: int  # the ledger's means
    idle_ns_per_step: int
    launch_spacing_ns: int | None  # median host gap before a launch (whole µs); None: no launch
    long_gap_threshold_ns: int  # host gaps longer than this are long
    even_gap_fraction: float | None
    long_gaps: int  # over the analysed steps
    long_gap_idle_ns: int
    step_values: Mapping[str, Sequence[int]]  # every StepValue: one per step that has one
    gpu_metrics: StageGpuInputs | None = None  # None: the export has no GPU metrics

    def total(self, *totals: str) -> int:
        """The sum of the given totals (Total values; KeyError for one the frame lacks)."""
        return sum(int(self.totals[total]) for total in totals)

    def per_step(self, *totals: str) -> float:
        """The totals' sum per analysed step, two decimals."""
        return per_step(self.total(*totals), self.steps)

    def ns_per_step(self, *totals: str) -> int:
        """The totals' sum (ns) per analysed step, whole ns."""
        return int(round(self.per_step(*totals)))


@dataclass(frozen=True, slots=True)
class StageGpuInputs:
    """One stage's GPU metric integrals over its busy time in the analysed steps
    (analysis/gpu_metrics.py: sampled_ns and each metric's ns at 100 %, the clock's MHz x ns),
    and the GPU's peak DRAM bandwidth and sampling period."""

    integrals: Mapping[str, int]
    peak_bytes_per_s: int
    period_ns: int

    def share(self, name: str) -> float:
        """The metric's mean share of 100 % over the sampled busy time (0 when none)."""
        sampled = self.integrals["sampled_ns"]
        return self.integrals[name] / sampled if sampled else 0.0


def per_step(total: float, steps: int) -> float:
    """A total per step, two decimals (0 without steps)."""
    return round(float(total) / steps, 2) if steps else 0.0


def mean_over_steps(values: Sequence[int]) -> int | None:
    """The mean of a per-step value over the steps that have one, whole ns (None: none has)."""
    return int(round(sum(values) / len(values))) if values else None
