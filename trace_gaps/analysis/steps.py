"""Cut each thread's steps from the step range, and mark the warm-up steps to skip.

Which range is the step is analysis/step_choice.py's question."""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.families import phase_of
from trace_gaps.analysis.ranges import DEPTH, PARENT, RAW_NAME
from trace_gaps.analysis.step_choice import StepSelection
from trace_gaps.model import (
    CALL_CATEGORY,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    CallCategory,
)
from trace_gaps.records.report import SkipReason

STEP_ID = "step_id"
STEP_INDEX = "index"  # position of the step among its thread's steps, from 0
IS_WARMUP = "is_warmup"
SKIP_REASON = "skip_reason"  # a SkipReason code
RANGE_ROW = "range_row"  # the step's row in the range tree; -1 for a whole-process step
LOADS = "loads"  # code loads (MODULE_LOAD calls) of the process during the step; -1: not read
WARMUP_RULE = "warmup_rule"  # per thread: loads | steady_loads | length_only | skip
STEP_KIND = "kind"  # the step's phase word (PREFILL, DECODE, ...), "" when it has none

WARMUP_LENGTH_FACTOR = 3
STEADY_LOAD_FRACTION = 0.5  # loads in more than this share of steps are steady state
MIN_ANALYSED_FRACTION = 0.5  # the default rule analyses at least this share of each thread

STEP_COLUMNS = [
    STEP_ID,
    PID,
    GLOBAL_TID,
    STEP_INDEX,
    START_NS,
    END_NS,
    IS_WARMUP,
    SKIP_REASON,
    RANGE_ROW,
    LOADS,
    WARMUP_RULE,
    STEP_KIND,
]


def cut_steps(range_tree: pd.DataFrame, selection: StepSelection) -> pd.DataFrame:
    """Return the step instances, one row each, disjoint on each thread, in time order.

    A step nested inside another instance of the same range, or overlapping the previous
    step on its thread, is dropped (the outer/earlier one is kept). Cycle steps run from
    one instance to the next on the thread; the last ends where the last top-level range
    after it ends.
    """
    if selection.name is None:
        return _empty_steps()
    is_step = range_tree[RAW_NAME].isin(selection.members).to_numpy()
    if selection.cycle:
        is_step = is_step & (range_tree[DEPTH].to_numpy() == 0)
    steps = range_tree.loc[is_step, [PID, GLOBAL_TID, START_NS, END_NS]]
    steps = steps.assign(**{RANGE_ROW: steps.index.to_numpy()})
    steps = steps.sort_values([GLOBAL_TID, START_NS], kind="stable")
    if selection.cycle:
        steps = _cycles(range_tree, steps)
    prior_end = steps.groupby(GLOBAL_TID)[END_NS].transform(lambda e: e.cummax().shift())
    steps = steps[~(steps[START_NS] < prior_end)]
    numbered = _number_steps(steps)
    return numbered.assign(**{STEP_KIND: step_kinds(range_tree, numbered, selection)})


def _cycles(range_tree: pd.DataFrame, starts: pd.DataFrame) -> pd.DataFrame:
    """Each start range to the next on its thread; the last to its thread's last top-level
    range's end. RANGE_ROW is -1: the stages are the top-level ranges inside the cycle."""
    top = range_tree[range_tree[DEPTH] == 0]
    last_end = top.groupby(GLOBAL_TID)[END_NS].max()
    tids = starts[GLOBAL_TID].to_numpy()  # sorted by (thread, start)
    begins = starts[START_NS].to_numpy()
    # In integers (a float NaN would round epoch-ns times): the next start on the same thread,
    # else the thread's last top-level end.
    ends = last_end.reindex(tids).to_numpy(dtype=np.int64).copy()
    same_thread = np.flatnonzero(tids[1:] == tids[:-1])
    ends[same_thread] = begins[same_thread + 1]
    ends = np.maximum(ends, starts[END_NS].to_numpy())
    return starts.assign(**{END_NS: ends, RANGE_ROW: -1})


