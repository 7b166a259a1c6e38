"""A thread's elementary segments: its steps' time cut at every bound of its steps, ops,
calls and stage ranges, each segment with its step, stage and cause code (ledger.py sums
them).

Each interval set is ranked once among the sorted bounds (one stable argsort); which
interval is open at each segment is then a running count along the bounds, not a binary
search per segment and per question.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import pandas as pd

from trace_gaps.analysis.grouped import is_one_of
from trace_gaps.analysis.stages import STAGE, StageMap, ThreadStages
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import CALL_CATEGORY, END_NS, LAUNCH_CATEGORIES, START_NS, CallCategory
from trace_gaps.vocabulary import BETWEEN_STEPS, CAUSE_ORDER, NO_STAGE, IdleCause

# Cause codes: busy, then the idle causes in CAUSE_ORDER, then a collective's wait.
BUSY = 0
CAUSE_CODE = {cause: code for code, cause in enumerate(CAUSE_ORDER, start=1)}
WAIT = len(CAUSE_ORDER) + 1
DURATION_NS = "duration_ns"

# A thread's elementary segments, column by column (parallel arrays, time order).
Segments: TypeAlias = dict[str, np.ndarray]

_LAUNCH = {c.value for c in LAUNCH_CATEGORIES}
_SYNC = {CallCategory.SYNC.value}


def segments_of(
    steps: pd.DataFrame,
    owned: tuple[np.ndarray, np.ndarray, np.ndarray],
    waited: tuple[np.ndarray, np.ndarray, np.ndarray],
    queued: tuple[np.ndarray, np.ndarray],
    calls: pd.DataFrame,
    stage_map: StageMap,
    thread: ThreadStages,
) -> Segments:
    win_starts = steps[START_NS].to_numpy()
    win_ends = steps[END_NS].to_numpy()
    lo, hi = int(win_starts.min()), int(win_ends.max())
    category = calls[CALL_CATEGORY]  # categorical: is_one_of judges each category once
    call_starts, call_ends = calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
    is_sync = is_one_of(category, _SYNC)
    is_launch = is_one_of(category, _LAUNCH)
    is_api = ~is_sync & ~is_launch
    interval_sets = [
        (win_starts, win_ends),
        owned[:2],
        waited[:2],
        queued,
        (call_starts, call_ends),
        (thread.step_starts, thread.step_ends),
        *zip(thread.level_starts, thread.level_ends, strict=True),
    ]
    bounds, ranks = ranked_bounds([part for pair in interval_sets for part in pair], lo, hi)
    # ranks in the order of interval_sets' parts: step starts and ends, owned starts, ...
    owned_first, waited_first = ranks[2], ranks[4]
    queued_ranks, call_first, call_last = (ranks[6], ranks[7]), ranks[8], ranks[9]
    seg_starts, seg_ends = bounds[:-1], bounds[1:]
    seg_lengths = seg_ends - seg_starts

    # The window's steps are disjoint and sorted: the last one started is the one open.
    step_at, in_step = last_started(ranks[0], win_ends, seg_starts)
    # A process with steps but no GPU op (a scheduler, an idle rank) is never busy.
    owner, busy = last_started(owned_first, owned[1], seg_starts)
    waiter, waiting = last_started(waited_first, waited[1], seg_starts)
    waiting &= ~busy

    cause = np.full(len(seg_starts), CAUSE_CODE[IdleCause.HOST], dtype=np.int64)
    # Lowest priority first; each later mask overwrites.
    for code, (first, last) in (
        (CAUSE_CODE[IdleCause.QUEUED], queued_ranks),
        (CAUSE_CODE[IdleCause.LAUNCH], (call_first[is_launch], call_last[is_launch])),
        (CAUSE_CODE[IdleCause.API], (call_first[is_api], call_last[is_api])),
        (CAUSE_CODE[IdleCause.SYNC], (call_first[is_sync], call_last[is_sync])),
    ):
        cause[covered(len(bounds), first, last)] = code
    cause[busy] = BUSY
    cause[waiting] = WAIT

    stage = _stage_atsegments_of(stage_map, thread, seg_starts, ranks[10], ranks[12::2])
    if len(owned[2]):
        stage = np.where(busy, owned[2][np.maximum(owner, 0)], stage)
    if len(waited[2]):
        stage = np.where(waiting, waited[2][np.maximum(waiter, 0)], stage)

    # Every segment, those outside the steps with step -1: not selecting the others here
    # saves a copy of every column (the idle ones are selected once, in _idle_segments).
    step_ids = np.where(in_step, steps[STEP_ID].to_numpy()[np.maximum(step_at, 0)], -1)
    return {
        STEP_ID: step_ids,
        STAGE: stage,
        "cause_code": cause,
        DURATION_NS: seg_lengths,
        START_NS: seg_starts,
        END_NS: seg_ends,
    }


def _stage_atsegments_of(
    stage_map: StageMap,
    thread: ThreadStages,
    seg_starts: np.ndarray,
    step_ranks: np.ndarray,
    level_ranks: list[np.ndarray],
) -> np.ndarray:
    """thread_stage_at(stage_map, thread, seg_starts), with the thread's open step and each
    level's open range found from their start ranks among the bounds (a count) instead of a
    binary search."""
    _, in_step = last_started(step_ranks, thread.step_ends, seg_starts)
    codes = np.where(in_step, stage_map.code(NO_STAGE), stage_map.code(BETWEEN_STEPS))
    # Deeper levels overwrite shallower ones: the innermost open stage wins.
    for ranks, ends, level_codes in zip(
        level_ranks, thread.level_ends, thread.level_codes, strict=True
    ):
        at, hit = last_started(ranks, ends, seg_starts)
        if len(level_codes):
            codes = np.where(hit, level_codes[np.maximum(at, 0)], codes)
    return codes


def ranked_bounds(parts: list[np.ndarray], lo: int, hi: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(bounds, ranks): the distinct values of the parts clipped to [lo, hi], sorted, and per
    part the position of each of its (clipped) values in bounds.

    One stable argsort of the concatenation (its parts are mostly sorted runs, which a
    stable sort merges quickly) replaces a binary search per value and per question.
    """
    values = np.clip(np.concatenate(parts), lo, hi)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.empty(len(ordered), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.cumsum(new) - 1
    cuts = np.cumsum([len(part) for part in parts])[:-1]
    return ordered[new], np.split(rank, cuts)


def last_started(
    start_ranks: np.ndarray, ends: np.ndarray, seg_starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per segment, of disjoint intervals sorted by start (their starts' ranks in bounds):
    the last one starting at or before the segment (-1: none), and whether it covers it."""
    n = len(seg_starts)
    if not len(ends):
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool)
    started = running_count(start_ranks, n)
    # The ends behind one that covers nothing, read where none has started yet.
    covers: np.ndarray = seg_starts < np.r_[np.iinfo(np.int64).min, ends][started]
    return started - 1, covers


def covered(bounds: int, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per segment [bounds[k], bounds[k+1]) of `bounds` bounds: is it inside at least one
    interval? first, last: the intervals' start and end ranks in bounds."""
    inside: np.ndarray = running_count(first, bounds - 1, less=last) > 0
    return inside


def running_count(ranks: np.ndarray, n: int, less: np.ndarray | None = None) -> np.ndarray:
    """Per position k < n: how many ranks are <= k, less how many of `less` are (ranks and
    less: in [0, n]).

    A bin per position summed along (two passes over n) where the ranks are many; where
    they are few (a window's steps or stage ranges, its syncs), a step function repeated
    from their sorted values (one pass over n; ten times faster for 150 ranks)."""
    if (len(ranks) + (0 if less is None else len(less))) * 8 >= n:
        counts = np.bincount(ranks, minlength=n + 1)
        if less is not None:
            counts = counts - np.bincount(less, minlength=n + 1)
        running: np.ndarray = np.cumsum(counts[:n])
        return running
    points = ranks if less is None else np.concatenate([ranks, less])
    steps = np.ones(len(points), dtype=np.int64)
    if less is not None:
        steps[len(ranks) :] = -1
    if len(points) > 1 and not (points[1:] >= points[:-1]).all():
        order = np.argsort(points, kind="stable")
        points, steps = points[order], steps[order]
    # The count from each point up to the next (none before the first).
    values = np.r_[0, np.cumsum(steps)]
    return np.repeat(values, np.diff(np.r_[0, np.minimum(points, n), n]))
