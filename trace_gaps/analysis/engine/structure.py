"""The step structure of an analysis: the NVTX range tree of the chosen process and domain,
the step range chosen in it, and the steps cut from it with their warm-up marked.

It comes from the NVTX ranges alone (and the module loads the warm-up rule reads), before
any op or call is analysed; pipeline.py then runs the windows over these steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.streams import of_process
from trace_gaps.analysis.ranges import build_range_tree, domain_names
from trace_gaps.analysis.step_choice import StepSelection, choose_step_range
from trace_gaps.analysis.steps import (
    IS_WARMUP,
    STEP_INDEX,
    WARMUP_LENGTH_FACTOR,
    cut_steps,
    empty_steps,
    mark_warmup,
    suggest_skip,
    whole_process_steps,
)
from trace_gaps.errors import NoAnalysedStepsError, ProcessNotFoundError, StepNotFoundError
from trace_gaps.model import (
    API_CALL_COLUMNS,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    PID,
    ChunkSource,
    RowSources,
    Trace,
    empty_frame,
)


@dataclass(frozen=True, slots=True)
class WholeRows:
    """Every op and call of the analysed processes, read at once (no step range)."""

    ops: pd.DataFrame
    calls: pd.DataFrame


@dataclass(frozen=True, slots=True)
class StepStructure:
    """The range tree, the step range chosen in it and the steps cut from it, warm-up marked."""

    range_tree: pd.DataFrame
    selection: StepSelection
    steps: pd.DataFrame
    # No step range: one step per process over all its rows, which were read to cut them.
    whole: WholeRows | None = None


def build_structure(
    trace: Trace,
    sources: RowSources,
    *,
    step_name: str | None,
    process: int | None,
    domain: str | None,
    skip: int | None,
) -> StepStructure:
    """Cut the steps of the process (every process: None) from its ranges in domain.

    Raises ProcessNotFoundError or StepNotFoundError for a process or domain the export does
    not have, NoAnalysedStepsError when every step is warm-up.
    """
    range_tree = build_range_tree(_ranges_of(trace, sources, process, domain), domain=domain)
    selection = choose_step_range(range_tree, step_name=step_name)
    steps = cut_steps(range_tree, selection)
    if steps.empty:
        ops = _read_all(sources.ops, process, GPU_OP_COLUMNS)
        calls = _read_all((("CUDA API", sources.calls),), process, API_CALL_COLUMNS)
        steps = whole_process_steps(ops, calls)
        return StepStructure(range_tree, selection, steps, WholeRows(ops, calls))
    empty = empty_steps(range_tree, steps)
    marked = _mark_warmup(steps, sources, skip, process, trace.info.path, empty=empty)
    return StepStructure(range_tree, selection, marked)


def _ranges_of(
    trace: Trace, sources: RowSources, process: int | None, domain: str | None
) -> pd.DataFrame:
    """The trace's NVTX ranges of the process; refuses a process or domain not there."""
    nvtx_ranges = trace.nvtx_ranges
    if process is not None:
        known = sources.known_pids()
        if process not in known:
            raise ProcessNotFoundError(
                f"has no process {process} with CUDA activity; pass one of these to "
                f"--process: {', '.join(map(str, known)) or 'none'}",
                path=trace.info.path,
            )
        nvtx_ranges = nvtx_ranges[nvtx_ranges[PID] == process]
    if domain is not None:
        present = domain_names(nvtx_ranges)
        wanted = "default" if domain.lower() == "default" else domain
        if wanted not in present:
            raise StepNotFoundError(
                f"has no NVTX ranges in domain {domain!r}; pass one of these to "
                f"--domain: {', '.join(present) or 'none'}",
                path=trace.info.path,
            )
    return nvtx_ranges


def _mark_warmup(
    steps: pd.DataFrame,
    sources: RowSources,
    skip: int | None,
    process: int | None,
    path: Path,
    *,
    empty: np.ndarray,
) -> pd.DataFrame:
    """mark_warmup, reading module loads only as far as the rule needs; refuses an empty run.

    The rule marks a leading run of each thread's steps and judges whether loads are steady
    state on the steps read, so the loads of the first 8, 16, 32, ... steps are read until
    every thread's warm-up run is under a quarter of them (or every step is read).
    """
    if skip is not None:
        marked = mark_warmup(steps, empty_frame(API_CALL_COLUMNS), skip=skip)
    else:
        count = 8
        while True:
            covered = steps[steps[STEP_INDEX] < count]
            until = int(covered[END_NS].max())
            loads = sources.module_loads(until)
            if process is not None:
                loads = loads[loads[PID] == process]
            marked = mark_warmup(steps, loads, skip=None, known_until_ns=until, empty=empty)
            warm = marked.groupby(GLOBAL_TID)[IS_WARMUP].sum()
            if (warm * 4 < count).all() or count > marked[STEP_INDEX].max():
                break
            count *= 2
    if len(marked) and marked[IS_WARMUP].all():
        longest = int(marked.groupby(GLOBAL_TID).size().max())
        rule = "the warm-up rule" if skip is None else f"--skip {skip}"
        raise NoAnalysedStepsError(
            f"all {len(marked)} steps are skipped as warm-up by {rule} (the longest thread "
            f"has {longest}), so nothing is left to analyse; pass "
            f"--skip {suggest_skip(marked)} (the leading steps longer than "
            f"{WARMUP_LENGTH_FACTOR}x the median step) or leave --skip out",
            path=path,
        )
    return marked


def _read_all(
    sources: tuple[tuple[str, ChunkSource], ...], pid: int | None, columns: dict[str, str]
) -> pd.DataFrame:
    frames = [chunk for _, chunks in sources for chunk in of_process(pid, chunks())]
    frames = [frame for frame in frames if len(frame)]
    return pd.concat(frames, ignore_index=True) if frames else empty_frame(columns)
