"""Launch overhead, queue time, host syncs and unexpected work per stage: the totals the
per-stage figures (trace_gaps/figures/) are computed from."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.grouped import is_one_of, summed_by, sums_per_bin
from trace_gaps.analysis.launch_index import LaunchIndex
from trace_gaps.analysis.long_gaps import LAUNCH_GAP_NS, launch_gaps
from trace_gaps.analysis.stages import (
    CALL_ROW,
    CALL_START_NS,
    LAUNCH_CATEGORY,
    LAUNCH_TID,
    STAGE,
)
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, step_at
from trace_gaps.figures.stage import UNEXPECTED_TOTALS, StepValue, Total
from trace_gaps.model import (
    CALL_CATEGORY,
    CORRELATION_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    CallCategory,
)

# Per-stage totals over the analysed steps (the figures divide them by the step count).
STAGE_STAT_COLUMNS = [total.value for total in Total]

# Per (pid, stage, analysed step): the values the figures reduce over the steps.
STAGE_STEP_COLUMNS = [PID, STAGE, STEP_ID, *(value.value for value in StepValue)]

# The calls each category's count (and time) totals count.
_COUNT_AND_TIME: dict[CallCategory, tuple[Total, Total | None]] = {
    CallCategory.LAUNCH_KERNEL: (Total.KERNEL_LAUNCHES, None),
    CallCategory.LAUNCH_GRAPH: (Total.GRAPH_LAUNCHES, None),
    CallCategory.LAUNCH_MEMCPY: (Total.MEMCPY_LAUNCHES, None),
    CallCategory.LAUNCH_MEMSET: (Total.MEMSET_LAUNCHES, None),
    CallCategory.SYNC: (Total.SYNCS, Total.SYNC_NS),
    CallCategory.LOOKUP: (Total.LOOKUPS, Total.LOOKUP_NS),
    **UNEXPECTED_TOTALS,
}


def mark_blocking_copies(
    staged_calls: pd.DataFrame, projected_ops: pd.DataFrame, index: LaunchIndex | None = None
) -> pd.DataFrame:
    """Recategorise async copy/set calls that returned only after their op finished as syncs.

    A cudaMemcpyAsync to pageable host memory blocks the host until the copy is done (the
    `.cpu()` of a tensor): the host waits on the GPU exactly as in a synchronize call.
    projected_ops comes from project_ops over these staged_calls.
    """
    is_copy = is_one_of(
        projected_ops[LAUNCH_CATEGORY],
        [CallCategory.LAUNCH_MEMCPY.value, CallCategory.LAUNCH_MEMSET.value],
    )
    rows = projected_ops[CALL_ROW].to_numpy()[is_copy]
    if not len(rows):
        return staged_calls
    op_end = np.full(len(staged_calls), np.iinfo(np.int64).max, dtype=np.int64)
    latest = np.full(len(staged_calls), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, rows, projected_ops[END_NS].to_numpy()[is_copy])
    op_end = np.where(latest > np.iinfo(np.int64).min, latest, op_end)
    # Every call of the launch (a runtime call and the driver call inside it share its id).
    first = (index if index is not None else LaunchIndex.of(staged_calls)).first_calls()
    op_end = np.where(first >= 0, op_end[np.maximum(first, 0)], np.iinfo(np.int64).max)
    blocking = op_end <= staged_calls[END_NS].to_numpy()
    if not blocking.any():
        return staged_calls
    category = staged_calls[CALL_CATEGORY].astype("category")
    if CallCategory.SYNC.value not in category.cat.categories:
        category = category.cat.add_categories([CallCategory.SYNC.value])
    sync = int(category.cat.categories.get_indexer(pd.Index([CallCategory.SYNC.value]))[0])
    codes = np.where(blocking, sync, category.cat.codes.to_numpy()).astype(np.int64)
    recategorised = pd.Categorical.from_codes(codes, categories=category.cat.categories)
    return staged_calls.assign(**{CALL_CATEGORY: recategorised})


def calls_in_analysed_steps(staged_calls: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The calls made by step threads inside analysed (non-warm-up) steps, with their step id."""
    return _in_analysed_steps(staged_calls, steps, GLOBAL_TID, START_NS)


