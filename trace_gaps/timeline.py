"""Per-step event data for the timeline plots: stages, API calls, GPU ops and idle runs.

A StepTimeline is cut from the Analysis frames for one chosen step, so the picture shows
the same stages, calls, ops and idle causes the ledger counted. Times are int ns offsets
from the step's start; every span is clipped to the step's window.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from trace_gaps.analysis.ledger import CAUSE, find_idle_runs_by_cause
from trace_gaps.analysis.pipeline import Analysis
from trace_gaps.analysis.stages import STAGE, thread_stage_at
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, STEP_INDEX
from trace_gaps.errors import TraceGapsError
from trace_gaps.model import (
    CALL_CATEGORY,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    STREAM_ID,
)


class StepPick(StrEnum):
    """How the steps to draw are chosen."""

    MEDIAN = "median"  # the analysed step whose wall time is nearest the median
    WORST = "worst"  # the longest analysed step
    INDEX = "index"  # the step with a given index on its thread
    RANGE = "range"  # consecutive steps first <= index < stop


@dataclass(frozen=True, slots=True)
class TimelineRequest:
    """Which steps one timeline picture shows."""

    pick: StepPick = StepPick.MEDIAN
    first: int = 0  # INDEX and RANGE
    stop: int = 0  # RANGE: one past the last index

    @property
    def view(self) -> str:
        """A short name for the picture: median, worst, step-3, steps-3-6."""
        if self.pick is StepPick.INDEX:
            return f"step-{self.first}"
        if self.pick is StepPick.RANGE:
            return f"steps-{self.first}-{self.stop}"
        return self.pick.value


@dataclass(frozen=True, slots=True)
class Spans:
    """Columns of time spans: ns offsets from the step start, a colour group and a text each."""

    start_ns: list[int]
    end_ns: list[int]
    group: list[str]  # what colours the span: a stage, a call category or an idle cause
    name: list[str]  # what to write on it when it is wide enough


@dataclass(frozen=True, slots=True)
class StreamLane:
    """The GPU ops of one stream in one step; each op's group is the stage that launched it."""

    device_id: int
    stream_id: int
    ops: Spans


@dataclass(frozen=True, slots=True)
class StepTimeline:
    """Everything a timeline picture draws for one step of one thread."""

    view: str  # the TimelineRequest.view that chose this step
    pid: int
    thread: int  # the step's thread id (tid, not globalTid)
    step_id: int
    index: int
    step_name: str | None
    is_warmup: bool
    start_offset_ns: int  # the step's start, from the trace start
    wall_ns: int
    stages: Spans  # the innermost stage open on the step's thread, as the ledger charges it
    api_calls: Spans  # CUDA calls on the step's thread; group is the CallCategory value
    streams: list[StreamLane]  # every stream of the process with an op in the step
    idle: Spans  # GPU idle runs of one cause each; group and name are the IdleCause value


def build_timelines(
    analysis: Analysis, requests: tuple[TimelineRequest, ...], *, trace_start_ns: int
) -> list[StepTimeline]:
    """Cut one StepTimeline per step each request chooses, in request then time order.

    The steps come from the first process with steps (the analysis is already limited to
    --process when given) and, within it, the thread with the most steps.
    """
    timelines: list[StepTimeline] = []
    for request in requests:
        chosen = choose_steps(analysis.steps, request)
        idle = find_idle_runs_by_cause(
            analysis.projected_ops, analysis.staged_calls, chosen, analysis.stage_map
        )
        # Cut the frames to the request's window once; each step then filters only that.
        lo, hi = int(chosen[START_NS].min()), int(chosen[END_NS].max())
        window = _Window(
            calls=_overlapping(analysis.staged_calls, lo, hi),
            ops=_overlapping(analysis.projected_ops, lo, hi),
            stage_names=np.array(analysis.stage_map.names, dtype=object),
        )
        for step in chosen.itertuples():
            timelines.append(
                _step_timeline(
                    analysis,
                    window,
                    step,
                    idle[idle[STEP_ID] == step.step_id],
                    request.view,
                    trace_start_ns,
                )
            )
    return timelines


