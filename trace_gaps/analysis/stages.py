"""Stages: the NVTX ranges inside each step, and the stage open on a thread at any time.

This is nsys's "NVTX GPU projection" rule: a GPU op belongs to the stage that was open on
the launching thread when its launching call started (the call found by its correlation
id through launch_index.LaunchIndex).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.launch_index import LaunchIndex
from trace_gaps.analysis.ranges import DEPTH, PARENT
from trace_gaps.analysis.steps import RANGE_ROW, thread_positions
from trace_gaps.model import CALL_CATEGORY, CORRELATION_ID, END_NS, GLOBAL_TID, NAME, PID, START_NS
from trace_gaps.vocabulary import (
    BETWEEN_STEPS,
    NO_LAUNCH_CALL,
    NO_STAGE,
    OTHER_THREAD,
    SPECIAL_STAGES,
)


@dataclass(frozen=True, slots=True)
class ThreadStages:
    """One thread's steps and stage ranges, sorted and disjoint level by level."""

    step_starts: np.ndarray
    step_ends: np.ndarray
    level_starts: tuple[np.ndarray, ...]  # level 0 = stages directly in the step
    level_ends: tuple[np.ndarray, ...]
    level_codes: tuple[np.ndarray, ...]


@dataclass(frozen=True, slots=True)
class StageMap:
    """Stage names (code -> name) and, per step thread, where each stage is open."""

    names: tuple[str, ...]
    threads: dict[int, ThreadStages]

    def code(self, name: str) -> int:
        """The code of a stage name."""
        return self.names.index(name)


def map_stages(
    range_tree: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    depth: int = 1,
    borrowed: dict[int, int] | None = None,
) -> StageMap:
    """Collect the stage ranges of every step (warm-up steps too) on each step thread.

    depth=1 takes the ranges directly inside the step; depth=2 also their children, named
    "parent/child", with time in the parent outside its children left to the parent.
    borrowed (threads.borrowed_threads): a launching thread's own top-level ranges inside
    its step thread's steps are a level below the step thread's stages, named
    "stage/range" after the step thread's stage open when the range starts, so that its
    launches (and the time they take) belong to them.
    """
    levels = _stage_levels(range_tree, steps, depth=depth)
    if borrowed:
        levels.append(_lender_level(range_tree, steps, levels[0], borrowed))
    names = list(SPECIAL_STAGES)
    for level in levels:
        names.extend(sorted(set(level["label"]) - set(names)))
    codes = {name: code for code, name in enumerate(names)}
    threads: dict[int, ThreadStages] = {}
    for tid, thread_steps in steps.groupby(GLOBAL_TID):
        per_level = [level[level[GLOBAL_TID] == tid].sort_values(START_NS) for level in levels]
        threads[cast(int, tid)] = ThreadStages(
            step_starts=thread_steps[START_NS].to_numpy(),
            step_ends=thread_steps[END_NS].to_numpy(),
            level_starts=tuple(frame[START_NS].to_numpy() for frame in per_level),
            level_ends=tuple(frame[END_NS].to_numpy() for frame in per_level),
            level_codes=tuple(
                frame["label"].map(codes).to_numpy(dtype=np.int64) for frame in per_level
            ),
        )
    return StageMap(names=tuple(names), threads=threads)


USER_NAME_MARK = " (NVTX range)"  # appended to a range named like a special stage


def user_labels(names: pd.Series) -> pd.Series:
    """Range names as stage labels, a name equal to a special stage's marked as the user's:
    an NVTX range named "(no stage)" must not merge with the real "(no stage)" bucket."""
    clash = names.isin(SPECIAL_STAGES)
    return names.where(~clash, names.astype(str) + USER_NAME_MARK)


