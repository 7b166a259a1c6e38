"""Formatting of figures for people (units.py)."""

from __future__ import annotations

from trace_gaps.units import format_rate


def test_rare_counts_are_never_printed_as_zero_per_step():
    assert format_rate(2.94, "code loads") == "2.9 code loads per step"
    assert format_rate(0.0143, "code loads") == "1 code load every 70 steps"
    assert format_rate(0.0, "host syncs") == "0 host syncs per step"
