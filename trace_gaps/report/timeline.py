"""Per-step event data for the timeline plots: stages, API calls, GPU ops and idle runs.

A StepTimeline is cut from the frames the Analysis kept for one chosen step, so the picture shows
the same stages, calls, ops and idle causes the ledger counted. Times are int ns offsets
from the step's start; every span is clipped to the step's window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import WAIT_END_NS
from trace_gaps.analysis.engine.details import StepDetail
from trace_gaps.analysis.engine.metrics import FINDING_STEPS, STEP_DETAILS
from trace_gaps.analysis.engine.picks import (
    FINDING_OF_VERDICT,
    Finding,
    StepPick,
    TimelineRequest,
    choose_request,
    choose_steps,
)
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.ledger import CAUSE
from trace_gaps.analysis.stages import STAGE, thread_stage_at
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, STEP_INDEX
from trace_gaps.intervals import label_runs
from trace_gaps.model import (
    CALL_CATEGORY,
    CORRELATION_ID,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    PID,
    START_NS,
    STREAM_ID,
    GpuMetric,
    GpuSamples,
)
from trace_gaps.records.timeline import GpuMetricLane, Spans, StepTimeline, StreamLane
from trace_gaps.units import format_duration


def build_timelines(
    analysis: Analysis, *, trace_start_ns: int, top_kinds: dict[int, str] | None = None
) -> list[StepTimeline]:
    """One StepTimeline per step each of the analysis's requests picked, in request then time order.

    The steps were picked (see picks.choose_steps) and their calls, ops and idle runs kept
    while the analysis ran. top_kinds: per pid, its top candidate's VerdictKind; a FINDING
    request draws the step where that candidate's finding is largest, and nothing when the
    candidate is not one a step shows (picks.FINDING_OF_VERDICT).
    """
    names = np.array(analysis.stage_map.names, dtype=object)
    details = analysis.metrics[STEP_DETAILS]
    timelines = []
    for request, chosen in analysis.picked_steps:
        if request.pick is StepPick.FINDING:
            timelines += _finding_timeline(analysis, names, chosen, top_kinds or {}, trace_start_ns)
            continue
        timelines += [
            _step_timeline(
                analysis,
                names,
                step,
                request.view,
                trace_start_ns,
                details[int(getattr(step, STEP_ID))],
            )
            for step in chosen.itertuples()
        ]
    return timelines


def _finding_timeline(
    analysis: Analysis,
    names: np.ndarray,
    chosen: pd.DataFrame,
    top_kinds: dict[int, str],
    trace_start_ns: int,
) -> list[StepTimeline]:
    if chosen.empty:
        return []
    finding = FINDING_OF_VERDICT.get(top_kinds.get(int(chosen[PID].iloc[0]), ""))
    found = analysis.metrics[FINDING_STEPS].get(str(finding)) if finding else None
    if finding is None or found is None:
        return []
    step = next(chosen[chosen[STEP_ID] == found.step_id].itertuples())
    timeline = _step_timeline(
        analysis, names, step, StepPick.FINDING.value, trace_start_ns, found.detail
    )
    return [replace(timeline, finding=finding.value, finding_ns=found.duration_ns)]


def _step_timeline(
    analysis: Analysis,
    names: np.ndarray,
    step: object,
    view: str,
    trace_start_ns: int,
    detail: StepDetail,
) -> StepTimeline:
    pid, tid = int(getattr(step, PID)), int(getattr(step, GLOBAL_TID))
    start, end = int(getattr(step, START_NS)), int(getattr(step, END_NS))
    idle = detail.idle_runs

    calls = detail.calls
    calls = calls[(calls[GLOBAL_TID] == tid) & (calls[END_NS] > start) & (calls[START_NS] < end)]
    calls = calls.sort_values([START_NS, END_NS], kind="stable")
    category = calls[CALL_CATEGORY].astype(str).to_numpy()

    ops = detail.ops
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
                _op_labels(lane),
                lane[CORRELATION_ID].to_numpy(),
            ),
            waits=_waits(lane, start, end, names),
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
        step_index=int(getattr(step, STEP_INDEX)),
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
            calls[CORRELATION_ID].to_numpy(),
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
        gpu_metrics=None
        if detail.gpu_samples is None
        else _metric_lane(detail.gpu_samples, start, end),
    )


def _metric_lane(samples: GpuSamples, start: int, end: int) -> GpuMetricLane:
    """The samples that overlap the step, cut to it, values to 0.1 % (a sample either metric
    lacks is left out)."""
    read = samples.values.get(GpuMetric.DRAM_READ)
    active = samples.values.get(GpuMetric.SM_ACTIVE)
    times, ends = samples.time_ns, samples.ends_ns
    if read is None or active is None:
        read = active = np.zeros(0)
        times = ends = np.zeros(0, dtype=np.int64)
    keep = (ends > start) & (times < end) & np.isfinite(read) & np.isfinite(active)
    return GpuMetricLane(
        start_ns=(np.maximum(times[keep], start) - start).tolist(),
        end_ns=(np.minimum(ends[keep], end) - start).tolist(),
        dram_read_pct=np.round(read[keep], 1).tolist(),
        sm_active_pct=np.round(active[keep], 1).tolist(),
    )


# What a finding picture shows at its largest, in words.
FINDING_WORDS = {
    Finding.WAIT: "waiting in collectives",
    Finding.SYNC: "GPU idle in syncs",
    Finding.HOST: "GPU idle in host code",
}


def finding_words(timeline: StepTimeline) -> str:
    """Why a finding picture's step was drawn: "where GPU idle in syncs is largest (1.20 ms)"."""
    words = FINDING_WORDS[Finding(timeline.finding)]
    return f"where {words} is largest ({format_duration(timeline.finding_ns)})"


