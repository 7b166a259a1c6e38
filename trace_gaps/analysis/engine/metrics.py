"""The per-window metrics, each declared once: a name, how a window computes it, how windows merge.

The engine (windows.py) computes a window's shared frames once (frames.WindowFrames:
projected ops, staged calls, the ledger with its gaps and idle runs, the analysed and owned
subsets), then every declared metric on them, and merges each metric's parts (one per
window, in window order) by the metric's rule. Analysis.metrics holds the results; readers index it
with the metric, typed by its declaration: `analysis.metrics[STAGE_STATS]` is a DataFrame,
`analysis.metrics[STEP_DETAILS]` a dict of StepDetail.

To add a metric, write its compute function over WindowFrames and declare it, e.g.

    OP_CENSUS = declare(
        "op_census",
        lambda frames: op_census(frames.owned_ops),
        summed(OP_CENSUS_COLUMNS[:-1], OP_CENSUS_COLUMNS[-1:]),
    )

declare and the merge rules live in metric.py, the details of the steps pictures draw in
details.py. The merge rule (concatenated, summed, top_of, or any function of the parts)
carries the empty result's columns, and must give the same result however the steps are cut into
windows: a window sees only its own steps (their ops and calls, and those nearby), so a
metric counts each row in one window only (its owned_* rows, or rows of its steps).
tests/test_windows.py and tests/test_properties.py compare windowed with whole analyses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import (
    PEER_IDLE_COLUMNS,
    PEER_PID,
    peer_idle_during_waits,
)
from trace_gaps.analysis.engine.details import (
    finding_steps,
    largest_finding_steps,
    step_details,
    union_of_details,
)
from trace_gaps.analysis.engine.frames import WindowFrames
from trace_gaps.analysis.engine.metric import (
    Metric,
    concatenated,
    declare,
    declared,
    summed,
    top_of,
)
from trace_gaps.analysis.gpu_metrics import measure_gpu_metrics, merge_gpu_metrics
from trace_gaps.analysis.grouped import summed_by
from trace_gaps.analysis.host import BLOCKED_COLUMNS, find_blocked_host_time
from trace_gaps.analysis.kernels import merge_op_durations, op_durations
from trace_gaps.analysis.launches import (
    STAGE_STAT_COLUMNS,
    STAGE_STEP_COLUMNS,
    api_call_totals,
    kernel_totals,
    stage_step_values,
    summarise_stages,
    top_kernels,
)
from trace_gaps.analysis.ledger import CAUSE, LEDGER_COLUMNS
from trace_gaps.analysis.long_gaps import (
    HOST_GAP_COLUMNS,
    LAUNCHES,
    SPACING_COLUMNS,
    explain_host_gaps,
    find_host_gaps,
    launch_spacing,
)
from trace_gaps.analysis.replay.model import StepModel, step_model
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, step_rows
from trace_gaps.model import (
    CALL_CATEGORY,
    END_NS,
    GLOBAL_TID,
    NAME,
    OP_KIND,
    PID,
    START_NS,
    CallCategory,
)

GAPS_KEPT = 3  # longest gaps kept per (pid, stage)
REPLAY_CALLS_MAX = 200_000  # a step with more calls (any thread's) is not replayed
GRAPH_SETUP_COLUMNS = [PID, GLOBAL_TID, NAME, START_NS, END_NS]
OP_CENSUS_COLUMNS = [PID, OP_KIND, STAGE, "ops"]


def longest_gaps(gaps: pd.DataFrame, steps: pd.DataFrame, top: int = GAPS_KEPT) -> pd.DataFrame:
    """The longest idle gaps of the analysed steps, top per (pid, stage), with a duration column.

    Ties go to the earlier gap, so that windows merge to the same rows as one pass.
    """
    analysed = steps[~steps[IS_WARMUP]]
    row = step_rows(analysed, gaps[STEP_ID].to_numpy())
    kept = np.flatnonzero(row >= 0)
    pid = analysed[PID].to_numpy()[row[kept]]
    duration = (gaps[END_NS].to_numpy() - gaps[START_NS].to_numpy())[kept]
    # Only a gap as long as its (pid, stage)'s top-th longest can be among its top: the
    # exact order (merge_longest_gaps) then sorts those few, not a window's every gap.
    candidate = _as_long_as_the_top(pid, gaps[STAGE].to_numpy()[kept], duration, top)
    gaps = gaps.iloc[kept[candidate]].assign(
        **{PID: pid[candidate], "duration": duration[candidate]}
    )
    return merge_longest_gaps([gaps], top)


def _as_long_as_the_top(
    pid: np.ndarray, stage: np.ndarray, duration: np.ndarray, top: int
) -> np.ndarray:
    """Per row: is its duration at least the top-th longest of its (pid, stage) group's?"""
    if not len(duration) or top < 1:
        return np.zeros(len(duration), dtype=bool)
    pid_code, _ = pd.factorize(pid)
    stage_code, _ = pd.factorize(stage)
    group = pid_code.astype(np.int64) * (int(stage_code.max()) + 1) + stage_code
    # Rows by group (a 16-bit stable sort is a radix sort), then each group's top-th
    # longest by a partition: no sort of the durations.
    small = group.astype(np.int16) if group.max() < 2**15 else group
    order = np.argsort(small, kind="stable")
    ordered, durations = group[order], duration[order]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    threshold = np.zeros(int(group.max()) + 1, dtype=duration.dtype)
    for a, b in zip(first, np.r_[first[1:], len(order)], strict=True):
        within = durations[a:b]
        threshold[ordered[a]] = (
            within.min() if b - a <= top else np.partition(within, b - a - top)[b - a - top]
        )
    at_least: np.ndarray = duration >= threshold[group]
    return at_least


