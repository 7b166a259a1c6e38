"""Whether a diff's change is beyond noise: the bootstrap's intervals in whole ns, and the
practical threshold a change must also pass (docs/diff.md)."""

from __future__ import annotations

import numpy as np

from trace_gaps.diff.bootstrap import bootstrap_mean_difference, mean_difference_intervals
from trace_gaps.diff.changes import NsInterval, PctInterval

# A change is beyond noise only when at least this share of the step and this long (the
# floor itself at most PRACTICAL_FLOOR_FRACTION of the step: a step of 12 µs is not held to 10).
PRACTICAL_FRACTION = 0.01
PRACTICAL_MIN_NS = 10_000
PRACTICAL_FLOOR_FRACTION = 0.05


def bootstrap_intervals(
    before: np.ndarray,
    after: np.ndarray,
    rng: np.random.Generator,
    drawn: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[list[NsInterval], PctInterval | None]:
    """The bootstrap's intervals in whole ns, and the relative one to 0.01 %, from the
    means drawn in the sides when given."""
    intervals = (
        bootstrap_mean_difference(before, after, rng)
        if drawn is None
        else mean_difference_intervals(*drawn)
    )
    if intervals is None:
        return [], None
    return [
        NsInterval(int(round(lo)), int(round(hi)))
        for lo, hi in zip(intervals.low, intervals.high, strict=True)
    ], PctInterval(round(intervals.relative_low_pct, 2), round(intervals.relative_high_pct, 2))


def practical_threshold_ns(step_ns: float) -> float:
    """The smallest change called beyond noise: PRACTICAL_FRACTION of the step, at least
    PRACTICAL_MIN_NS unless that is over PRACTICAL_FLOOR_FRACTION of it (docs/diff.md)."""
    floor = min(PRACTICAL_MIN_NS, PRACTICAL_FLOOR_FRACTION * step_ns)
    return max(PRACTICAL_FRACTION * step_ns, floor)


def is_beyond(interval: NsInterval, change_ns: float, step_ns: float) -> bool:
    """Beyond noise: the bootstrap interval excludes zero and the change is at least the
    practical threshold (a change of 0.3 % of the step is not worth a red line)."""
    return bool(interval.excludes_zero and abs(change_ns) >= practical_threshold_ns(step_ns))
