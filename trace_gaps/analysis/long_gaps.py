"""Host gaps on the step thread: the short ones between launches, and the long ones apart.

A host gap is time on a step's thread outside every CUDA call: from the end of one call
(or the step's start) to the start of the next call (or the step's end).

    thread  [launch] . [launch] . [cudaGetDeviceProperties] ... 67 ms ... [cuLibraryLoadData]
    gaps            ^short     ^short                     ^long: fopen, fread inside

A stage's launch spacing is the median time from one launch call's end to the next launch
call's start on the thread (in whole µs, over the analysed steps). A gap is long when it is
longer than max(LONG_GAP_FACTOR x the spacing of the stage open where it starts,
LONG_GAP_MIN_NS). Long gaps need their own explanation (the calls around them, the OS calls
inside); only the short ones are launch overhead that a CUDA graph removes.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from trace_gaps.analysis.grouped import is_one_of, summed_by
from trace_gaps.analysis.host import outermost_in_thread, overlaps_with_calls
from trace_gaps.analysis.ledger import CAUSE
from trace_gaps.analysis.stages import STAGE, StageMap, stage_at
from trace_gaps.analysis.steps import STEP_ID, step_rows
from trace_gaps.model import (
    CALL_CATEGORY,
    END_NS,
    GLOBAL_TID,
    LAUNCH_CATEGORIES,
    NAME,
    PID,
    START_NS,
    CallCategory,
)
from trace_gaps.vocabulary import DISPATCH_FACTOR, IdleCause

LONG_GAP_FACTOR = 10  # a long gap is longer than this many times the stage's launch spacing
LONG_GAP_MIN_NS = 1_000_000  # ... and than this
EVEN_FRACTION = "even_fraction"
NO_CALL = ""  # no call before (the step's start) or after (the step's end)

CALL_BEFORE = "call_before"
CALL_AFTER = "call_after"
AFTER_CATEGORY = "after_category"
IDLE_HOST_NS = "idle_host_ns"  # GPU-idle host time inside the gap (the ledger's idle host)
OS_CALLS = "os_calls"  # the outermost OS calls inside, names sorted, ", "-joined
OS_NS = "os_ns"
GAP_US = "gap_us"
LAUNCH_GAP_NS = "launch_gap_ns"
LAUNCHES = "launches"

HOST_GAP_COLUMNS = [
    STEP_ID,
    PID,
    GLOBAL_TID,
    STAGE,
    START_NS,
    END_NS,
    CALL_BEFORE,
    CALL_AFTER,
    AFTER_CATEGORY,
    IDLE_HOST_NS,
    OS_CALLS,
    OS_NS,
]
SPACING_COLUMNS = [PID, STAGE, GAP_US, LAUNCHES]

_LAUNCH = frozenset(c.value for c in LAUNCH_CATEGORIES)


def empty_host_gaps() -> pd.DataFrame:
    """A host-gap frame with no rows (most windows have no long gap: a copy of one built once)."""
    return _empty_host_gaps().copy()


@functools.cache
def _empty_host_gaps() -> pd.DataFrame:
    text = {CALL_BEFORE, CALL_AFTER, AFTER_CATEGORY, OS_CALLS}
    return pd.DataFrame(
        {c: pd.Series(dtype="object" if c in text else "int64") for c in HOST_GAP_COLUMNS}
    )


def find_host_gaps(
    analysed_calls: pd.DataFrame, steps: pd.DataFrame, *, min_ns: int = LONG_GAP_MIN_NS
) -> pd.DataFrame:
    """The host gaps of at least min_ns in the analysed steps, with the calls around them
    (HOST_GAP_COLUMNS but the idle and OS columns): the gaps before each call, then the gaps
    from each step's last return to its end. analysed_calls come from calls_in_analysed_steps.

    Every gap is measured, vectorised; only the long ones get rows (and names), since a
    window holds hundreds of thousands of calls and a handful of long gaps.
    """
    if analysed_calls.empty:
        return empty_host_gaps().drop(columns=[IDLE_HOST_NS, OS_CALLS, OS_NS])
    step_ids = analysed_calls[STEP_ID].to_numpy()
    starts = analysed_calls[START_NS].to_numpy()
    ends = analysed_calls[END_NS].to_numpy()
    # By step, then start; outer calls first when they start together (cudaLaunchKernel
    # around cuLaunchKernel). (On calls in that order already the sort is as fast as a check.)
    order = np.lexsort((-ends, starts, step_ids))
    step_ids, starts, ends = step_ids[order], starts[order], ends[order]
    first = np.r_[True, step_ids[1:] != step_ids[:-1]]
    last = np.r_[step_ids[1:] != step_ids[:-1], True]
    # The call that ended last so far in the step: the one the host returned from.
    latest_end = _running_max(ends, first)
    position = np.arange(len(ends))
    is_latest = ends == latest_end
    latest_call = _running_max(np.where(is_latest, position, -1), first)
    previous_end = np.r_[0, latest_end[:-1]]
    previous_call = np.r_[-1, latest_call[:-1]]
    row = step_rows(steps, step_ids)  # every call's step is among the steps
    step_start = steps[START_NS].to_numpy()[row]
    previous_end = np.where(first, step_start, np.maximum(previous_end, step_start))
    previous_call = np.where(first, -1, previous_call)
    # A call nested in an earlier one (the driver call inside a runtime call) ends no gap:
    # its start is before previous_end, so its gap is negative and never long.
    inner = np.flatnonzero(starts - previous_end >= max(min_ns, 0))
    tail = np.flatnonzero(last)
    step_end = steps[END_NS].to_numpy()[row[tail]]
    long_tail = step_end - latest_end[tail] >= max(min_ns, 0)
    tail, step_end = tail[long_tail], step_end[long_tail]
    # Names and categories only for the rows kept, as text.
    names = _texts(
        analysed_calls[NAME], order, np.r_[inner, previous_call[inner], latest_call[tail]]
    )
    categories = _texts(analysed_calls[CALL_CATEGORY], order, inner)
    called_before = names[len(inner) : 2 * len(inner)]
    before = np.where(previous_call[inner] >= 0, called_before, NO_CALL)
    rows = np.r_[inner, tail]
    kept = order[rows]  # the kept rows' positions in analysed_calls
    stages = analysed_calls[STAGE].to_numpy()[kept]
    return pd.DataFrame(
        {
            STEP_ID: step_ids[rows],
            PID: analysed_calls[PID].to_numpy()[kept],
            GLOBAL_TID: analysed_calls[GLOBAL_TID].to_numpy()[kept],
            # The last gap's stage is found later, from where it starts.
            STAGE: np.r_[stages[: len(inner)], np.full(len(tail), -1, dtype=stages.dtype)],
            START_NS: np.r_[previous_end[inner], latest_end[tail]],
            END_NS: np.r_[starts[inner], step_end],
            CALL_BEFORE: np.r_[before, names[2 * len(inner) :]].astype(object),
            CALL_AFTER: np.r_[names[: len(inner)], np.full(len(tail), NO_CALL, dtype=object)],
            AFTER_CATEGORY: np.r_[categories, np.full(len(tail), NO_CALL, dtype=object)],
        }
    )


def _running_max(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running maximum of int values within each run of rows that `first` starts (one
    accumulate: run k's values are lifted above every earlier run's)."""
    if not len(values):
        return values
    low = int(values.min())
    span = int(values.max()) - low + 1
    run = np.cumsum(first) - 1
    if span * (int(run[-1]) + 1) >= 2**62:  # too wide to lift: a group-by
        return pd.Series(values).groupby(run).cummax().to_numpy()
    lift = run * span - low
    result: np.ndarray = np.maximum.accumulate(values + lift) - lift
    return result


