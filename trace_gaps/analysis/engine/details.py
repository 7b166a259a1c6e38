"""The steps a picture draws: their calls, ops, idle runs and GPU samples, kept by the windows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.frames import WindowFrames
from trace_gaps.analysis.engine.picks import largest_findings
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import END_NS, GLOBAL_TID, PID, START_NS, GpuSamples


@dataclass(frozen=True, slots=True)
class StepDetail:
    """What a timeline picture of one step needs: its calls, ops and idle runs, and the GPU's
    metric samples over it."""

    calls: pd.DataFrame  # the step thread's staged calls overlapping the step
    ops: pd.DataFrame  # the process's projected ops overlapping the step
    idle_runs: pd.DataFrame  # step_id, start_ns, end_ns, cause
    gpu_samples: GpuSamples | None = None  # None: the export has no GPU metrics


def step_details(frames: WindowFrames) -> dict[int, StepDetail]:
    """The details of the window's steps that a timeline picked."""
    steps = frames.steps
    picked = steps[steps[STEP_ID].isin(frames.inputs.detail_step_ids)]
    return {int(getattr(step, STEP_ID)): _step_detail(step, frames) for step in picked.itertuples()}


def _step_detail(step: object, frames: WindowFrames) -> StepDetail:
    staged, projected, idle_runs = frames.staged, frames.projected, frames.idle_runs
    tid, pid = int(getattr(step, GLOBAL_TID)), int(getattr(step, PID))
    start, end = int(getattr(step, START_NS)), int(getattr(step, END_NS))
    calls = staged[
        (staged[GLOBAL_TID] == tid) & (staged[END_NS] > start) & (staged[START_NS] < end)
    ]
    ops = projected[
        (projected[PID] == pid) & (projected[END_NS] > start) & (projected[START_NS] < end)
    ]
    step_id = int(getattr(step, STEP_ID))
    source = frames.inputs.gpu_metrics
    return StepDetail(
        calls=calls.copy(),
        ops=ops.copy(),
        idle_runs=idle_runs[idle_runs[STEP_ID] == step_id].copy(),
        gpu_samples=None if source is None else source.samples(start, end),
    )


@dataclass(frozen=True, slots=True)
class FindingStep:
    """The step where a finding (picks.Finding) is largest, its time there, and its detail."""

    step_id: int
    duration_ns: int
    detail: StepDetail


def finding_steps(frames: WindowFrames) -> dict[str, FindingStep]:
    """Per finding: the window's step where it is largest (at most one detail per finding)."""
    ids = np.fromiter(frames.inputs.finding_step_ids, dtype=np.int64)
    steps = frames.steps[np.isin(frames.steps[STEP_ID].to_numpy(), ids)]
    if steps.empty:
        return {}
    by_id = steps.set_index(STEP_ID, drop=False)
    return {
        str(finding): FindingStep(
            int(step_id), int(ns), _step_detail(next(by_id.loc[[step_id]].itertuples()), frames)
        )
        for finding, step_id, ns in largest_findings(
            frames.ledger, steps[STEP_ID].to_numpy()
        ).itertuples(index=False)
    }


def largest_finding_steps(parts: list[dict[str, FindingStep]]) -> dict[str, FindingStep]:
    """Per finding, the windows' largest (ties: the lowest step id, as in one window)."""
    largest: dict[str, FindingStep] = {}
    for part in parts:
        for finding, found in part.items():
            held = largest.get(finding)
            if held is None or (found.duration_ns, -found.step_id) > (
                held.duration_ns,
                -held.step_id,
            ):
                largest[finding] = found
    return largest


def union_of_details(parts: list[dict[int, StepDetail]]) -> dict[int, StepDetail]:
    return {step_id: detail for part in parts for step_id, detail in part.items()}