def _stage_levels(
    range_tree: pd.DataFrame, steps: pd.DataFrame, *, depth: int
) -> list[pd.DataFrame]:
    nested_steps = steps[steps[RANGE_ROW] >= 0]
    # Level 1: children of step rows; for whole-process steps, top-level ranges inside the window.
    first = range_tree[range_tree[PARENT].isin(nested_steps[RANGE_ROW])]
    whole = steps[steps[RANGE_ROW] < 0]
    if not whole.empty:
        top = range_tree[(range_tree[DEPTH] == 0) & range_tree[GLOBAL_TID].isin(whole[GLOBAL_TID])]
        first = pd.concat([first, top])
    first = first.assign(label=user_labels(first[NAME]))
    levels = [first]
    for _ in range(1, depth):
        above = levels[-1]
        below = range_tree[range_tree[PARENT].isin(above.index)]
        labels = above["label"].reindex(below[PARENT].to_numpy()).to_numpy()
        levels.append(
            below.assign(label=[f"{a}/{b}" for a, b in zip(labels, below[NAME], strict=True)])
        )
    return [level[[GLOBAL_TID, START_NS, END_NS, "label"]] for level in levels]


def _lender_level(
    range_tree: pd.DataFrame,
    steps: pd.DataFrame,
    first: pd.DataFrame,
    borrowed: dict[int, int],
) -> pd.DataFrame:
    """The launching threads' top-level ranges inside their step threads' steps, as ranges
    of the step thread, labelled "stage/range" (the step thread's stage open at the range's
    start; the range's name alone where none is)."""
    parts = []
    for lender, step_tid in sorted(borrowed.items()):
        own = range_tree[(range_tree[GLOBAL_TID] == lender) & (range_tree[DEPTH] == 0)]
        own = own[own[END_NS].notna()].sort_values(START_NS, kind="stable")
        thread_steps = steps[steps[GLOBAL_TID] == step_tid].sort_values(START_NS)
        if own.empty or thread_steps.empty:
            continue
        starts = own[START_NS].to_numpy(dtype=np.int64)
        ends = own[END_NS].to_numpy(dtype=np.int64)
        s_starts = thread_steps[START_NS].to_numpy(dtype=np.int64)
        s_ends = thread_steps[END_NS].to_numpy(dtype=np.int64)
        at = np.searchsorted(s_starts, starts, side="right") - 1
        inside = (at >= 0) & (ends <= s_ends[np.maximum(at, 0)])
        own, starts = own[inside], starts[inside]
        stages = first[first[GLOBAL_TID] == step_tid].sort_values(START_NS)
        st_starts = stages[START_NS].to_numpy(dtype=np.int64)
        st_ends = stages[END_NS].to_numpy(dtype=np.int64)
        k = np.searchsorted(st_starts, starts, side="right") - 1
        open_ = (k >= 0) & (starts < st_ends[np.maximum(k, 0)]) if len(st_starts) else k < -1
        parent = (
            stages["label"].to_numpy(dtype=object)[np.maximum(k, 0)]
            if len(stages)
            else np.full(len(starts), "", dtype=object)
        )
        names = own[NAME].astype(str).to_numpy(dtype=object)
        labels = [f"{parent[i]}/{name}" if open_[i] else name for i, name in enumerate(names)]
        parts.append(
            pd.DataFrame(
                {
                    GLOBAL_TID: step_tid,
                    START_NS: starts,
                    END_NS: own[END_NS].to_numpy(dtype=np.int64),
                    "label": labels,
                }
            )
        )
    if not parts:
        return pd.DataFrame({GLOBAL_TID: [], START_NS: [], END_NS: [], "label": []})
    return pd.concat(parts, ignore_index=True)