def merge_longest_gaps(parts: list[pd.DataFrame], top: int = GAPS_KEPT) -> pd.DataFrame:
    """The top gaps per (pid, stage) over several longest_gaps results."""
    gaps = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if gaps.empty:
        columns = [STEP_ID, STAGE, START_NS, END_NS, CAUSE, PID, "duration"]
        return pd.DataFrame(
            {c: pd.Series(dtype="object" if c == CAUSE else "int64") for c in columns}
        )
    # By (pid, stage), longest first, then earliest: one stable numpy lexsort (its last key
    # sorts first), then the first `top` rows of each (pid, stage) run.
    pid, stage = gaps[PID].to_numpy(), gaps[STAGE].to_numpy()
    order = np.lexsort(
        (
            gaps[STEP_ID].to_numpy(),
            gaps[START_NS].to_numpy(),
            -gaps["duration"].to_numpy(),
            stage,
            pid,
        )
    )
    pid, stage = pid[order], stage[order]
    first = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (stage[1:] != stage[:-1])])
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    return gaps.iloc[order[rank < top]].reset_index(drop=True)


def _blocked_host(frames: WindowFrames) -> pd.DataFrame:
    inputs = frames.inputs
    return find_blocked_host_time(
        frames.steps,
        frames.idle_runs,
        inputs.stage_map,
        frames.inputs.os_calls.near_steps(frames.steps),
    )


def _peer_idle(parts: list[pd.DataFrame]) -> pd.DataFrame:
    parts = [part for part in parts if len(part)]
    if not parts:
        return pd.DataFrame(columns=PEER_IDLE_COLUMNS)
    found = pd.concat(parts, ignore_index=True)
    summed = found.groupby([PID, PEER_PID, "cause"])["duration_ns"].sum()
    return summed.reset_index()


def op_census(projected: pd.DataFrame) -> pd.DataFrame:
    """How many ops per (pid, kind, stage)."""
    return summed_by(projected, [PID, OP_KIND, STAGE], {}, "ops")[OP_CENSUS_COLUMNS]


def _host_gaps(frames: WindowFrames) -> pd.DataFrame:
    inputs = frames.inputs
    found = find_host_gaps(frames.analysed_calls, frames.steps)
    return explain_host_gaps(
        found, frames.idle_runs, frames.inputs.os_calls.near_steps(frames.steps), inputs.stage_map
    )


def _graph_setup_calls(frames: WindowFrames) -> pd.DataFrame:
    calls = frames.owned_calls
    setup = calls[CALL_CATEGORY] == CallCategory.GRAPH_SETUP.value
    return calls.loc[setup, GRAPH_SETUP_COLUMNS].assign(**{NAME: lambda f: f[NAME].astype(str)})


def _replay_models(frames: WindowFrames) -> dict[int, StepModel]:
    """The replay models of the window's steps that what-if replays, but for a step holding
    more than REPLAY_CALLS_MAX calls (a whole-process step of a large export, whose replay,
    a Python loop over its calls and ops, would cost seconds)."""
    steps = frames.steps
    chosen = steps[steps[STEP_ID].isin(frames.inputs.replay_step_ids)]
    starts = frames.staged[START_NS].to_numpy()
    calls = np.searchsorted(starts, chosen[END_NS].to_numpy()) - np.searchsorted(
        starts, chosen[START_NS].to_numpy()
    )
    chosen = chosen[calls <= REPLAY_CALLS_MAX]
    return {
        int(step[STEP_ID]): step_model(
            step, frames.staged, frames.projected, frames.inputs.stage_map, frames.inputs.graph_mode
        )
        for _, step in chosen.iterrows()
    }


