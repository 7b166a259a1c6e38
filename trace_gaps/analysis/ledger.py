"""The step ledger: every nanosecond of each step charged to one (stage, busy|idle cause).

Over a step's window, on the device timeline of its process (all its GPUs and streams):

    thread  [stage A ......][stage B ...................]
    calls     [launch]  [launch]        [sync ......]
    GPU          [k1 ]      [k2]  idle       idle [k3]

- busy: some op runs; charged to the stage of the running op that started first;
- wait: only collectives run, waiting for a peer process (analysis/collectives.py, from an
  op's start to its WAIT_END_NS); charged to the waiting op's stage, cause "collective";
- idle: no op runs; charged to the stage open on the step's thread, split by what that
  thread was doing: inside a sync, other API or launch call (in that order of precedence
  when calls overlap), else queued (an op is launched but has not started), else host.

segments.py cuts each thread's steps into elementary segments with their stage and cause;
this module builds their inputs (busy, waiting and queued intervals, in chunks of steps)
and sums the segments into the ledger, the gaps and the idle runs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.segments import BUSY, WAIT, Segments, segments_of
from trace_gaps.analysis.segments import DURATION_NS as DURATION_NS  # a segment's, a ledger row's
from trace_gaps.analysis.stages import (
    CALL_END_NS,
    STAGE,
    StageMap,
    ThreadStages,
)
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.intervals import label_runs
from trace_gaps.model import CALL_CATEGORY, END_NS, GLOBAL_TID, PID, START_NS
from trace_gaps.vocabulary import CAUSE_ORDER, WAIT_CAUSE, Bucket

BUCKET = "bucket"
CAUSE = "cause"  # "" for busy rows

LEDGER_COLUMNS = [STEP_ID, STAGE, BUCKET, CAUSE, DURATION_NS]
GAP_COLUMNS = [STEP_ID, STAGE, START_NS, END_NS, CAUSE]


def build_ledger(
    projected_ops: pd.DataFrame,
    staged_calls: pd.DataFrame,
    steps: pd.DataFrame,
    stage_map: StageMap,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Return (ledger, gaps, idle_runs) for every step, from one pass over the segments.

    ledger: one row per (step, stage, bucket, cause) with its duration; per step the
    durations sum to the step's wall time exactly. gaps: maximal idle runs within one
    step and stage, with the cause that covers most of each. idle_runs: the idle time as
    maximal runs of one cause (see find_idle_runs_by_cause).
    """
    ledgers: list[pd.DataFrame] = []
    gaps: list[pd.DataFrame] = []
    runs: list[pd.DataFrame] = []
    for segments in _thread_segments(projected_ops, staged_calls, steps, stage_map):
        idle = _idle_segments(segments)  # selected once, for the gaps and the runs
        ledger, thread_gaps = _thread_ledger(segments, idle)
        ledgers.append(ledger)
        gaps.append(thread_gaps)
        runs.append(_runs_by_cause(idle))
    if not ledgers:
        return (
            pd.DataFrame({c: pd.Series(dtype="int64") for c in LEDGER_COLUMNS}),
            pd.DataFrame({c: pd.Series(dtype="int64") for c in GAP_COLUMNS}),
            _sorted_runs([]),
        )
    return (
        pd.concat(ledgers, ignore_index=True),
        pd.concat(gaps, ignore_index=True),
        _sorted_runs(runs),
    )


def busy_intervals(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, stage codes) of these ops' busy time as the ledger charges it: disjoint,
    in time order, each owned by the op started first, collective waits left out (for one
    process's ops: the ledger's busy buckets are their sums within the steps)."""
    working, _ = _split_waits(ops)
    return _owned_intervals(working)


def _owned_intervals(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint intervals whose union is the busy time, each owned by the op started first.

    Op i owns [max(start_i, latest end of ops started before it), end_i) when non-empty.
    """
    # By start, then longest first (a stable lexsort: its last key sorts first).
    starts, ends = ops[START_NS].to_numpy(), ops[END_NS].to_numpy()
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order], ends[order]
    earlier_end = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, ends])[:-1]
    owned_starts = np.maximum(starts, earlier_end)
    keep = owned_starts < ends
    return owned_starts[keep], ends[keep], ops[STAGE].to_numpy()[order][keep]