def step_kinds(
    range_tree: pd.DataFrame, steps: pd.DataFrame, selection: StepSelection
) -> np.ndarray:
    """Per step, its kind: the phase word of its own name, else of the first range directly
    inside it that has one (SGLang's forward_extend / forward_decode), else "".

    Steps are analysed per kind only where they come in several (kinds.of_one_kind)."""
    kinds = np.full(len(steps), "", dtype=object)
    if steps.empty:
        return kinds
    codes, families = pd.factorize(range_tree[NAME], use_na_sentinel=False)
    phases = np.array([phase_of(str(f)) for f in families], dtype=object)
    phase = phases[codes] if len(codes) else np.array([], dtype=object)
    rows = steps[RANGE_ROW].to_numpy()
    nested = rows >= 0
    kinds[nested] = phase[rows[nested]]
    # From the ranges inside: children of a nested step, top-level ranges inside a cycle.
    inside = (phase != "") & (
        np.isin(range_tree[PARENT].to_numpy(), rows[nested])
        | (selection.cycle & (range_tree[DEPTH].to_numpy() == 0))
    )
    found = range_tree.loc[inside, [GLOBAL_TID, START_NS]].assign(phase=phase[inside])
    ids = step_at(steps, found[GLOBAL_TID].to_numpy(), found[START_NS].to_numpy())
    first = pd.Series(found["phase"].to_numpy()[ids >= 0]).groupby(ids[ids >= 0]).first()
    unnamed = kinds == ""
    by_row = step_rows(steps, first.index.to_numpy())
    from_inside = np.full(len(steps), "", dtype=object)
    from_inside[by_row] = first.to_numpy()
    kinds[unnamed] = from_inside[unnamed]
    return kinds


def whole_process_steps(gpu_ops: pd.DataFrame, api_calls: pd.DataFrame) -> pd.DataFrame:
    """One step per process spanning its GPU ops and their launches (no usable NVTX step).

    The step's thread is the thread that made the most launch calls in that process.
    """
    spans = pd.concat([gpu_ops[[PID, START_NS, END_NS]], api_calls[[PID, START_NS, END_NS]]])
    windows = spans.groupby(PID).agg(start_ns=(START_NS, "min"), end_ns=(END_NS, "max"))
    windows = windows.loc[windows.index.isin(gpu_ops[PID].unique())]
    launches = api_calls.loc[api_calls[CALL_CATEGORY].str.startswith("launch"), [PID, GLOBAL_TID]]
    busiest = launches.groupby([PID, GLOBAL_TID]).size().rename("n").reset_index()
    busiest = busiest.sort_values(["n", GLOBAL_TID], ascending=[False, True]).drop_duplicates(PID)
    steps = windows.reset_index().merge(busiest[[PID, GLOBAL_TID]], on=PID, how="left")
    # A process with GPU ops but no launch call at all: charge idle time to its pid's main thread.
    main_tid = steps[PID] * (1 << 24) + steps[PID]
    steps[GLOBAL_TID] = steps[GLOBAL_TID].fillna(main_tid).astype("int64")
    return _number_steps(steps[[PID, GLOBAL_TID, START_NS, END_NS]].assign(**{RANGE_ROW: -1}))


def _number_steps(steps: pd.DataFrame) -> pd.DataFrame:
    steps = steps.sort_values([PID, GLOBAL_TID, START_NS], kind="stable").reset_index(drop=True)
    steps[STEP_ID] = np.arange(len(steps), dtype=np.int64)
    steps[STEP_INDEX] = steps.groupby(GLOBAL_TID).cumcount().astype("int64")
    steps[IS_WARMUP] = False
    steps[SKIP_REASON] = SkipReason.ANALYSED.value
    steps[LOADS] = np.int64(-1)
    steps[WARMUP_RULE] = ""
    steps[STEP_KIND] = ""
    return steps[STEP_COLUMNS]


def _empty_steps() -> pd.DataFrame:
    columns = (PID, GLOBAL_TID, START_NS, END_NS, RANGE_ROW)
    return _number_steps(pd.DataFrame({c: pd.Series(dtype="int64") for c in columns}))


