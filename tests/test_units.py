"""Formatting of figures for people (units.py)."""

from __future__ import annotations

from trace_gaps.units import format_durations, format_rate


def test_rare_counts_are_never_printed_as_zero_per_step():
    assert format_rate(2.94, "code loads") == "2.9 code loads per step"
    assert format_rate(0.0143, "code loads") == "1 code load every 70 steps"
    assert format_rate(0.0, "host syncs") == "0 host syncs per step"


def test_a_column_of_durations_keeps_one_unit():
    #   2.31 ms, 718.36 ms and 1.25 s: the smallest decides, so the second reads ms too.
    assert format_durations([2_310_000, 718_360_000, 1_250_000_000]) == [
        "2.31 ms",
        "718.36 ms",
        "1250.00 ms",
    ]
    assert format_durations([850, 12_300]) == ["850 ns", "12300 ns"]
    assert format_durations([1_250_000_000]) == ["1.25 s"]
    assert format_durations([]) == []