def _split_waits(ops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the ops' working parts, their collective waits): a collective that waits for a peer
    until WAIT_END_NS works only after it; its wait is [start, WAIT_END_NS)."""
    if WAIT_END_NS not in ops.columns:
        return ops, ops.iloc[:0]
    wait_end = ops[WAIT_END_NS].to_numpy()
    waits = wait_end > ops[START_NS].to_numpy()
    if not waits.any():
        return ops, ops.iloc[:0]
    working = ops.assign(**{START_NS: np.maximum(ops[START_NS].to_numpy(), wait_end)})
    working = working[working[START_NS].to_numpy() < working[END_NS].to_numpy()]
    waiting = ops[waits].assign(**{END_NS: wait_end[waits]})
    return working, waiting


def _queued_intervals(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """[launch call end, op start) for ops that were launched but had not started."""
    call_ends, starts = ops[CALL_END_NS].to_numpy(), ops[START_NS].to_numpy()
    queued = (call_ends >= 0) & (starts > call_ends)
    return call_ends[queued], starts[queued]


def find_idle_runs_by_cause(
    projected_ops: pd.DataFrame,
    staged_calls: pd.DataFrame,
    steps: pd.DataFrame,
    stage_map: StageMap,
) -> pd.DataFrame:
    """Return the idle time of the given steps as maximal runs of one cause.

    Columns step_id, start_ns, end_ns, cause; sorted by step and start. Unlike the gaps
    of build_ledger, a run ends where the cause changes, not where the stage does, so the
    runs of a step sum to its idle time in the ledger and show each cause where it happens.
    """
    return _sorted_runs(
        [
            _runs_by_cause(_idle_segments(s))
            for s in _thread_segments(projected_ops, staged_calls, steps, stage_map)
        ]
    )


_RUN_COLUMNS = [STEP_ID, START_NS, END_NS, CAUSE]
_CAUSE_LABELS = np.array(["", *(c.value for c in CAUSE_ORDER), WAIT_CAUSE], dtype=object)
_CAUSE_DTYPE = pd.CategoricalDtype(pd.Index(_CAUSE_LABELS))


def _causes(codes: np.ndarray) -> pd.Categorical:
    """Cause codes as their labels, categorical: no string per row. The codes are this
    module's own (all in range): not checked again, row by row."""
    return pd.Categorical.from_codes(codes, dtype=_CAUSE_DTYPE, validate=False)


def _is_idle(codes: np.ndarray) -> np.ndarray:
    idle: np.ndarray = (codes != BUSY) & (codes != WAIT)
    return idle


def _idle_segments(segments: Segments) -> Segments:
    """The idle segments inside steps, with their positions among all ("segment")."""
    at = np.flatnonzero(_is_idle(segments["cause_code"]) & (segments[STEP_ID] >= 0))
    # Taking positions is about a third faster than a boolean mask per column.
    return {**{column: values.take(at) for column, values in segments.items()}, "segment": at}


def _runs_by_cause(idle: Segments) -> pd.DataFrame:
    """The idle segments as maximal runs of one cause (within a step)."""
    if not len(idle["segment"]):
        return _sorted_runs([])
    # Runs are contiguous and in time order: a run starts at its first segment, ends at its last.
    first, last = label_runs(idle["segment"], idle[STEP_ID], idle["cause_code"])
    # copy=False: the columns are new arrays (taken by position) that nothing else holds.
    return pd.DataFrame(
        {
            STEP_ID: idle[STEP_ID][first],
            START_NS: idle[START_NS][first],
            END_NS: idle[END_NS][last],
            CAUSE: _causes(idle["cause_code"][first]),
        },
        copy=False,
    )


def _sorted_runs(runs: list[pd.DataFrame]) -> pd.DataFrame:
    runs = [r for r in runs if not r.empty]
    if not runs:
        dtypes = {STEP_ID: "int64", START_NS: "int64", END_NS: "int64", CAUSE: "object"}
        return pd.DataFrame({c: pd.Series(dtype=dtypes[c]) for c in _RUN_COLUMNS})
    found = pd.concat(runs, ignore_index=True)[_RUN_COLUMNS]
    return found.sort_values([STEP_ID, START_NS], kind="stable").reset_index(drop=True)


def _thread_segments(
    projected_ops: pd.DataFrame,
    staged_calls: pd.DataFrame,
    steps: pd.DataFrame,
    stage_map: StageMap,
) -> Iterator[Segments]:
    """Per step thread: the elementary segments of its steps, each with its stage and cause."""
    for pid, process_steps in steps.groupby(PID):
        ops = projected_ops[projected_ops[PID] == pid]
        working, waiting = _split_waits(ops)
        owned = _owned_intervals(working)
        waited = _owned_intervals(waiting)
        queued = _queued_intervals(ops)
        columns = [GLOBAL_TID, CALL_CATEGORY, START_NS, END_NS]
        calls = staged_calls.loc[staged_calls[PID] == pid, columns]
        for tid, thread_steps in process_steps.groupby(GLOBAL_TID):
            thread_calls = calls[calls[GLOBAL_TID] == tid]
            thread = stage_map.threads[int(tid)]  # type: ignore[arg-type]
            chunks = _step_chunks(thread_steps, owned[0])
            if len(chunks) == 1:
                # Only the thread's stages near these steps (windows see a few of many steps).
                lo, hi = int(thread_steps[START_NS].min()), int(thread_steps[END_NS].max())
                near = _thread_window(thread, lo, hi)
                yield segments_of(
                    thread_steps, owned, waited, queued, thread_calls, stage_map, near
                )
                continue
            call_index = _IntervalIndex(
                thread_calls[START_NS].to_numpy(), thread_calls[END_NS].to_numpy()
            )
            queued_index = _IntervalIndex(*queued)
            for chunk in chunks:
                # Only what can touch the chunk's window: the segments come out the same.
                lo, hi = int(chunk[START_NS].min()), int(chunk[END_NS].max())
                yield segments_of(
                    chunk,
                    _owned_window(owned, lo, hi),
                    _owned_window(waited, lo, hi),
                    queued_index.crossing(lo, hi),
                    thread_calls.iloc[call_index.touching(lo, hi)],
                    stage_map,
                    _thread_window(thread, lo, hi),
                )


# Bound the ledger's working memory: a thread's steps are cut into chunks of about this many
# busy intervals, each chunk's segments built from the intervals that reach into it.
CHUNK_INTERVALS = 400_000


def _step_chunks(steps: pd.DataFrame, owned_starts: np.ndarray) -> list[pd.DataFrame]:
    """Consecutive runs of a thread's (time-ordered, disjoint) steps, CHUNK_INTERVALS ops each."""
    per_step = np.searchsorted(owned_starts, steps[END_NS].to_numpy()) - np.searchsorted(
        owned_starts, steps[START_NS].to_numpy()
    )
    chunk = np.cumsum(per_step) // CHUNK_INTERVALS
    if len(chunk) == 0 or chunk[-1] == chunk[0]:
        return [steps]
    cuts = np.flatnonzero(np.diff(chunk)) + 1
    return [steps.iloc[a:b] for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(steps)], strict=True)]