def stage_at(stage_map: StageMap, global_tids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The code of the stage open on each (thread, time); special codes where none is."""
    codes = np.full(len(times), stage_map.code(OTHER_THREAD), dtype=np.int64)
    for tid, at in thread_positions(global_tids).items():
        thread = stage_map.threads.get(tid)
        if thread is not None:
            codes[at] = thread_stage_at(stage_map, thread, times[at])
    return codes


def thread_stage_at(stage_map: StageMap, thread: ThreadStages, times: np.ndarray) -> np.ndarray:
    """The code of the stage open on one step thread at each time (sorted or not)."""
    codes = step_codes(stage_map, thread, times)
    # Deeper levels overwrite shallower ones: the innermost open stage wins.
    for starts, ends, level_codes in zip(
        thread.level_starts, thread.level_ends, thread.level_codes, strict=True
    ):
        at = np.searchsorted(starts, times, side="right") - 1
        hit = (
            (at >= 0) & (times < ends[np.maximum(at, 0)])
            if len(starts)
            else np.zeros(len(times), bool)
        )
        codes = np.where(hit, level_codes[np.maximum(at, 0)] if len(starts) else codes, codes)
    return codes


def step_codes(stage_map: StageMap, thread: ThreadStages, times: np.ndarray) -> np.ndarray:
    """NO_STAGE inside one of the thread's steps, BETWEEN_STEPS outside: the codes that
    stage ranges then overwrite."""
    codes: np.ndarray = np.where(
        _inside(thread.step_starts, thread.step_ends, times),
        stage_map.code(NO_STAGE),
        stage_map.code(BETWEEN_STEPS),
    )
    return codes


def _inside(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    at = np.searchsorted(starts, times, side="right") - 1
    return (
        (at >= 0) & (times < ends[np.maximum(at, 0)]) if len(starts) else np.zeros(len(times), bool)
    )


STAGE = "stage"  # stage code (see StageMap.names)
LAUNCH_TID = "launch_tid"
CALL_START_NS = "call_start_ns"
CALL_END_NS = "call_end_ns"
LAUNCH_CATEGORY = "launch_category"


def stage_calls(api_calls: pd.DataFrame, stage_map: StageMap) -> pd.DataFrame:
    """Add the code of the stage open on the calling thread when each call started.

    The result has a fresh RangeIndex: project_ops names each op's call by its position.
    """
    codes = stage_at(stage_map, api_calls[GLOBAL_TID].to_numpy(), api_calls[START_NS].to_numpy())
    return api_calls.assign(**{STAGE: codes}).reset_index(drop=True)


CALL_ROW = "call_row"  # position of the op's launching call in the staged calls; -1: none


def find_launch_calls(
    gpu_ops: pd.DataFrame, staged_calls: pd.DataFrame, index: LaunchIndex | None = None
) -> np.ndarray:
    """Per op, the position of its launching call (same pid and correlation id, the first
    such call), or -1. index: LaunchIndex.of(staged_calls), when already built."""
    index = index if index is not None else LaunchIndex.of(staged_calls)
    return index.find(gpu_ops[PID].to_numpy(), gpu_ops[CORRELATION_ID].to_numpy())


def project_ops(
    gpu_ops: pd.DataFrame,
    staged_calls: pd.DataFrame,
    stage_map: StageMap,
    index: LaunchIndex | None = None,
) -> pd.DataFrame:
    """Join each GPU op to its launching call on (pid, correlation id) and take its stage.

    Ops whose call is missing (sliced or interrupted captures) get NO_LAUNCH_CALL and
    a launch tid of -1. staged_calls must come from stage_calls (positions are row ids).
    """
    row = find_launch_calls(gpu_ops, staged_calls, index)
    found = row >= 0
    at = np.where(found, row, 0)

    def taken(column: str, missing: int) -> np.ndarray:
        values = staged_calls[column].to_numpy()
        return np.where(found, values[at], missing) if len(values) else np.full(len(row), missing)

    category = staged_calls[CALL_CATEGORY].astype("category")
    codes = category.cat.codes.to_numpy()
    launch_codes = np.where(found, codes[at], -1) if len(codes) else np.full(len(row), -1)
    launch_category = pd.Categorical.from_codes(launch_codes, categories=category.cat.categories)
    columns: dict[str, np.ndarray | pd.Categorical] = {
        LAUNCH_TID: taken(GLOBAL_TID, -1),
        CALL_START_NS: taken(START_NS, -1),
        CALL_END_NS: taken(END_NS, -1),
        LAUNCH_CATEGORY: launch_category,
        STAGE: taken(STAGE, stage_map.code(NO_LAUNCH_CALL)),
        CALL_ROW: row,
    }
    return gpu_ops.assign(**columns)