@dataclass(frozen=True, slots=True)
class _Window:
    """The calls and ops overlapping a request's steps, and the stage names by code."""

    calls: pd.DataFrame
    ops: pd.DataFrame
    stage_names: np.ndarray


def _overlapping(frame: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    return frame[(frame[END_NS] > lo) & (frame[START_NS] < hi)]


def choose_steps(steps: pd.DataFrame, request: TimelineRequest) -> pd.DataFrame:
    """The steps a request picks, from the main thread of the first process with steps."""
    if steps.empty:
        raise TraceGapsError("the export has no steps to draw: no process has GPU work.")
    pid = int(steps[PID].min())
    process_steps = steps[steps[PID] == pid]
    counts = process_steps.groupby(GLOBAL_TID).size().reset_index(name="n")
    tid = int(counts.sort_values(["n", GLOBAL_TID], ascending=[False, True])[GLOBAL_TID].iloc[0])
    thread_steps = process_steps[process_steps[GLOBAL_TID] == tid].sort_values(
        START_NS, kind="stable"
    )
    indices = thread_steps[STEP_INDEX]
    if request.pick is StepPick.INDEX:
        chosen = thread_steps[indices == request.first]
    elif request.pick is StepPick.RANGE:
        chosen = thread_steps[(indices >= request.first) & (indices < request.stop)]
    else:
        analysed = thread_steps[~thread_steps[IS_WARMUP]]
        pool = analysed if not analysed.empty else thread_steps
        wall = (pool[END_NS] - pool[START_NS]).to_numpy()
        if request.pick is StepPick.WORST:
            at = int(np.argmax(wall))  # first of equals: the earliest
        else:
            median = np.median(wall)
            at = int(np.argmin(np.abs(wall - median)))
        chosen = pool.iloc[[at]]
    if chosen.empty:
        wanted = (
            f"step {request.first}"
            if request.pick is StepPick.INDEX
            else f"steps {request.first}:{request.stop}"
        )
        raise TraceGapsError(
            f"no {wanted} in process {pid}: its step thread has steps 0 to {int(indices.max())}. "
            "Choose --step-index K or --steps A:B within that range."
        )
    return chosen


def _step_timeline(
    analysis: Analysis,
    window: _Window,
    step: object,
    idle: pd.DataFrame,
    view: str,
    trace_start_ns: int,
) -> StepTimeline:
    pid, tid = int(getattr(step, PID)), int(getattr(step, GLOBAL_TID))
    start, end = int(getattr(step, START_NS)), int(getattr(step, END_NS))
    names = window.stage_names

    calls = window.calls
    calls = calls[(calls[GLOBAL_TID] == tid) & (calls[END_NS] > start) & (calls[START_NS] < end)]
    calls = calls.sort_values([START_NS, END_NS], kind="stable")
    category = calls[CALL_CATEGORY].astype(str).to_numpy()

    ops = window.ops
    ops = ops[(ops[PID] == pid) & (ops[END_NS] > start) & (ops[START_NS] < end)]
    ops = ops.sort_values([DEVICE_ID, STREAM_ID, START_NS, END_NS], kind="stable")
    streams = [
        StreamLane(
            device_id=int(lane[DEVICE_ID].iloc[0]),
            stream_id=int(lane[STREAM_ID].iloc[0]),
            ops=_spans(
                lane[START_NS].to_numpy(),
                lane[END_NS].to_numpy(),
                start,
                end,
                names[lane[STAGE].to_numpy()],
                lane[NAME].astype(str).to_numpy(),
            ),
        )
        for _, lane in ops.groupby([DEVICE_ID, STREAM_ID], sort=True)
    ]
    stage_starts, stage_ends, stage_codes = _stage_runs(analysis, tid, start, end)
    stage_names = names[stage_codes]
    return StepTimeline(
        view=view,
        pid=pid,
        thread=tid & 0xFFFFFF,
        step_id=int(getattr(step, STEP_ID)),
        index=int(getattr(step, STEP_INDEX)),
        step_name=analysis.selection.name,
        is_warmup=bool(getattr(step, IS_WARMUP)),
        start_offset_ns=start - trace_start_ns,
        wall_ns=end - start,
        stages=_spans(stage_starts, stage_ends, start, end, stage_names, stage_names),
        api_calls=_spans(
            calls[START_NS].to_numpy(),
            calls[END_NS].to_numpy(),
            start,
            end,
            category,
            calls[NAME].astype(str).to_numpy(),
        ),
        streams=streams,
        idle=_spans(
            idle[START_NS].to_numpy(),
            idle[END_NS].to_numpy(),
            start,
            end,
            idle[CAUSE].to_numpy(),
            idle[CAUSE].to_numpy(),
        ),
    )


def _stage_runs(analysis: Analysis, tid: int, start: int, end: int) -> tuple[np.ndarray, ...]:
    """Maximal runs of one innermost stage on the thread over [start, end)."""
    thread = analysis.stage_map.threads[tid]
    edges = [np.array([start, end], dtype=np.int64)]
    for starts, ends in zip(thread.level_starts, thread.level_ends, strict=True):
        inside = (ends > start) & (starts < end)
        edges += [starts[inside], ends[inside]]
    bounds = np.unique(np.clip(np.concatenate(edges), start, end))
    seg_starts, seg_ends = bounds[:-1], bounds[1:]
    codes = thread_stage_at(analysis.stage_map, thread, seg_starts)
    new_run = np.r_[True, np.diff(codes) != 0]
    run_starts = seg_starts[new_run]
    run_ends = np.r_[run_starts[1:], seg_ends[-1:]] if len(run_starts) else run_starts
    return run_starts, run_ends, codes[new_run]


def _spans(
    starts: np.ndarray, ends: np.ndarray, lo: int, hi: int, groups: np.ndarray, names: np.ndarray
) -> Spans:
    """Clip to [lo, hi) and shift to offsets from lo; drop what is left empty."""
    clipped_starts = np.clip(starts.astype(np.int64), lo, hi) - lo
    clipped_ends = np.clip(ends.astype(np.int64), lo, hi) - lo
    keep = clipped_ends > clipped_starts
    return Spans(
        start_ns=clipped_starts[keep].tolist(),
        end_ns=clipped_ends[keep].tolist(),
        group=np.asarray(groups).astype(str)[keep].tolist(),
        name=np.asarray(names).astype(str)[keep].tolist(),
    )


def choose_request(
    *,
    step_index: int | None = None,
    steps: str | None = None,
    worst: bool = False,
    median: bool = False,
) -> TimelineRequest:
    """The one TimelineRequest the plot options ask for (default: the median step).

    steps is "A:B", Python-style: steps A to B-1 of the step thread.
    """
    given = [step_index is not None, steps is not None, worst, median]
    if sum(given) > 1:
        raise TraceGapsError("choose one of --step-index, --steps, --worst and --median.")
    if step_index is not None:
        return TimelineRequest(StepPick.INDEX, first=step_index)
    if steps is not None:
        first, sep, stop = steps.partition(":")
        if (
            not sep
            or not first.strip().isdigit()
            or not stop.strip().isdigit()
            or int(stop) <= int(first)
        ):
            raise TraceGapsError(
                f"--steps {steps!r} is not a range A:B with A < B (B excluded): "
                "--steps 3:6 draws steps 3, 4 and 5."
            )
        return TimelineRequest(StepPick.RANGE, first=int(first), stop=int(stop))
    return TimelineRequest(StepPick.WORST if worst else StepPick.MEDIAN)