def mark_warmup(
    steps: pd.DataFrame,
    api_calls: pd.DataFrame,
    *,
    skip: int | None,
    known_until_ns: int | None = None,
    empty: np.ndarray | None = None,
) -> pd.DataFrame:
    """Mark the warm-up steps of each thread, and record which rule decided (WARMUP_RULE).

    With skip=N exactly the first N steps of each thread are warm-up. Otherwise warm-up is
    the leading run of steps unlike the steady state: steps that load code (MODULE_LOAD
    calls of the process during the step) or last more than WARMUP_LENGTH_FACTOR x the
    thread's median step. Two guards keep the rule from emptying an analysis:

    - loads in more than STEADY_LOAD_FRACTION of a thread's steps are steady state, not
      warm-up: only the length rule applies there (rule "steady_loads");
    - when the rule would leave fewer than MIN_ANALYSED_FRACTION of a thread's steps, only
      the leading steps the length rule finds are skipped (rule "length_only").

    api_calls holds the load calls up to known_until_ns (None: all of them); the share of
    steps with loads is judged on the steps that end by then. LOADS counts each step's
    loads (-1 where not read). empty: the steps with no range inside (empty_steps), left out
    of the median the length rule compares with.
    """
    if steps.empty:
        return steps  # cut_steps gave it the LOADS and WARMUP_RULE columns already
    if skip is not None:
        is_warmup = steps[STEP_INDEX].to_numpy() < skip
        reasons = np.where(is_warmup, SkipReason.GIVEN_SKIP.value, SkipReason.ANALYSED.value)
        return steps.assign(
            **{
                IS_WARMUP: is_warmup,
                SKIP_REASON: reasons,
                LOADS: np.full(len(steps), -1, dtype=np.int64),
                WARMUP_RULE: np.full(len(steps), "skip", dtype=object),
            }
        )
    tids = warmup_groups(steps)
    loads = count_calls_in_steps(steps, api_calls, CallCategory.MODULE_LOAD)
    known = (
        np.ones(len(steps), dtype=bool)
        if known_until_ns is None
        else steps[END_NS].to_numpy() <= known_until_ns
    )
    loads = np.where(known, loads, -1)
    is_long = long_steps(steps, empty)
    loading = pd.Series(np.where(known, loads > 0, np.nan)).groupby(tids).transform("mean")
    steady = loading.to_numpy() > STEADY_LOAD_FRACTION
    looks_warm = ((loads > 0) & ~steady) | is_long
    is_warmup = _leading_run(looks_warm, tids)
    thread = pd.Series(is_warmup).groupby(tids)
    too_many = (
        thread.transform("sum") > (1 - MIN_ANALYSED_FRACTION) * thread.transform("size")
    ).to_numpy()
    is_warmup = np.where(too_many, _leading_run(is_long, tids), is_warmup)
    rule = np.select([too_many, steady], ["length_only", "steady_loads"], "loads")
    reasons = np.where(
        is_warmup,
        np.where(
            (loads > 0) & (rule == "loads"),
            SkipReason.LOADS_MODULES.value,
            SkipReason.LONGER_THAN_MEDIAN.value,
        ),
        SkipReason.ANALYSED.value,
    )
    return steps.assign(
        **{IS_WARMUP: is_warmup, SKIP_REASON: reasons, LOADS: loads, WARMUP_RULE: rule}
    )


def long_steps(steps: pd.DataFrame, empty: np.ndarray | None = None) -> np.ndarray:
    """Steps longer than WARMUP_LENGTH_FACTOR x their thread's median step.

    empty: the steps with no range inside them (empty_steps); the median is of the others
    where a thread has any. Empty step ranges after the loop can outnumber the real steps
    (20 of 1 ms after 19 of 12 ms made the median 1 ms and every real step "warm-up"):
    they are not the steady state of a loop whose steps hold stages."""
    groups = warmup_groups(steps)
    wall = pd.Series((steps[END_NS] - steps[START_NS]).to_numpy())
    median = wall.groupby(groups).transform("median").to_numpy()
    if empty is not None and empty.any():
        of_full = wall.where(~empty).groupby(groups).transform("median").to_numpy()
        median = np.where(np.isnan(of_full), median, of_full)
    is_long: np.ndarray = wall.to_numpy() > WARMUP_LENGTH_FACTOR * median
    return is_long


def empty_steps(range_tree: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Per step, whether its range holds no other range (no stage). A cycle step (no range
    of its own) is never empty."""
    rows = steps[RANGE_ROW].to_numpy()
    parents = range_tree[PARENT].to_numpy()
    empty: np.ndarray = (rows >= 0) & ~np.isin(rows, parents)
    return empty


def leading_outliers(steps: pd.DataFrame) -> np.ndarray:
    """Per thread, the leading run of long_steps: what a --skip should drop."""
    return _leading_run(long_steps(steps), warmup_groups(steps))


def warmup_groups(steps: pd.DataFrame) -> np.ndarray:
    """The groups warm-up is judged in: a thread's steps of one kind (a prefill step is
    long next to decode steps, and each kind loads its own code first)."""
    tids = steps[GLOBAL_TID].to_numpy()
    kinds = steps[STEP_KIND].to_numpy()
    if len(kinds) == 0 or (kinds == kinds[0]).all():
        return tids
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays([tids, kinds]))
    return codes


def _leading_run(flags: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """Per thread (rows in step order), the flagged rows before the first unflagged one."""
    ended = pd.Series(~flags).groupby(tids).cummax().to_numpy()
    run: np.ndarray = flags & ~ended
    return run


def suggest_skip(steps: pd.DataFrame) -> int:
    """A --skip that leaves every thread's steady steps: its leading outliers by length."""
    if steps.empty:
        return 0
    outliers = pd.Series(leading_outliers(steps)).groupby(warmup_groups(steps)).sum()
    return int(outliers.max())