def _op_labels(lane: pd.DataFrame) -> np.ndarray:
    """Each op's name; a collective that waited for a peer also gives its time split as the
    ledger splits it: "ncclKernel · wait 2.86 ms + run 89.5 µs"."""
    labels = lane[NAME].astype(str).to_numpy()
    if WAIT_END_NS not in lane.columns:
        return labels
    start, end = lane[START_NS].to_numpy(), lane[END_NS].to_numpy()
    wait = np.clip(np.minimum(lane[WAIT_END_NS].to_numpy(), end) - start, 0, None)
    at = np.flatnonzero(wait > 0)  # the step's waiting collectives only: a few
    labels = labels.astype(object)
    labels[at] = [
        f"{labels[i]} · wait {format_duration(int(wait[i]))} + run "
        f"{format_duration(int(end[i] - start[i] - wait[i]))}"
        for i in at
    ]
    return labels


def _waits(lane: pd.DataFrame, start: int, end: int, names: np.ndarray) -> Spans:
    if WAIT_END_NS not in lane.columns:
        return Spans([], [], [], [])
    waiting = lane[lane[WAIT_END_NS] > lane[START_NS]]
    return _spans(
        waiting[START_NS].to_numpy(),
        waiting[WAIT_END_NS].to_numpy(),
        start,
        end,
        names[waiting[STAGE].to_numpy()],
        np.full(len(waiting), "waiting for a peer", dtype=object),
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
    first, last = label_runs(np.arange(len(codes)), codes)
    return seg_starts[first], seg_ends[last], codes[first]


def _spans(
    starts: np.ndarray,
    ends: np.ndarray,
    lo: int,
    hi: int,
    groups: np.ndarray,
    names: np.ndarray,
    correlation_ids: np.ndarray | None = None,
) -> Spans:
    """Clip to [lo, hi) and shift to offsets from lo; drop what is left empty."""
    clipped_starts = np.clip(starts.astype(np.int64), lo, hi) - lo
    clipped_ends = np.clip(ends.astype(np.int64), lo, hi) - lo
    keep = clipped_ends > clipped_starts
    return Spans(
        start_ns=clipped_starts[keep].tolist(),
        end_ns=clipped_ends[keep].tolist(),
        group=_texts(groups, keep),
        name=_texts(names, keep),
        correlation_id=[] if correlation_ids is None else correlation_ids[keep].tolist(),
    )


def _texts(values: np.ndarray, keep: np.ndarray) -> list[str]:
    """The values kept, as text, each the object it was: numpy's str dtype is as wide as
    the longest name in every row (a 1 MB stage name took 4 MB per op, 8 GB in all)."""
    return [v if isinstance(v, str) else str(v) for v in np.asarray(values, dtype=object)[keep]]


__all__ = [
    "StepPick",
    "StepTimeline",
    "TimelineRequest",
    "build_timelines",
    "choose_request",
    "choose_steps",
]
