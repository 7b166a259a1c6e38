"""What changed between two analyses, as the diff states it: step time, (stage, bucket), stage.

The diff's vocabulary, apart from its assembly (diff.py), so that the verdict sentences
(verdicts.py) can read these changes without importing the diff.
"""

from __future__ import annotations

from dataclasses import dataclass


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
class StageSide:
    """One stage on one side: time, launches and execution mode per step."""

    ns_per_step: int
    execution: str
    eager_launches_per_step: float
    graph_launches_per_step: float
    # The eager launches split (a "mixed" stage is shown by its parts), and graph size.
    kernel_launches_per_step: float = 0.0
    copy_launches_per_step: float = 0.0  # memcpy and memset
    nodes_per_replay: float | None = None


@dataclass(frozen=True, slots=True)
class StageChange:
    """One stage matched by name; a side is None where the stage is absent."""

    stage: str
    presence: str
    before: StageSide | None
    after: StageSide | None
    change_ns_per_step: int