def _within(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Which times fall between the first step's start and the last step's end."""
    if steps.empty:
        return np.zeros(len(times), dtype=bool)
    inside: np.ndarray = (times >= steps[START_NS].min()) & (times < steps[END_NS].max())
    return inside


def summarise_stages(
    staged_calls: pd.DataFrame,
    projected_ops: pd.DataFrame,
    analysed_ops: pd.DataFrame,
    steps: pd.DataFrame,
    index: LaunchIndex | None = None,
    analysed_calls: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per (pid, stage): launch, queue, sync and unexpected-work totals over analysed steps.

    Queue time of a launch = its first op's start - the call's end, when positive (nsys's
    convention); ops are those of the launch's (pid, correlation id). analysed_ops comes
    from ops_in_analysed_steps, analysed_calls (when given) from calls_in_analysed_steps.
    """
    calls = (
        analysed_calls
        if analysed_calls is not None
        else calls_in_analysed_steps(staged_calls, steps)
    )
    duration = (calls[END_NS] - calls[START_NS]).to_numpy()
    entry_of, chosen_launches = _call_entries(calls[CALL_CATEGORY])
    call_keys = _pid_stage_keys(calls)
    entries = list(_COUNT_AND_TIME.values())
    has_op, queue = _launch_queues(
        calls[PID].to_numpy()[chosen_launches],
        calls[CORRELATION_ID].to_numpy()[chosen_launches],
        calls[END_NS].to_numpy()[chosen_launches],
        staged_calls,
        projected_ops,
        index if index is not None else LaunchIndex.of(staged_calls),
    )
    from_graph = (analysed_ops[LAUNCH_CATEGORY] == CallCategory.LAUNCH_GRAPH.value).to_numpy()
    op_keys = _pid_stage_keys(analysed_ops)

    # One row per (pid, stage) with a counted call, a launch or an op, in key order; every
    # total is a bincount over the rows (no group-by, no frame per total to align).
    counted = entry_of >= 0
    # The keys are few: a hash of the rows' keys, then a sort of the distinct ones.
    keys = np.sort(pd.unique(np.concatenate([call_keys[counted | chosen_launches], op_keys])))
    call_rows = np.searchsorted(keys, call_keys)
    table = np.zeros((len(keys), len(STAGE_STAT_COLUMNS)), dtype=np.int64)
    column = {name: i for i, name in enumerate(STAGE_STAT_COLUMNS)}

    def add(name: Total, rows: np.ndarray, values: np.ndarray | None = None) -> None:
        table[:, column[name]] += sums_per_bin(rows, values, len(keys))

    # The counted calls' counts and times, every category at once: a bin per (row, entry).
    bins = call_rows[counted] * len(entries) + entry_of[counted]
    shape = (len(keys), len(entries))
    counts = sums_per_bin(bins, None, len(keys) * len(entries)).reshape(shape)
    times = sums_per_bin(bins, duration[counted], len(keys) * len(entries)).reshape(shape)
    for entry, (count_name, time_name) in enumerate(entries):
        table[:, column[count_name]] = counts[:, entry]
        if time_name:
            table[:, column[time_name]] = times[:, entry]
    launch_rows = call_rows[chosen_launches]
    add(Total.LAUNCH_API_NS, launch_rows, duration[chosen_launches])
    add(Total.LAUNCHES_WITHOUT_OP, launch_rows[~has_op])
    add(Total.QUEUE_NS, launch_rows, queue)
    add(Total.QUEUED_LAUNCHES, launch_rows[queue > 0])
    op_rows = np.searchsorted(keys, op_keys)
    add(Total.GRAPH_OPS, op_rows[from_graph])
    add(Total.EAGER_OPS, op_rows[~from_graph])
    return pd.DataFrame(
        {
            PID: keys >> _STAGE_BITS,
            STAGE: keys & ((1 << _STAGE_BITS) - 1),
            **{name: table[:, i] for i, name in enumerate(STAGE_STAT_COLUMNS)},
        }
    )


def _call_entries(category: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per call: which of _COUNT_AND_TIME's entries counts it (-1: none), and whether it is a
    launch."""
    # Compare the category's codes, not one string per call.
    category = category.astype("category")
    categories = list(category.cat.categories)
    codes = category.cat.codes.to_numpy()
    # Per category code (shifted by one: code -1, no category, takes slot 0), which of
    # _COUNT_AND_TIME's entries counts the call, or -1.
    entry_of_code = np.full(len(categories) + 1, -1, dtype=np.int64)
    for entry, call_category in enumerate(_COUNT_AND_TIME):
        if call_category.value in categories:
            entry_of_code[categories.index(call_category.value) + 1] = entry
    # Per category, then per call; the appended False is where a missing category (code -1) lands.
    is_launch = np.array([str(c).startswith("launch") for c in categories] + [False])
    return entry_of_code[codes + 1], is_launch[codes]


def _launch_queues(
    pids: np.ndarray,
    correlation_ids: np.ndarray,
    call_ends: np.ndarray,
    staged_calls: pd.DataFrame,
    projected_ops: pd.DataFrame,
    index: LaunchIndex,
) -> tuple[np.ndarray, np.ndarray]:
    """Per launch call (its pid, correlation id and end): whether an op of its launch ran, and
    its queue time (its first op's start - its end, when positive)."""
    # The first op of each launch: its start, by the launch's row in the staged calls.
    first_op = np.full(len(staged_calls), np.iinfo(np.int64).max, dtype=np.int64)
    launched = projected_ops[CALL_ROW].to_numpy() >= 0
    np.minimum.at(
        first_op,
        projected_ops[CALL_ROW].to_numpy()[launched],
        projected_ops[START_NS].to_numpy()[launched],
    )
    # Every call of the launch (a runtime call and the driver call inside it share its id).
    same = index.find(pids, correlation_ids)
    first = np.where(same >= 0, first_op[np.maximum(same, 0)], np.iinfo(np.int64).max)
    has_op = first < np.iinfo(np.int64).max
    queue = np.where(has_op, np.maximum(first - call_ends, 0), 0)
    return has_op, queue


# summarise_stages groups on one integer per row, (pid << _STAGE_BITS) | stage: a pid takes
# 22 bits on Linux and a stage code far fewer than 32, so the key stays below 2**63.
_STAGE_BITS = 32


def _pid_stage_keys(frame: pd.DataFrame) -> np.ndarray:
    keys: np.ndarray = (frame[PID].to_numpy().astype(np.int64) << _STAGE_BITS) | frame[
        STAGE
    ].to_numpy().astype(np.int64)
    return keys


def ops_in_analysed_steps(projected_ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Ops whose launching call started inside an analysed step."""
    return _in_analysed_steps(projected_ops, steps, LAUNCH_TID, CALL_START_NS)


def _in_analysed_steps(
    rows: pd.DataFrame, steps: pd.DataFrame, tid: str, time: str
) -> pd.DataFrame:
    """The rows whose (thread, time) lies in an analysed step, with that step's id: found
    on arrays, then the frame selected once."""
    analysed = steps[~steps[IS_WARMUP]]
    times = rows[time].to_numpy()
    within = np.flatnonzero(_within(times, analysed))
    ids = step_at(analysed, rows[tid].to_numpy()[within], times[within])
    inside = ids >= 0
    return rows.iloc[within[inside]].assign(**{STEP_ID: ids[inside]})


def stage_step_values(analysed_calls: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, stage, analysed step) with a launch gap (long_gaps.launch_gaps): the
    StepValue columns."""
    keys = [PID, STAGE, STEP_ID]
    gaps = launch_gaps(analysed_calls).sort_values([*keys, LAUNCH_GAP_NS], kind="stable")
    values = gaps[LAUNCH_GAP_NS].to_numpy()
    columns = [gaps[key].to_numpy() for key in keys]
    changes = np.zeros(max(len(values) - 1, 0), dtype=bool)
    for column in columns:
        changes |= column[1:] != column[:-1]
    starts = np.flatnonzero(np.r_[True, changes]) if len(values) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(values)])
    # numpy's "nearest" percentile: the value of rank (n - 1) x 0.9, rounded half to even.
    p90 = values[starts + np.rint((sizes - 1) * 0.9).astype(np.int64)]
    return pd.DataFrame(
        {
            **{key: column[starts] for key, column in zip(keys, columns, strict=True)},
            StepValue.HOST_GAP_P90_NS.value: p90,
        }
    )[STAGE_STEP_COLUMNS]


def kernel_totals(analysed_ops: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, stage, op name): total GPU ns, the part of it collectives spent waiting for
    a peer (wait_ns: from an op's start to its wait end, as the ledger's wait bucket), and
    count over the given ops."""
    ops = analysed_ops
    start, end = ops[START_NS].to_numpy(), ops[END_NS].to_numpy()
    wait_end = ops[WAIT_END_NS].to_numpy() if WAIT_END_NS in ops.columns else start
    wait = np.clip(np.minimum(wait_end, end) - start, 0, None)
    # Group on the categorical names; only the few result rows become strings.
    grouped = summed_by(
        ops, [PID, STAGE, NAME], {"total_ns": end - start, "wait_ns": wait}, "count"
    )
    grouped[NAME] = grouped[NAME].astype(str)
    return grouped


def top_kernels(totals: pd.DataFrame, *, top: int = 5) -> pd.DataFrame:
    """Per (pid, stage): the `top` ops of kernel_totals with the most GPU time running (their
    time less their wait: what the busy bucket holds), then the most time."""
    ordered = totals.assign(running=totals["total_ns"] - totals["wait_ns"]).sort_values(
        [PID, STAGE, "running", "total_ns", NAME],
        ascending=[True, True, False, False, True],
        kind="stable",
    )
    return ordered.drop(columns="running").groupby([PID, STAGE]).head(top).reset_index(drop=True)


def api_call_totals(
    staged_calls: pd.DataFrame, steps: pd.DataFrame, analysed_calls: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (pid, stage, call name): total ns and count of the calls in analysed steps that
    are neither launches nor syncs (what "api" idle time is spent in)."""
    calls = (
        analysed_calls
        if analysed_calls is not None
        else calls_in_analysed_steps(staged_calls, steps)
    )
    category = calls[CALL_CATEGORY].astype("category")
    launch_or_sync = [
        str(c).startswith("launch") or c == CallCategory.SYNC.value for c in category.cat.categories
    ]
    calls = calls[~np.array([*launch_or_sync, False])[category.cat.codes.to_numpy()]]
    duration = calls[END_NS].to_numpy() - calls[START_NS].to_numpy()
    grouped = summed_by(calls, [PID, STAGE, NAME], {"total": duration}, "count")
    grouped[NAME] = grouped[NAME].astype(str)
    return grouped
