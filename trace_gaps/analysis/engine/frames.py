"""The frames a window hands every metric, each computed once: the inputs every window reads,
the window's ops and calls, ledger, gaps and idle runs, and their analysed and owned subsets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.gpu_metrics import DroppedBusy
from trace_gaps.analysis.host import OsCallIndex
from trace_gaps.analysis.launch_index import LaunchIndex
from trace_gaps.analysis.launches import (
    calls_in_analysed_steps,
    mark_blocking_copies,
    ops_in_analysed_steps,
)
from trace_gaps.analysis.ledger import build_ledger
from trace_gaps.analysis.stages import CALL_END_NS, STAGE, StageMap
from trace_gaps.model import (
    CALL_CATEGORY,
    END_NS,
    GLOBAL_TID,
    PID,
    START_NS,
    GpuMetricSource,
    GraphTraceMode,
)


@dataclass(frozen=True, slots=True)
class WindowInputs:
    """What every window reads besides its rows."""

    steps: pd.DataFrame
    stage_map: StageMap
    os_calls: OsCallIndex  # the outermost OS calls near the window's steps (its own)
    detail_step_ids: frozenset[int]
    finding_step_ids: frozenset[int] = frozenset()  # the steps a FINDING picture chooses among
    # Per pid: the sorted starts, wait ends and peers of its collective ops that wait.
    collective_waits: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )
    replay_step_ids: frozenset[int] = frozenset()  # the steps what-if replays (replay.py)
    graph_mode: GraphTraceMode = GraphTraceMode.UNKNOWN  # the export's --cuda-graph-trace
    kernel_durations: bool = False  # compute OP_DURATIONS (analyze --kernels)
    gpu_metrics: GpuMetricSource | None = None  # the GPU's metric samples, if captured


@dataclass(frozen=True, slots=True)
class WindowFrames:
    """One window's shared frames, computed once by the engine for every metric to read."""

    inputs: WindowInputs
    steps: pd.DataFrame  # the window's steps
    projected: pd.DataFrame  # the ops held, joined to their calls and stages (project_ops)
    staged: pd.DataFrame  # the calls held, staged, blocking copies marked
    launch_index: LaunchIndex  # staged, indexed by (pid, correlation id)
    ledger: pd.DataFrame  # build_ledger over the window's steps
    gaps: pd.DataFrame  # idle gaps per (step, stage), from the same pass
    idle_runs: pd.DataFrame  # idle time as runs of one cause, from the same pass
    analysed_ops: pd.DataFrame  # projected ops in the window's analysed steps, with step_id
    analysed_calls: pd.DataFrame  # staged calls in the window's analysed steps, with step_id
    owned_ops: pd.DataFrame  # projected ops that start in the time the window owns
    owned_calls: pd.DataFrame  # staged calls that start in the time the window owns
    dropped_busy: DroppedBusy  # the GPU busy time of ops dropped before the window


def window_frames(
    inputs: WindowInputs,
    projected: pd.DataFrame,
    calls: pd.DataFrame,
    index: LaunchIndex,
    steps: pd.DataFrame,
    lo: int,
    hi: int,
    dropped_busy: DroppedBusy,
) -> WindowFrames:
    """The frames every metric of a window reads, each computed once (index: the calls'
    LaunchIndex; dropped_busy: gpu_metrics.DroppedBusy)."""
    staged = mark_blocking_copies(calls, projected, index)
    ledger, gaps, idle_runs = build_ledger(
        *_touching_steps(projected, staged, steps), inputs.stage_map
    )
    return WindowFrames(
        inputs=inputs,
        steps=steps,
        projected=projected,
        staged=staged,
        launch_index=index,
        ledger=ledger,
        gaps=gaps,
        idle_runs=idle_runs,
        analysed_ops=ops_in_analysed_steps(projected, steps),
        analysed_calls=calls_in_analysed_steps(staged, steps),
        owned_ops=projected[(projected[START_NS] >= lo) & (projected[START_NS] < hi)],
        owned_calls=staged[(staged[START_NS] >= lo) & (staged[START_NS] < hi)],
        dropped_busy=dropped_busy,
    )


# The columns build_ledger reads.
_LEDGER_OP_COLUMNS = [PID, START_NS, END_NS, STAGE, CALL_END_NS, WAIT_END_NS]
_LEDGER_CALL_COLUMNS = [PID, GLOBAL_TID, CALL_CATEGORY, START_NS, END_NS]


def _touching_steps(
    projected: pd.DataFrame, staged: pd.DataFrame, steps: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The ops and calls that can reach into the window's steps: those overlapping their
    span, and ops queued across it (launched before its end, started after its start);
    only the columns build_ledger reads."""
    if steps.empty:
        return projected.iloc[:0], staged.iloc[:0], steps
    lo, hi = int(steps[START_NS].min()), int(steps[END_NS].max())
    starts, ends = projected[START_NS].to_numpy(), projected[END_NS].to_numpy()
    call_ends = projected[CALL_END_NS].to_numpy()
    overlapping = (ends > lo) & (starts < hi)
    queued = (call_ends >= 0) & (call_ends < hi) & (starts > lo)
    calls = (staged[END_NS].to_numpy() > lo) & (staged[START_NS].to_numpy() < hi)
    return (
        _taken(projected, overlapping | queued, _LEDGER_OP_COLUMNS),
        _taken(staged, calls, _LEDGER_CALL_COLUMNS),
        steps,
    )


def _taken(frame: pd.DataFrame, keep: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """frame.loc[keep, columns] (those it has), with a fresh RangeIndex, taken column by
    column in numpy: a window selects from hundreds of thousands of rows."""
    at = np.flatnonzero(keep)
    taken: dict[str, Any] = {}
    for column in columns:
        if column not in frame.columns:
            continue
        values = frame[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            codes = values.cat.codes.to_numpy()[at]
            taken[column] = pd.Categorical.from_codes(codes, dtype=values.dtype, validate=False)
        else:
            taken[column] = values.to_numpy()[at]
    return pd.DataFrame(taken, copy=False)
