"""What `diff` calls beyond noise: outside the bootstrap interval and the practical threshold."""

from __future__ import annotations

from trace_gaps.diff.changes import NsInterval
from trace_gaps.diff.noise import is_beyond, practical_threshold_ns


def test_the_practical_threshold_is_one_percent_of_the_step_and_at_least_10_us():
    assert practical_threshold_ns(20_000_000) == 200_000  # 1 % of a 20 ms step
    assert practical_threshold_ns(500_000) == 10_000  # the 10 µs floor under a 1 ms step
    assert practical_threshold_ns(12_000) == 600  # the floor is at most 5 % of the step


def test_a_change_whose_interval_excludes_zero_but_is_tiny_is_not_beyond_noise():
    step = 10_000_000
    assert not is_beyond(NsInterval(20_000, 40_000), 30_000, step)  # 0.3 % of the step
    assert is_beyond(NsInterval(150_000, 250_000), 200_000, step)  # 2 %
    assert not is_beyond(NsInterval(-50_000, 450_000), 200_000, step)  # interval holds 0
