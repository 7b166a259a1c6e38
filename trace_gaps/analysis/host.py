"""What the step thread was blocked in during GPU idle `host` time (OS runtime calls).

`host` idle time is time in no CUDA call. With --trace=osrt the export records the thread's
OS calls (pthread_cond_wait, poll, read, ...): host time spent inside them is the thread
waiting — for another thread, process or rank — not computing.

    thread   [launch]  host ......................... [launch]
    osrt               [pthread_cond_wait .........]
    GPU    [k]                idle                       [k]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.grouped import summed_by
from trace_gaps.analysis.ledger import CAUSE
from trace_gaps.analysis.stages import STAGE, StageMap, stage_at
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, step_rows
from trace_gaps.intervals import outermost, overlaps
from trace_gaps.model import END_NS, GLOBAL_TID, NAME, START_NS
from trace_gaps.vocabulary import IdleCause

BLOCKED_COLUMNS = [STEP_ID, STAGE, NAME, "duration_ns"]


def find_blocked_host_time(
    steps: pd.DataFrame, idle_runs: pd.DataFrame, stage_map: StageMap, os_calls: pd.DataFrame
) -> pd.DataFrame:
    """Per (analysed step, stage, OS call name): idle host ns spent inside that OS call.

    The stage is the one open on the step thread where each overlap starts. Nested OS
    calls count once, for the outermost.
    """
    steps = steps[~steps[IS_WARMUP]]
    if os_calls.empty or steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in BLOCKED_COLUMNS})
    # The host runs of analysed steps, each with its step's thread (a window holds hundreds
    # of thousands of runs: selected as arrays, the host ones first, steps found by search).
    host = np.flatnonzero((idle_runs[CAUSE] == IdleCause.HOST.value).to_numpy())
    row = step_rows(steps, idle_runs[STEP_ID].to_numpy()[host])
    analysed = row >= 0
    at = host[analysed]
    run_tids = steps[GLOBAL_TID].to_numpy()[row[analysed]]
    columns = (STEP_ID, START_NS, END_NS)
    run_columns = {column: idle_runs[column].to_numpy()[at] for column in columns}
    pieces = []
    for tid in np.sort(pd.unique(run_tids)):
        calls = outermost_in_thread(os_calls[os_calls[GLOBAL_TID] == tid])
        if calls.empty:
            continue
        mine = run_tids == tid
        thread_runs = pd.DataFrame({c: v[mine] for c, v in run_columns.items()}, copy=False)
        pieces.append(overlaps_with_calls(thread_runs, calls).assign(**{GLOBAL_TID: tid}))
    if not pieces:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in BLOCKED_COLUMNS})
    overlaps = _cut_at_stages(pd.concat(pieces, ignore_index=True), stage_map)
    overlaps[STAGE] = stage_at(
        stage_map, overlaps[GLOBAL_TID].to_numpy(), overlaps[START_NS].to_numpy()
    )
    durations = {"duration_ns": overlaps["duration_ns"].to_numpy()}
    return summed_by(overlaps, [STEP_ID, STAGE, NAME], durations, None)[BLOCKED_COLUMNS]


def outermost_calls(os_calls: pd.DataFrame) -> pd.DataFrame:
    """Per thread, the OS calls that find_blocked_host_time counts (the outermost: none
    overlaps an earlier one of its thread), threads in order, each sorted by start.

    Choosing them once for the whole trace and passing only those near a window's steps
    gives find_blocked_host_time the same result: choosing again keeps them all.
    """
    if os_calls.empty:
        return os_calls
    parts = [outermost_in_thread(c) for _, c in os_calls.groupby(GLOBAL_TID, sort=True)]
    return pd.concat(parts, ignore_index=True)


@dataclass(frozen=True, slots=True)
class OsCallIndex:
    """A trace's outermost OS calls (outermost_calls), sorted by start over all threads, so
    that a window finds those overlapping its steps by binary search, not by a pass over all
    of them (an export traced with --trace=osrt can hold millions)."""

    calls: pd.DataFrame
    starts: np.ndarray
    reach: np.ndarray  # the latest end among the calls up to each (sorted: a running max)

    @classmethod
    def of(cls, outermost: pd.DataFrame) -> OsCallIndex:
        """outermost: outermost_calls(os_calls)."""
        calls = outermost.sort_values(START_NS, kind="stable").reset_index(drop=True)
        ends = calls[END_NS].to_numpy()
        reach = np.maximum.accumulate(ends) if len(ends) else ends
        return cls(calls, calls[START_NS].to_numpy(), reach)

    def near_steps(self, steps: pd.DataFrame) -> pd.DataFrame:
        """The calls overlapping the span of these steps: only they can overlap the steps'
        idle time or host gaps."""
        if steps.empty:
            return self.calls.iloc[:0]
        return self.overlapping(int(steps[START_NS].min()), int(steps[END_NS].max()))

    def overlapping(self, lo: int, hi: int) -> pd.DataFrame:
        """The calls that overlap [lo, hi) (start < hi, end > lo), in start order.

        find_blocked_host_time and long_gaps.explain_host_gaps take them per thread, in
        start order, so they give the same result on these as on every call."""
        first = int(np.searchsorted(self.reach, lo, side="right"))
        last = int(np.searchsorted(self.starts, hi, side="left"))
        near = self.calls.iloc[first:last]
        return near[near[END_NS].to_numpy() > lo]


@dataclass(frozen=True, slots=True)
class HeldOsCalls:
    """A window's OS calls, taken from those of a trace read whole (RowSources.os_calls_near
    returns one; nsys/os_calls.py's OsCallWindow reads them instead)."""

    calls: pd.DataFrame

    def __call__(self) -> pd.DataFrame:
        return self.calls