def count_calls_in_steps(
    steps: pd.DataFrame, api_calls: pd.DataFrame, category: CallCategory
) -> np.ndarray:
    """Per step, how many calls of a category any thread of its process started in it."""
    counts = np.zeros(len(steps), dtype=np.int64)
    calls = api_calls.loc[api_calls[CALL_CATEGORY] == category.value, [PID, START_NS]]
    for pid, call_group in calls.groupby(PID):
        at = np.flatnonzero(steps[PID].to_numpy() == pid)
        starts = np.sort(call_group[START_NS].to_numpy())
        lo = np.searchsorted(starts, steps[START_NS].to_numpy()[at], side="left")
        hi = np.searchsorted(starts, steps[END_NS].to_numpy()[at], side="right")
        counts[at] = hi - lo
    return counts


def thread_positions(global_tids: np.ndarray) -> dict[int, np.ndarray]:
    """For each thread, the positions of its rows (ascending), from one stable sort of
    the threads' codes (a hash of the ids first: a window's rows come from a few threads,
    and a stable sort of 16-bit codes is a radix sort)."""
    if len(global_tids) == 0:
        return {}
    if global_tids.min() == global_tids.max():  # one thread (the common case): no hash
        return {int(global_tids[0]): np.arange(len(global_tids))}
    codes, tids = pd.factorize(global_tids)
    if len(tids) == 1:
        return {int(tids[0]): np.arange(len(global_tids))}
    order = np.argsort(codes.astype(np.int16) if len(tids) < 2**15 else codes, kind="stable")
    ordered = codes[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    firsts = np.r_[0, cuts]
    return {
        int(tids[ordered[first]]): positions
        for first, positions in zip(firsts, np.split(order, cuts), strict=True)
    }


def step_rows(steps: pd.DataFrame, step_ids: np.ndarray) -> np.ndarray:
    """Per step id, the position of its row in steps, or -1 where steps has none (a
    lookup by binary search, where a merge on the id would copy frames)."""
    ids = steps[STEP_ID].to_numpy()
    if not len(ids):
        return np.full(len(step_ids), -1, dtype=np.int64)
    if len(step_ids) > 1 and (step_ids[1:] >= step_ids[:-1]).all():
        # Sorted (a window's rows by step): one search per distinct id, then repeated.
        runs = np.flatnonzero(np.r_[True, step_ids[1:] != step_ids[:-1]])
        found = _searched(ids, step_ids[runs])
        repeated: np.ndarray = np.repeat(found, np.diff(np.r_[runs, len(step_ids)]))
        return repeated
    return _searched(ids, step_ids)


def _searched(ids: np.ndarray, step_ids: np.ndarray) -> np.ndarray:
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    at = np.minimum(np.searchsorted(ordered, step_ids), len(ids) - 1)
    rows: np.ndarray = np.where(ordered[at] == step_ids, order[at], -1)
    return rows


def step_at(steps: pd.DataFrame, global_tids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The step id open on each (thread, time), or -1 outside every step."""
    step_tids = steps[GLOBAL_TID].to_numpy()
    if len(step_tids) and len(global_tids) and step_tids.min() == step_tids.max():
        # One thread with steps (the common case): no group-by, and when every row is
        # on it, no gathering of the rows' times either.
        tid = step_tids[0]
        if global_tids.min() == global_tids.max() == tid:
            return _step_at(steps, times)
        found = np.full(len(times), -1, dtype=np.int64)
        at = np.flatnonzero(global_tids == tid)
        found[at] = _step_at(steps, times[at])
        return found
    found = np.full(len(times), -1, dtype=np.int64)
    positions = thread_positions(global_tids)
    for tid, thread_steps in steps.groupby(GLOBAL_TID):
        on_thread = positions.get(cast(int, tid))
        if on_thread is not None:
            found[on_thread] = _step_at(thread_steps, times[on_thread])
    return found


def _step_at(thread_steps: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """step_at for the rows of one thread and its steps (disjoint, in start order)."""
    pos = np.searchsorted(thread_steps[START_NS].to_numpy(), times, side="right") - 1
    inside = (pos >= 0) & (times < thread_steps[END_NS].to_numpy()[np.maximum(pos, 0)])
    ids: np.ndarray = np.where(inside, thread_steps[STEP_ID].to_numpy()[np.maximum(pos, 0)], -1)
    return ids
