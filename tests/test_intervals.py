"""Interval sweeps shared by the analysis and the plots, on small timelines."""

from __future__ import annotations

import numpy as np

from trace_gaps.intervals import (
    covered_before,
    covered_time,
    label_runs,
    merge_overlapping,
    outermost,
    overlaps,
)


def a(*values: float) -> np.ndarray:
    return np.array(values)


def test_overlapping_and_touching_spans_merge_and_a_gap_keeps_them_apart():
    #   [0 ... 100]
    #        [50 ... 200]
    #                  [200 .. 300]      [400 .. 500]
    starts, ends = merge_overlapping(a(400, 0, 50, 200), a(500, 100, 200, 300))
    assert (starts.tolist(), ends.tolist()) == ([0, 400], [300, 500])


def test_spans_closer_than_within_merge():
    starts, ends = merge_overlapping(a(0, 150, 400), a(100, 200, 500), within=50)
    assert (starts.tolist(), ends.tolist()) == ([0, 400], [200, 500])


def test_no_spans_merge_to_none():
    starts, ends = merge_overlapping(a(), a())
    assert len(starts) == len(ends) == 0


def test_outermost_keeps_spans_nested_in_no_earlier_one():
    #   [0 ............ 100]
    #      [10 .. 20]            nested
    #                [90 .. 150] overlaps the first: not outermost either
    #                             [150 .. 170]
    assert outermost(a(0, 10, 90, 150), a(100, 20, 150, 170)).tolist() == [
        True,
        False,
        False,
        True,
    ]


def test_runs_break_where_a_position_is_skipped_or_a_label_changes():
    positions = np.array([0, 1, 2, 4, 5, 6])
    labels = np.array([7, 7, 8, 8, 8, 8])
    first, last = label_runs(positions, labels)
    assert (first.tolist(), last.tolist()) == ([0, 2, 3], [1, 2, 5])


def test_runs_of_nothing_are_none():
    first, last = label_runs(np.zeros(0, dtype=np.int64), np.zeros(0))
    assert len(first) == len(last) == 0


def test_covered_before_counts_overlaps_twice():
    #   [0 .. 10]
    #      [5 ....... 20]
    covered = covered_before(a(0, 5), a(10, 20), a(0, 5, 10, 30))
    assert covered.tolist() == [0, 5, 15, 25]


def test_covered_time_sums_each_interval_against_disjoint_runs():
    #   runs      [0 .. 10]     [20 .. 30]
    #   intervals     [5 .......... 25]   [28 ... 40]
    assert covered_time(a(5, 28), a(25, 40), a(0, 20), a(10, 30)) == 10 + 2


def test_covered_time_is_exact_on_epoch_timestamps():
    t = 1_700_000_000_000_000_000
    starts = np.array([t, t + 1], dtype=np.int64)
    ends = starts + 3
    assert covered_time(starts, ends, np.array([t], dtype=np.int64), ends[:1]) == 3 + 2


def test_overlaps_pair_each_interval_with_the_runs_it_touches():
    #   intervals [0 ........ 25]      [40 .. 45]
    #   other       [5 .. 10] [20 .. 30]
    index, other, start, end = overlaps(a(0, 40), a(25, 45), a(5, 20), a(10, 30))
    assert index.tolist() == [0, 0]
    assert other.tolist() == [0, 1]
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == [(5, 10), (20, 25)]