def _texts(column: pd.Series, order: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """column's values as text (an object array) at positions rows of the order; -1 gives ""."""
    picked = order[np.maximum(rows, 0)]
    text = column.take(picked).astype(str).to_numpy(dtype=object)
    return np.where(rows >= 0, text, NO_CALL).astype(object)


def launch_gaps(analysed_calls: pd.DataFrame) -> pd.DataFrame:
    """Per launch call of an analysed step: its pid, stage and step id, and LAUNCH_GAP_NS, the
    host time since the thread's previous launch call in the step returned (the step's first
    launch is left out). A launch call nested in another (the driver call inside
    cudaLaunchKernel) is not a launch of its own."""
    launch = np.flatnonzero(is_one_of(analysed_calls[CALL_CATEGORY], _LAUNCH))
    step_ids, starts, ends = (
        analysed_calls[column].to_numpy()[launch] for column in (STEP_ID, START_NS, END_NS)
    )
    order = np.lexsort((-ends, starts, step_ids))
    step_ids, starts, ends = step_ids[order], starts[order], ends[order]
    first = np.r_[True, step_ids[1:] != step_ids[:-1]] if len(step_ids) else np.ones(0, bool)
    # The latest return among the step's earlier launches (none for its first).
    previous_end = np.r_[0, _running_max(ends, first)[:-1]] if len(ends) else ends
    keep = ~first & (starts >= previous_end)
    at = launch[order[keep]]
    return pd.DataFrame(
        {
            PID: analysed_calls[PID].to_numpy()[at],
            STAGE: analysed_calls[STAGE].to_numpy()[at],
            STEP_ID: step_ids[keep],
            LAUNCH_GAP_NS: starts[keep] - previous_end[keep],
        }
    )


def launch_spacing(analysed_calls: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, stage, whole µs): how many launch calls came that long after the thread's
    previous launch call returned, in the same step (launch_gaps).

    Counts, not gaps, so that windows add up and the median stays exact to the µs.
    """
    gaps = launch_gaps(analysed_calls)
    spaced = gaps[[PID, STAGE]].assign(**{GAP_US: gaps[LAUNCH_GAP_NS].to_numpy() // 1_000})
    return summed_by(spaced, [PID, STAGE, GAP_US], {}, LAUNCHES)[SPACING_COLUMNS]


def explain_host_gaps(
    host_gaps: pd.DataFrame,
    idle_runs: pd.DataFrame,
    os_calls: pd.DataFrame,
    stage_map: StageMap,
    *,
    min_ns: int = LONG_GAP_MIN_NS,
) -> pd.DataFrame:
    """The gaps of at least min_ns, each with its stage (open where it starts), the GPU-idle
    host time inside it, and the OS calls inside it (HOST_GAP_COLUMNS)."""
    gaps = host_gaps[(host_gaps[END_NS] - host_gaps[START_NS]) >= min_ns].reset_index(drop=True)
    if gaps.empty:
        return empty_host_gaps()
    gaps = gaps.assign(
        **{STAGE: stage_at(stage_map, gaps[GLOBAL_TID].to_numpy(), gaps[START_NS].to_numpy())}
    )
    runs = idle_runs[(idle_runs[CAUSE] == IdleCause.HOST.value)]
    runs = runs[runs[STEP_ID].isin(gaps[STEP_ID])]
    # Idle time counts only up to the end of the stage the gap starts in: a stage's long-gap
    # idle time is part of its own idle host time in the ledger.
    in_stage = gaps[[STEP_ID, START_NS]].assign(
        **{END_NS: np.minimum(gaps[END_NS].to_numpy(), _next_stage_boundary(gaps, stage_map))}
    )
    pairs = in_stage.reset_index(names="gap").merge(
        runs[[STEP_ID, START_NS, END_NS]], on=STEP_ID, suffixes=("", "_run")
    )
    inside = np.maximum(
        np.minimum(pairs[END_NS], pairs[f"{END_NS}_run"])
        - np.maximum(pairs[START_NS], pairs[f"{START_NS}_run"]),
        0,
    )
    idle = inside.groupby(pairs["gap"]).sum().reindex(gaps.index, fill_value=0)
    names = pd.Series(NO_CALL, index=gaps.index, dtype=object)
    os_ns = pd.Series(0, index=gaps.index, dtype="int64")
    pieces = []
    for tid, thread_gaps in gaps.groupby(GLOBAL_TID):
        calls = outermost_in_thread(os_calls[os_calls[GLOBAL_TID] == tid])
        if len(calls):
            found = overlaps_with_calls(thread_gaps, calls)
            pieces.append(found.assign(gap=thread_gaps.index.to_numpy()[found["run"].to_numpy()]))
    if pieces:
        found = pd.concat(pieces, ignore_index=True)
        found[NAME] = found[NAME].astype(str)
        os_ns = found.groupby("gap")["duration_ns"].sum().reindex(gaps.index, fill_value=0)
        distinct = found.drop_duplicates(["gap", NAME]).sort_values(["gap", NAME])
        names = distinct.groupby("gap")[NAME].agg(", ".join).reindex(gaps.index, fill_value="")
    return gaps.assign(
        **{IDLE_HOST_NS: idle.astype("int64"), OS_CALLS: names, OS_NS: os_ns.astype("int64")}
    )[HOST_GAP_COLUMNS]


def _next_stage_boundary(gaps: pd.DataFrame, stage_map: StageMap) -> np.ndarray:
    """Per gap: the first step or stage start or end on its thread after the gap's start."""
    tids, starts = gaps[GLOBAL_TID].to_numpy(), gaps[START_NS].to_numpy()
    boundary = np.full(len(gaps), np.iinfo(np.int64).max, dtype=np.int64)
    for tid in np.unique(tids):
        thread = stage_map.threads.get(int(tid))
        if thread is None:
            continue
        edges = np.sort(
            np.concatenate(
                [thread.step_starts, thread.step_ends, *thread.level_starts, *thread.level_ends]
            )
        )
        at = tids == tid
        after = np.searchsorted(edges, starts[at], side="right")
        boundary[at] = np.where(
            after < len(edges), edges[np.minimum(after, len(edges) - 1)], boundary[at]
        )
    return boundary


def spacing_thresholds(spacing: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, stage): the median launch spacing in ns (whole µs), the long-gap threshold,
    and EVEN_FRACTION: the share of the host time in short gaps (below the threshold) that
    lies in gaps within DISPATCH_FACTOR x the median (each gap taken at its µs midpoint)."""
    if spacing.empty:
        frame = pd.DataFrame(
            {c: pd.Series(dtype="int64") for c in [PID, STAGE, "spacing_ns", "threshold_ns"]}
        )
        return frame.assign(**{EVEN_FRACTION: pd.Series(dtype="float64")})
    ordered = spacing.sort_values([PID, STAGE, GAP_US], kind="stable")
    keys = [PID, STAGE]
    running = ordered.groupby(keys)[LAUNCHES].cumsum()
    total = ordered.groupby(keys)[LAUNCHES].transform("sum")
    # The lower median: the first µs value whose running count reaches half the launches.
    at_median = ordered[running * 2 >= total].groupby(keys).head(1)
    spacing_ns = at_median[GAP_US].to_numpy() * 1_000
    thresholds = pd.DataFrame(
        {
            PID: at_median[PID].to_numpy(),
            STAGE: at_median[STAGE].to_numpy(),
            "spacing_ns": spacing_ns,
            "threshold_ns": np.maximum(spacing_ns * LONG_GAP_FACTOR, LONG_GAP_MIN_NS),
        }
    )
    # How evenly the short gaps' host time is spread: per-op dispatch fills every gap alike.
    joined = ordered.merge(thresholds, on=keys, how="left")
    gap_ns = joined[GAP_US].to_numpy() * 1_000 + 500
    time_ns = gap_ns * joined[LAUNCHES].to_numpy()
    short = gap_ns < joined["threshold_ns"].to_numpy()
    even = short & (gap_ns <= DISPATCH_FACTOR * np.maximum(joined["spacing_ns"].to_numpy(), 1_000))
    sums = (
        pd.DataFrame(
            {
                PID: joined[PID].to_numpy(),
                STAGE: joined[STAGE].to_numpy(),
                "short": np.where(short, time_ns, 0),
                "even": np.where(even, time_ns, 0),
            }
        )
        .groupby(keys, sort=False)[["short", "even"]]
        .sum()
    )
    fraction = (sums["even"] / sums["short"].where(sums["short"] > 0)).fillna(1.0)
    found = fraction.reindex(pd.MultiIndex.from_frame(thresholds[keys])).to_numpy()
    return thresholds.assign(**{EVEN_FRACTION: found})


def select_long_gaps(candidates: pd.DataFrame, thresholds: pd.DataFrame) -> pd.DataFrame:
    """The long gaps among explain_host_gaps rows: longer than their stage's threshold,
    max(LONG_GAP_FACTOR x spacing, LONG_GAP_MIN_NS); a stage without launches has the floor."""
    joined = candidates.merge(thresholds, on=[PID, STAGE], how="left")
    threshold = joined["threshold_ns"].fillna(LONG_GAP_MIN_NS).to_numpy()
    duration = (joined[END_NS] - joined[START_NS]).to_numpy()
    return joined[duration > threshold].reset_index(drop=True)


PATTERN = [PID, STAGE, CALL_BEFORE, CALL_AFTER, OS_CALLS]


def group_long_gaps(long_gaps: pd.DataFrame) -> pd.DataFrame:
    """Per pattern (PATTERN columns): count, total and idle ns, median and longest length, the
    longest gap's thread and start, and whether the call after loads code; largest first."""
    gaps = long_gaps.assign(duration=long_gaps[END_NS] - long_gaps[START_NS])
    gaps = gaps.sort_values(["duration", START_NS], ascending=[False, True], kind="stable")
    grouped = gaps.groupby(PATTERN, sort=False).agg(
        count=("duration", "size"),
        total_ns=("duration", "sum"),
        idle_ns=(IDLE_HOST_NS, "sum"),
        os_ns=(OS_NS, "sum"),
        typical_ns=("duration", "median"),
        longest_ns=("duration", "first"),
        longest_tid=(GLOBAL_TID, "first"),
        longest_start_ns=(START_NS, "first"),
        after_category=(AFTER_CATEGORY, "first"),
    )
    grouped = grouped.reset_index().assign(
        ends_in_code_load=lambda f: f["after_category"] == CallCategory.MODULE_LOAD.value
    )
    return grouped.sort_values(
        ["idle_ns", "total_ns", CALL_AFTER], ascending=[False, False, True], kind="stable"
    ).reset_index(drop=True)