def _touches(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    # Either order of start and end, so that even a reversed interval keeps its effect.
    touches: np.ndarray = (np.minimum(starts, ends) < hi) & (np.maximum(starts, ends) > lo)
    return touches


class _IntervalIndex:
    """Intervals sorted once, so that each chunk finds the ones touching it by binary search.

    Sorted by their lower end; the running maximum of their upper end is then sorted too, so
    every interval before the first whose running maximum passes `lo` ends at or before `lo`.
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.original = (starts, ends)
        self.order = np.argsort(np.minimum(starts, ends), kind="stable")
        self.starts, self.ends = starts[self.order], ends[self.order]
        self.lower = np.minimum(self.starts, self.ends)
        self.upper_max = np.maximum.accumulate(np.maximum(self.starts, self.ends))

    def touching(self, lo: int, hi: int) -> np.ndarray:
        """Positions (in the original order, ascending) of the intervals touching [lo, hi)."""
        first = int(np.searchsorted(self.upper_max, lo, side="right"))
        last = int(np.searchsorted(self.lower, hi, side="left"))
        at = first + np.flatnonzero(
            _touches(self.starts[first:last], self.ends[first:last], lo, hi)
        )
        return np.sort(self.order[at])

    def crossing(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The (starts, ends) of the intervals touching [lo, hi), in the original order."""
        at = self.touching(lo, hi)
        return self.original[0][at], self.original[1][at]


def _index_window(starts: np.ndarray, lo: int, hi: int) -> slice:
    """Positions of sorted starts that a lookup of any time in [lo, hi) can land on."""
    first = max(int(np.searchsorted(starts, lo, side="right")) - 1, 0)
    return slice(first, int(np.searchsorted(starts, hi, side="left")))


def _owned_window(
    owned: tuple[np.ndarray, np.ndarray, np.ndarray], lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    at = _index_window(owned[0], lo, hi)  # owned intervals are disjoint and sorted by start
    return owned[0][at], owned[1][at], owned[2][at]


def _thread_window(thread: ThreadStages, lo: int, hi: int) -> ThreadStages:
    steps = _index_window(thread.step_starts, lo, hi)
    levels = [_index_window(starts, lo, hi) for starts in thread.level_starts]
    return ThreadStages(
        step_starts=thread.step_starts[steps],
        step_ends=thread.step_ends[steps],
        level_starts=tuple(a[at] for a, at in zip(thread.level_starts, levels, strict=True)),
        level_ends=tuple(a[at] for a, at in zip(thread.level_ends, levels, strict=True)),
        level_codes=tuple(a[at] for a, at in zip(thread.level_codes, levels, strict=True)),
    )


def _thread_ledger(segments: Segments, idle: Segments) -> tuple[pd.DataFrame, pd.DataFrame]:
    # Sum durations per (step, stage, cause), in key order, instead of a pandas group-by;
    # the segments outside steps (step -1) take the lowest keys and are left out.
    width = len(_CAUSE_LABELS)
    stages = int(segments[STAGE].max(initial=0)) + 1
    key = ((segments[STEP_ID] + 1) * stages + segments[STAGE]) * width + segments["cause_code"]
    unique, durations = _sums_by_key(key, segments[DURATION_NS])
    in_steps = unique >= stages * width
    unique, durations = unique[in_steps] - stages * width, durations[in_steps]
    cause_code = unique % width
    labels = _CAUSE_LABELS
    bucket = np.where(cause_code == WAIT, Bucket.WAIT.value, Bucket.IDLE.value)
    ledger = pd.DataFrame(
        {
            STEP_ID: unique // width // stages,
            STAGE: unique // width % stages,
            BUCKET: np.where(cause_code == BUSY, Bucket.BUSY.value, bucket),
            CAUSE: labels[cause_code],
            DURATION_NS: durations,
        }
    )
    return ledger, _idle_runs(idle, labels)


def _sums_by_key(key: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys, ascending; the sum of values per key), values int64 >= 0.

    A window's keys span a small range (its steps x stages x causes): a bin per key value
    then sums them in one pass, without sorting. Float sums are exact: they stay far below
    2**53 ns. A wide range (a whole trace of many steps) sorts instead.
    """
    if not len(key):
        return key, values[:0]
    low = int(key.min())
    span = int(key.max()) - low + 1
    if span <= 4 * len(key) + 1024:
        counts = np.bincount(key - low, minlength=span)
        present = np.flatnonzero(counts)
        sums = np.bincount(key - low, weights=values, minlength=span)[present]
        return present + low, sums.astype(np.int64)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return ordered[first], np.add.reduceat(values[order], first)


def _idle_runs(idle: Segments, labels: np.ndarray) -> pd.DataFrame:
    if not len(idle["segment"]):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in GAP_COLUMNS})
    # Runs are contiguous and in time order: a run starts at its first segment, ends at its last.
    first, last = label_runs(idle["segment"], idle[STEP_ID], idle[STAGE])
    run = np.repeat(np.arange(len(first)), last - first + 1)
    # Dominant cause: most idle ns in the run; on a tie, the lowest cause code.
    # (Float sums are exact: a run's ns stay far below 2**53.)
    width = len(labels)
    by_cause = np.bincount(
        run * width + idle["cause_code"],
        weights=idle[DURATION_NS],
        minlength=len(first) * width,
    ).reshape(len(first), width)
    return pd.DataFrame(
        {
            STEP_ID: idle[STEP_ID][first],
            STAGE: idle[STAGE][first],
            START_NS: idle[START_NS][first],
            END_NS: idle[END_NS][last],
            CAUSE: _causes(by_cause.argmax(axis=1)),
        },
        copy=False,  # new arrays, as in _runs_by_cause
    )
