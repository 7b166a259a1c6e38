"""Sweeps over time intervals [start, end) held as numpy arrays, shared by analysis and plots.

Merging overlapping spans, runs of equal labels, coverage of points by spans and the
overlap of one interval set with another. Only numpy here: plot/ uses it and must not
import an analysis module.
"""

from __future__ import annotations

import numpy as np


def merge_overlapping(
    starts: np.ndarray, ends: np.ndarray, within: float = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The union of the spans, as disjoint spans sorted by start.

    Spans closer than `within` (gap at most `within`) merge too; touching spans always do.
    """
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1] + within])
    return starts[first], np.maximum.reduceat(ends, first)


def outermost(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Of spans sorted by start, which start after every earlier span has ended (a mask).

    Sorted by start and then longest first, these are the spans nested in no earlier one.
    """
    earlier_end = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, ends])[:-1]
    after: np.ndarray = starts >= earlier_end
    return after


def label_runs(positions: np.ndarray, *labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, last): where each maximal run of consecutive positions with equal labels
    starts and ends (inclusive), as indexes into the arrays.

    positions: increasing integers (segment or column numbers); a run breaks where one is
    skipped or where any label changes.
    """
    if len(positions) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    breaks = np.diff(positions) != 1
    for label in labels:
        breaks |= np.diff(label) != 0
    first = np.flatnonzero(np.r_[True, breaks])
    last = np.r_[first[1:], len(positions)] - 1
    return first, last


def covered_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """At each point x of at, the time before x that the spans cover (overlaps counted twice).

    In float: the products of counts and times overflow int64 on epoch-ns timestamps.
    """
    starts, ends = np.sort(starts), np.sort(ends)
    started = np.searchsorted(starts, at, side="left")
    ended = np.searchsorted(ends, at, side="left")
    start_sums = np.r_[0.0, np.cumsum(starts)]
    end_sums = np.r_[0.0, np.cumsum(ends)]
    covered = (started * at - start_sums[started]) - (ended * at - end_sums[ended])
    return np.asarray(covered, dtype=float)


def covered_time(
    starts: np.ndarray, ends: np.ndarray, run_starts: np.ndarray, run_ends: np.ndarray
) -> int:
    """Total overlap of the intervals [starts, ends) with disjoint runs sorted by start, each
    interval counted on its own: by the runs' cumulative length, no loop per interval.

    Exact in integer ns (no product of a count and a time).
    """
    if not len(run_starts) or not len(starts):
        return 0
    before = np.r_[0, np.cumsum(run_ends - run_starts)]  # run time before each run

    def covered_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(run_starts, t, side="right")  # runs starting at or before t
        inside = np.minimum(
            np.maximum(t - run_starts[np.maximum(k - 1, 0)], 0),
            (run_ends - run_starts)[np.maximum(k - 1, 0)],
        )
        found: np.ndarray = before[np.maximum(k - 1, 0)] + np.where(k > 0, inside, 0)
        return found

    return int((covered_until(ends) - covered_until(starts)).sum())


def overlaps(
    starts: np.ndarray, ends: np.ndarray, other_starts: np.ndarray, other_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every non-empty overlap of an interval with one of `other` (disjoint, sorted by start).

    Returns (index, other_index, start, end) per overlap, by interval and then by time; by
    sort and search, no loop per interval.
    """
    first = np.searchsorted(other_ends, starts, side="right")
    last = np.searchsorted(other_starts, ends, side="left")
    counts = np.maximum(last - first, 0)
    index = np.repeat(np.arange(len(starts)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    other_index = np.repeat(first, counts) + offsets
    start = np.maximum(starts[index], other_starts[other_index])
    end = np.minimum(ends[index], other_ends[other_index])
    keep = end > start
    return index[keep], other_index[keep], start[keep], end[keep]