def held_os_calls(os_calls: pd.DataFrame) -> Callable[[int, int, np.ndarray], HeldOsCalls]:
    """RowSources.os_calls_near over a trace's OS calls: the outermost are chosen once, and
    a window whose steps span [lo, hi) gets those of its threads that overlap it."""
    index = OsCallIndex.of(outermost_calls(os_calls))

    def near(lo: int, hi: int, tids: np.ndarray) -> HeldOsCalls:
        calls = index.overlapping(lo, hi)
        return HeldOsCalls(calls[np.isin(calls[GLOBAL_TID].to_numpy(), tids)])

    return near


def outermost_in_thread(calls: pd.DataFrame) -> pd.DataFrame:
    """One thread's calls not nested in an earlier one (nested OS calls count once)."""
    calls = calls.sort_values([START_NS, END_NS], ascending=[True, False], kind="stable")
    return calls[outermost(calls[START_NS].to_numpy(), calls[END_NS].to_numpy())]


def _cut_at_stages(overlaps: pd.DataFrame, stage_map: StageMap) -> pd.DataFrame:
    """The overlaps cut where a stage of their thread starts or ends, so that each piece is
    charged to the stage open over it (a host run can span stages: a worker thread's
    ranges nested in the step thread's stage, stages.map_stages)."""
    parts = []
    for tid, rows in overlaps.groupby(GLOBAL_TID, sort=True):
        thread = stage_map.threads.get(int(cast(int, tid)))
        edges = (
            np.unique(np.concatenate([*thread.level_starts, *thread.level_ends]))
            if thread is not None and thread.level_starts
            else np.zeros(0, dtype=np.int64)
        )
        lo = rows[START_NS].to_numpy(dtype=np.int64)
        hi = lo + rows["duration_ns"].to_numpy(dtype=np.int64)
        first = np.searchsorted(edges, lo, side="right")
        inner = np.maximum(np.searchsorted(edges, hi, side="left") - first, 0)
        count = inner + 1
        at = np.repeat(np.arange(len(rows)), count)
        k = np.arange(len(at)) - np.repeat(np.cumsum(count) - count, count)
        padded = np.r_[edges, 0]
        cut = first[at] + k
        piece_lo = np.where(k > 0, padded[np.maximum(cut - 1, 0)], lo[at])
        piece_hi = np.where(k < inner[at], padded[np.minimum(cut, len(edges))], hi[at])
        part = rows.iloc[at].reset_index(drop=True)
        part[START_NS] = piece_lo
        part["duration_ns"] = piece_hi - piece_lo
        parts.append(part[part["duration_ns"] > 0])
    return pd.concat(parts, ignore_index=True) if parts else overlaps


def overlaps_with_calls(runs: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Every (run, call) overlap: calls are disjoint and sorted (intervals.overlaps).

    The "run" column is the position of the overlap's run in runs.
    """
    run, call, start, end = overlaps(
        runs[START_NS].to_numpy(),
        runs[END_NS].to_numpy(),
        calls[START_NS].to_numpy(),
        calls[END_NS].to_numpy(),
    )
    return pd.DataFrame(
        {
            STEP_ID: runs[STEP_ID].to_numpy()[run],
            START_NS: start,
            "duration_ns": end - start,
            NAME: calls[NAME].to_numpy()[call],
            "run": run,
        }
    )