def _union_models(parts: list[dict[int, StepModel]]) -> dict[int, StepModel]:
    return {step_id: model for part in parts for step_id, model in part.items()}


# The metrics, in the order the windows compute them.

# per step: step_id, stage, bucket, cause, duration_ns
LEDGER = declare("ledger", lambda frames: frames.ledger, concatenated(LEDGER_COLUMNS))
# top idle gaps of analysed steps per (pid, stage)
LONGEST_GAPS = declare(
    "longest_gaps", lambda frames: longest_gaps(frames.gaps, frames.steps), merge_longest_gaps
)
# per (analysed step, stage, OS call): idle host ns inside it
BLOCKED_HOST = declare("blocked_host", _blocked_host, concatenated(BLOCKED_COLUMNS))
# per (pid, peer pid, cause): the peer's GPU idle ns during this process's waits for it
PEER_IDLE = declare(
    "peer_idle",
    lambda frames: peer_idle_during_waits(
        frames.inputs.collective_waits, frames.idle_runs, frames.steps, frames.inputs.steps
    ),
    _peer_idle,
)
# per (pid, stage): launch, queue, sync totals (analysed steps)
STAGE_STATS = declare(
    "stage_stats",
    lambda frames: summarise_stages(
        frames.staged,
        frames.projected,
        frames.analysed_ops,
        frames.steps,
        frames.launch_index,
        frames.analysed_calls,
    ),
    summed([PID, STAGE], STAGE_STAT_COLUMNS),
)
# per (pid, stage, analysed step): the values stage figures reduce over the steps
STAGE_STEP_VALUES = declare(
    "stage_step_values",
    lambda frames: stage_step_values(frames.analysed_calls),
    concatenated(STAGE_STEP_COLUMNS),
)
# per (pid, stage): the ops with most GPU time (analysed steps)
TOP_KERNELS = declare(
    "top_kernels",
    lambda frames: kernel_totals(frames.analysed_ops),
    top_of(summed([PID, STAGE, NAME], ["total_ns", "wait_ns", "count"]), top_kernels),
)
# per (pid, stage, name): non-launch, non-sync calls
API_CALL_TOTALS = declare(
    "api_call_totals",
    lambda frames: api_call_totals(frames.staged, frames.steps, frames.analysed_calls),
    summed([PID, STAGE, NAME], ["total", "count"]),
)
# per (pid, kind, stage): ops of the analysed processes
OP_CENSUS = declare(
    "op_census",
    lambda frames: op_census(frames.owned_ops),
    summed(OP_CENSUS_COLUMNS[:-1], OP_CENSUS_COLUMNS[-1:]),
)
# host gaps of at least LONG_GAP_MIN_NS in analysed steps, explained
HOST_GAPS = declare("host_gaps", _host_gaps, concatenated(HOST_GAP_COLUMNS))
# per (pid, stage, gap_us): launches with that host gap before
LAUNCH_SPACING = declare(
    "launch_spacing",
    lambda frames: launch_spacing(frames.analysed_calls),
    summed(SPACING_COLUMNS[:3], [LAUNCHES]),
)
# capture/instantiate/upload calls: pid, tid, name, start, end
GRAPH_SETUP_CALLS = declare(
    "graph_setup_calls", _graph_setup_calls, concatenated(GRAPH_SETUP_COLUMNS)
)
# per (pid, stage, kind, name, duration): analysed ops that ran that long (--kernels only)
OP_DURATIONS = declare(
    "op_durations",
    lambda frames: op_durations(
        frames.analysed_ops if frames.inputs.kernel_durations else frames.analysed_ops.iloc[:0]
    ),
    merge_op_durations,
)
# the calls, ops and idle runs of the steps a timeline picked
STEP_DETAILS = declare("step_details", step_details, union_of_details)
# per finding (picks.Finding): the step where it is largest, with its details
FINDING_STEPS = declare("finding_steps", finding_steps, largest_finding_steps)
# the replay models of the steps what-if replays (replay/model.py, whatif.py)
REPLAY_MODELS = declare("replay_models", _replay_models, _union_models)

# per (pid, stage): GPU metric samples integrated over its busy time (analysed steps)
GPU_METRICS = declare(
    "gpu_metrics",
    lambda frames: measure_gpu_metrics(
        frames.projected, frames.steps, frames.inputs.gpu_metrics, frames.dropped_busy
    ),
    merge_gpu_metrics,
)

METRICS: tuple[Metric[Any, Any], ...] = declared()
