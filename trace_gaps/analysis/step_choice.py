"""Which NVTX ranges are the steps, and why: the range given with --step, else the most
frequent repeating outer range (or family), else the cycle of repeating sibling ranges."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trace_gaps.analysis.families import family_key, matches, without_phase
from trace_gaps.analysis.ranges import DEPTH, IS_OP_RANGE, PARENT, RAW_NAME
from trace_gaps.errors import StepNotFoundError
from trace_gaps.model import END_NS, NAME, START_NS
from trace_gaps.records.report import StepChoice, StepFound

MIN_REPEATS = 3
CYCLE_SUFFIX = " (cycle)"  # after the name of the range that starts a cycle step


@dataclass(frozen=True, slots=True)
class StepSelection:
    """Which NVTX ranges are the steps, and why."""

    name: str | None  # None: no step range, each process is analysed as one whole-trace step
    reason: StepChoice
    alternatives: tuple[tuple[str, int], ...] = ()  # other candidate names with their counts
    members: tuple[str, ...] = ()  # the range names (as recorded) whose instances are steps
    cycle: bool = False  # steps are cycles from one instance of `members` to the next


def choose_step_range(range_tree: pd.DataFrame, *, step_name: str | None) -> StepSelection:
    """Pick the step family: the one given, else the most frequent repeating outer family.

    Names are grouped into families (families.py) and families that differ only in a phase
    word into one step family of several kinds. A candidate repeats at least MIN_REPEATS
    times, is not nested in another repeating range on its thread, contains other ranges,
    and is not a framework op range (aten::*, or decorated by emit_nvtx). Ties go to the
    larger total duration. With no candidate, a repeating sequence of sibling ranges makes
    cycle steps (choose_cycle).
    """
    raw_names = range_tree[RAW_NAME]
    if step_name is not None:
        return _given(range_tree, step_name)
    keys = _step_keys(range_tree)
    candidates = _step_candidates(range_tree, keys)
    if candidates.empty:
        return choose_cycle(range_tree)
    best = str(candidates.index[0])
    members = tuple(sorted(pd.unique(raw_names[keys == best]).astype(str)))
    families = pd.unique(range_tree.loc[keys == best, NAME])
    shown = str(families[0]) if len(families) == 1 else best
    alternatives = tuple((str(n), int(c)) for n, c in candidates["count"].iloc[1:4].items())
    instances = int(candidates["count"].iloc[0])
    found = StepChoice(StepFound.MOST_FREQUENT, instances, len(members))
    return StepSelection(shown, found, alternatives, members)


def _given(range_tree: pd.DataFrame, step_name: str) -> StepSelection:
    """--step: an exact name, a family (or step family) name, or a glob of names."""
    raw_names = range_tree[RAW_NAME]
    distinct = pd.Index(pd.unique(raw_names).astype(str))
    picked = raw_names.isin(distinct[matches(step_name, distinct)]).to_numpy()
    keys = _step_keys(range_tree)
    if not picked.any():
        picked = (range_tree[NAME].to_numpy() == step_name) | (keys == step_name)
    if not picked.any():
        families = range_tree[NAME].value_counts()
        per_key = pd.Series(keys).groupby(keys).size() if len(keys) else pd.Series()
        families_per_key = pd.Series(families.index.map(without_phase)).value_counts()
        kinds = [str(k) for k in per_key.index if families_per_key.get(k, 0) > 1]
        known = list(dict.fromkeys([*families.index.astype(str), *kinds]))
        closest = difflib.get_close_matches(step_name, known, n=3, cutoff=0.4)
        near = f"Closest: {', '.join(closest)}. " if closest else ""
        raise StepNotFoundError(
            f"no NVTX range named {step_name!r} (nor a family or glob matching it) in this "
            f"export. {near}Families present (most frequent first): "
            f"{', '.join(known[:15]) or 'none'}. `trace-gaps info` on this export lists them all."
        )
    members = tuple(sorted(pd.unique(raw_names[picked]).astype(str)))
    families_picked = pd.unique(range_tree.loc[picked, NAME])
    shown = members[0] if len(members) == 1 else step_name
    if len(members) > 1 and len(families_picked) == 1:
        shown = str(families_picked[0])
    given = StepChoice(StepFound.GIVEN, int(picked.sum()), len(members))
    return StepSelection(shown, given, members=members)


def _step_keys(range_tree: pd.DataFrame) -> np.ndarray:
    """Per range, its step family: its family key with the phase word replaced."""
    codes, uniques = pd.factorize(range_tree[RAW_NAME], use_na_sentinel=False)
    keys = np.array([without_phase(family_key(str(name))) for name in uniques], dtype=object)
    found: np.ndarray = keys[codes] if len(codes) else np.array([], dtype=object)
    return found


def _step_candidates(range_tree: pd.DataFrame, keys: np.ndarray) -> pd.DataFrame:
    parent = range_tree[PARENT].to_numpy()
    depth = range_tree[DEPTH].to_numpy()
    key_codes, _ = pd.factorize(keys, use_na_sentinel=False)
    repeats = np.bincount(key_codes)[key_codes] >= MIN_REPEATS if len(keys) else key_codes > 0
    # Walk down the tree level by level: a range is "under a repeating range" when its
    # parent repeats or is itself under one.
    under_repeating = np.zeros(len(range_tree), dtype=bool)
    for level in range(1, int(depth.max(initial=0)) + 1):
        at = np.flatnonzero(depth == level)
        at = at[parent[at] >= 0]
        up = parent[at]
        under_repeating[at] = repeats[up] | under_repeating[up]
    has_children = np.zeros(len(range_tree), dtype=bool)
    has_children[parent[parent >= 0]] = True
    eligible = repeats & ~under_repeating & has_children & ~range_tree[IS_OP_RANGE].to_numpy()
    duration = (range_tree[END_NS] - range_tree[START_NS]).to_numpy()
    table = pd.DataFrame({NAME: keys[eligible], "duration": duration[eligible]})
    if table.empty:
        return pd.DataFrame(columns=["count", "duration"])
    stats = table.groupby(NAME).agg(count=("duration", "size"), duration=("duration", "sum"))
    stats = stats[stats["count"] >= MIN_REPEATS]
    return stats.sort_values(["count", "duration"], ascending=False, kind="stable")


def choose_cycle(range_tree: pd.DataFrame) -> StepSelection:
    """Steps with no enclosing range: the cycle from one range to its next occurrence.

    Serving engines annotate an iteration's phases as siblings with nothing around them
    (vLLM V1: `gpu_model_runner: preprocess`, `forward`, `sample`, `postprocess`). Among
    the top-level ranges of each thread, the family that repeats most often (at least
    MIN_REPEATS times, alongside at least one other repeating family) starts the cycle;
    ties go to the family seen first. Framework op ranges never start one.
    """
    top = range_tree[(range_tree[DEPTH] == 0) & ~range_tree[IS_OP_RANGE]]
    counts = top[NAME].value_counts()
    repeating = counts[counts >= MIN_REPEATS]
    if len(repeating) < 2:
        return StepSelection(None, StepChoice(StepFound.NONE))
    first_seen = top.groupby(NAME)[START_NS].min()
    order = pd.DataFrame({"count": repeating, "first": first_seen.reindex(repeating.index)})
    order = order.sort_values(["count", "first"], ascending=[False, True], kind="stable")
    best = str(order.index[0])
    members = tuple(sorted(pd.unique(top.loc[top[NAME] == best, RAW_NAME]).astype(str)))
    others = [str(n) for n in order.index[1:4]]
    found = StepChoice(StepFound.CYCLE, int(order["count"].iloc[0]), len(members), others)
    return StepSelection(f"{best}{CYCLE_SUFFIX}", found, members=members, cycle=True)
