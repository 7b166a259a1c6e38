"""Run the analyses in order on one Trace: steps → stages → ledger → launches."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from trace_gaps.analysis.launches import (
    mark_blocking_copies,
    ops_in_analysed_steps,
    summarise_stages,
    top_kernels,
)
from trace_gaps.analysis.ledger import build_ledger
from trace_gaps.analysis.ranges import build_range_tree
from trace_gaps.analysis.stages import StageMap, map_stages, project_ops, stage_calls
from trace_gaps.analysis.steps import (
    StepSelection,
    choose_step_range,
    cut_steps,
    mark_warmup,
    whole_process_steps,
)
from trace_gaps.errors import ProcessNotFoundError
from trace_gaps.model import PID, Trace


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """What the user chose; times in ns."""

    step_name: str | None = None
    skip: int | None = None
    depth: int = 1
    process: int | None = None


@dataclass(frozen=True, slots=True)
class Analysis:
    """Every intermediate frame, for the report and the plots to read."""

    options: AnalysisOptions
    selection: StepSelection
    range_tree: pd.DataFrame
    steps: pd.DataFrame
    stage_map: StageMap
    staged_calls: pd.DataFrame
    projected_ops: pd.DataFrame
    ledger: pd.DataFrame
    gaps: pd.DataFrame
    idle_runs: pd.DataFrame  # idle time as maximal runs of one cause (step_id, start, end, cause)
    stage_stats: pd.DataFrame
    top_kernels: pd.DataFrame


def analyse_trace(trace: Trace, options: AnalysisOptions) -> Analysis:
    """Cut steps and stages, build the ledger and the launch statistics."""
    gpu_ops, api_calls, nvtx_ranges = trace.gpu_ops, trace.api_calls, trace.nvtx_ranges
    if options.process is not None:
        known = sorted(set(gpu_ops[PID]) | set(api_calls[PID]))
        if options.process not in known:
            raise ProcessNotFoundError(
                f"has no process {options.process} with CUDA activity; pass one of these to "
                f"--process: {', '.join(map(str, known)) or 'none'}",
                path=trace.info.path,
            )
        gpu_ops = gpu_ops[gpu_ops[PID] == options.process]
        api_calls = api_calls[api_calls[PID] == options.process]
        nvtx_ranges = nvtx_ranges[nvtx_ranges[PID] == options.process]
    range_tree = build_range_tree(nvtx_ranges)
    selection = choose_step_range(range_tree, step_name=options.step_name)
    steps = cut_steps(range_tree, selection)
    if steps.empty:
        steps = whole_process_steps(gpu_ops, api_calls)
    else:
        steps = mark_warmup(steps, api_calls, skip=options.skip)
    stage_map = map_stages(range_tree, steps, depth=options.depth)
    staged = stage_calls(api_calls, stage_map)
    projected = project_ops(gpu_ops, staged, stage_map)
    staged = mark_blocking_copies(staged, projected)
    ledger, gaps, idle_runs = build_ledger(projected, staged, steps, stage_map)
    analysed_ops = ops_in_analysed_steps(projected, steps)
    return Analysis(
        options=options,
        selection=selection,
        range_tree=range_tree,
        steps=steps,
        stage_map=stage_map,
        staged_calls=staged,
        projected_ops=projected,
        ledger=ledger,
        gaps=gaps,
        idle_runs=idle_runs,
        stage_stats=summarise_stages(staged, projected, analysed_ops, steps),
        top_kernels=top_kernels(analysed_ops),
    )
