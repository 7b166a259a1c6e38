"""What changed between two analyses, as the diff states it: step time, (stage, bucket), stage.

The diff's vocabulary, apart from its assembly (diff.py), so that the verdict sentences
(diff/verdicts.py) can read these changes without importing the diff.
"""

from __future__ import annotations

from dataclasses import dataclass

from trace_gaps.figures.stage import StageSummary, compared_figures
from trace_gaps.records.report import WallStats


@dataclass(frozen=True, slots=True)
class NsInterval:
    """A bootstrap confidence interval of a difference of means (after − before), in ns."""

    low_ns: int
    high_ns: int

    @property
    def excludes_zero(self) -> bool:
        return self.low_ns > 0 or self.high_ns < 0


@dataclass(frozen=True, slots=True)
class PctInterval:
    """The same, relative to the before mean, in percent."""

    low_pct: float
    high_pct: float


@dataclass(frozen=True, slots=True)
class WallChange:
    """Step wall time after − before, with its CI in ns and in percent of before.

    The CIs are None when a side has fewer than 2 analysed steps: no noise estimate.
    """

    change_ns: int
    change_pct: float | None
    ci_ns: NsInterval | None
    ci_pct: PctInterval | None
    is_beyond_noise: bool | None


@dataclass(frozen=True, slots=True)
class BucketChange:
    """ns per step of one (stage, bucket) before and after: `busy` or `idle <cause>`."""

    stage: str
    bucket: str
    presence: str
    before_ns_per_step: int
    after_ns_per_step: int
    change_ns_per_step: int
    ci_ns: NsInterval | None
    is_beyond_noise: bool | None


@dataclass(frozen=True, slots=True)
class GpuSide:
    """A stage's DRAM traffic on one side, from the GPU's own metrics (figures.StageGpuMetrics)."""

    dram_bytes_per_step: int  # read and written
    dram_bandwidth_pct: float  # read + write, % of peak, over the stage's GPU busy time
    sol_ns_per_step: int  # its speed of light


def _gpu_side(stage: StageSummary) -> GpuSide | None:
    metrics = stage.gpu_metrics
    if metrics is None:
        return None
    return GpuSide(
        dram_bytes_per_step=metrics.dram_read_bytes_per_step + metrics.dram_write_bytes_per_step,
        dram_bandwidth_pct=round(metrics.dram_read_pct + metrics.dram_write_pct, 1),
        sol_ns_per_step=metrics.sol_ns_per_step,
    )


@dataclass(frozen=True, slots=True)
class StageSide:
    """One stage on one side: time, launches and execution mode per step.

    Its figures are the stage's declared `compared` (figures/stage.py), by name; the defaults are
    their values where the side has no figures for the stage."""

    ns_per_step: int
    execution: str = "none"
    eager_launches_per_step: float = 0.0
    graph_launches_per_step: float = 0.0
    # The eager launches split (a "mixed" stage is shown by its parts), and graph size.
    kernel_launches_per_step: float = 0.0
    copy_launches_per_step: float = 0.0
    nodes_per_replay: float | None = None
    # Its DRAM traffic (left out of the JSON where the side has no GPU metrics for it).
    gpu_metrics: GpuSide | None = None


def stage_side(stage: StageSummary | None, ns_per_step: int) -> StageSide:
    """A stage's side of the diff, its compared figures taken from its summary."""
    if stage is None:
        return StageSide(ns_per_step)
    return StageSide(ns_per_step, **compared_figures(stage), gpu_metrics=_gpu_side(stage))


@dataclass(frozen=True, slots=True)
class StageChange:
    """One stage matched by name; a side is None where the stage is absent."""

    stage: str
    presence: str
    before: StageSide | None
    after: StageSide | None
    change_ns_per_step: int


@dataclass(frozen=True, slots=True)
class Side:
    """Which export and process one side of the diff is, and its steps."""

    file: str
    pid: int
    process_name: str
    step_name: str | None
    steps_analysed: int
    steps_skipped: int
    wall: WallStats


@dataclass(frozen=True, slots=True)
class RunChange:
    """Several ranks compared: the run's step time, which is its slowest rank's (the one the
    user waits for), on each side, and its change with the noise of those two ranks' steps."""

    before: Side  # the before side's slowest rank (largest mean step wall time)
    after: Side  # the after side's
    wall: WallChange
    # Where every rank's speed was measured on both sides (drift.py): the machine's part of
    # the run's step change (its slowest rank's, each rank's before replayed at its after's
    # speeds) and the code's, the rest (the gate reads it).
    machine_ns: int | None = None
    code: WallChange | None = None
