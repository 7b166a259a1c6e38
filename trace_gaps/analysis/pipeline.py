"""Run the analyses in order: steps → stages → (per window) ledger and launches → merged totals.

The step structure (range tree, steps, warm-up, stage map) is global and comes from the
NVTX ranges alone; everything that reads ops and calls runs window by window (see
windows.py) and is merged here into one Analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import (
    PEER_IDLE_COLUMNS,
    PEER_PID,
    CollectiveMatch,
    is_collective,
    match_collectives,
)
from trace_gaps.analysis.host import BLOCKED_COLUMNS, outermost_calls
from trace_gaps.analysis.launches import STAGE_STAT_COLUMNS, top_kernels
from trace_gaps.analysis.ledger import LEDGER_COLUMNS
from trace_gaps.analysis.long_gaps import (
    HOST_GAP_COLUMNS,
    LAUNCHES,
    SPACING_COLUMNS,
)
from trace_gaps.analysis.picks import TimelineRequest, choose_steps
from trace_gaps.analysis.ranges import build_range_tree
from trace_gaps.analysis.stages import STAGE, StageMap, map_stages, stage_calls
from trace_gaps.analysis.steps import (
    IS_WARMUP,
    STEP_ID,
    STEP_INDEX,
    WARMUP_LENGTH_FACTOR,
    StepSelection,
    choose_step_range,
    cut_steps,
    mark_warmup,
    suggest_skip,
    whole_process_steps,
)
from trace_gaps.analysis.windows import (
    GRAPH_SETUP_COLUMNS,
    OP_CENSUS_COLUMNS,
    RowStream,
    StepDetail,
    WindowInputs,
    WindowResults,
    analyse_in_windows,
    merge_longest_gaps,
    plan_windows,
)
from trace_gaps.errors import NoAnalysedStepsError, ProcessNotFoundError
from trace_gaps.model import (
    API_CALL_COLUMNS,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    NAME,
    OP_KIND,
    PID,
    START_NS,
    ChunkSource,
    RowSources,
    Trace,
    empty_frame,
)


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """What the user chose; times in ns."""

    step_name: str | None = None
    skip: int | None = None
    depth: int = 1
    process: int | None = None


@dataclass(frozen=True, slots=True)
class Analysis:
    """The step structure and every merged result, for the report and the plots to read."""

    options: AnalysisOptions
    selection: StepSelection
    range_tree: pd.DataFrame
    steps: pd.DataFrame
    stage_map: StageMap
    ledger: pd.DataFrame  # per step: step_id, stage, bucket, cause, duration_ns
    longest_gaps: pd.DataFrame  # top idle gaps of analysed steps per (pid, stage)
    blocked_host: pd.DataFrame  # per (analysed step, stage, OS call): idle host ns inside it
    stage_stats: pd.DataFrame  # per (pid, stage): launch, queue, sync totals (analysed steps)
    top_kernels: pd.DataFrame  # per (pid, stage): the ops with most GPU time (analysed steps)
    api_call_totals: pd.DataFrame  # per (pid, stage, name): non-launch, non-sync calls
    op_census: pd.DataFrame  # per (pid, kind, stage): ops of the analysed processes
    device_ops: pd.DataFrame  # per (pid, device, kind): ops of every process in the export
    host_gaps: pd.DataFrame  # host gaps of at least LONG_GAP_MIN_NS in analysed steps, explained
    launch_spacing: pd.DataFrame  # per (pid, stage, gap_us): launches with that host gap before
    graph_setup_calls: pd.DataFrame  # capture/instantiate/upload calls: pid, tid, name, start, end
    trace_start_ns: int  # the earliest op, call or range in the export
    picked_steps: tuple[tuple[TimelineRequest, pd.DataFrame], ...]  # per timeline request
    step_details: dict[int, StepDetail]  # kept for the picked steps
    windows: int  # how many windows the analysis ran in
    collectives: CollectiveMatch  # every collective op of the export, matched across processes
    # per (pid, peer pid, cause): the peer's GPU idle ns during this process's waits for it
    peer_idle: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PEER_IDLE_COLUMNS))


def analyse_trace(
    trace: Trace,
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    window_rows: int | None = None,
    chunk_rows: int | None = None,
    collectives: CollectiveMatch | None = None,
) -> Analysis:
    """Analyse a Trace held in memory; window_rows None analyses it as one window.

    window_rows and chunk_rows cut the analysis as a streamed export is cut (for tests).
    """
    return analyse_rows(
        trace,
        _memory_sources(trace, chunk_rows),
        options,
        timelines=timelines,
        window_rows=window_rows,
        collectives=collectives,
    )


def analyse_rows(
    trace: Trace,
    sources: RowSources,
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    window_rows: int | None = None,
    on_window: Callable[[int, int], None] | None = None,
    collectives: CollectiveMatch | None = None,
) -> Analysis:
    """Analyse rows streamed from sources; trace holds the ranges, threads and OS calls.

    collectives, when given, is the match made across several exports (multi.py), with this
    export's ops as export 0 in its own clock; otherwise the export's collectives are matched
    among its own processes. Raises NeedsWholeTrace when the rows cannot be analysed window
    by window.
    """
    nvtx_ranges = trace.nvtx_ranges
    pid = options.process
    if pid is not None:
        known = sources.known_pids()
        if pid not in known:
            raise ProcessNotFoundError(
                f"has no process {pid} with CUDA activity; pass one of these to "
                f"--process: {', '.join(map(str, known)) or 'none'}",
                path=trace.info.path,
            )
        nvtx_ranges = nvtx_ranges[nvtx_ranges[PID] == pid]
    range_tree = build_range_tree(nvtx_ranges)
    selection = choose_step_range(range_tree, step_name=options.step_name)
    steps = cut_steps(range_tree, selection)
    if steps.empty:
        # No step range: one step per process over all its rows, so all rows at once.
        ops = _read_all(sources.ops, pid, GPU_OP_COLUMNS)
        calls = _read_all((("CUDA API", sources.calls),), pid, API_CALL_COLUMNS)
        steps = whole_process_steps(ops, calls)
        op_chunks = [("GPU ops", iter([ops.sort_values(START_NS, kind="stable")]))]
        call_chunks = iter([calls.sort_values(START_NS, kind="stable")])
        rows, window_rows = len(ops) + len(calls), None
    else:
        steps = _mark_warmup(steps, sources, options, trace.info.path)
        op_chunks = [(name, _of_process(pid, chunks())) for name, chunks in sources.ops]
        call_chunks = _of_process(pid, sources.calls())
        rows = sources.rows
    stage_map = map_stages(range_tree, steps, depth=options.depth)
    picked = tuple((request, choose_steps(steps, request)) for request in timelines)
    # Matched across every process, --process or not: a wait depends on the peers.
    if collectives is None:
        collectives = match_collectives(sources.collectives(is_collective))
    inputs = WindowInputs(
        steps=steps,
        stage_map=stage_map,
        os_calls=outermost_calls(trace.os_calls),
        collective_waits=collectives.lookup(),
        detail_step_ids=frozenset(int(i) for _, chosen in picked for i in chosen[STEP_ID]),
    )
    results = analyse_in_windows(
        [RowStream(name, chunks, empty_frame(GPU_OP_COLUMNS)) for name, chunks in op_chunks],
        RowStream(
            "CUDA API",
            call_chunks,
            empty_frame(API_CALL_COLUMNS),
            lambda calls: stage_calls(calls, stage_map),  # each call staged once, as read
        ),
        inputs,
        plan_windows(steps, rows, window_rows),
        on_window,
    )
    return _merge(
        trace,
        options,
        selection,
        range_tree,
        steps,
        stage_map,
        picked,
        results,
        sources,
        collectives,
    )


def _mark_warmup(
    steps: pd.DataFrame, sources: RowSources, options: AnalysisOptions, path: Path
) -> pd.DataFrame:
    """mark_warmup, reading module loads only as far as the rule needs; refuses an empty run.

    The rule marks a leading run of each thread's steps and judges whether loads are steady
    state on the steps read, so the loads of the first 8, 16, 32, ... steps are read until
    every thread's warm-up run is under a quarter of them (or every step is read).
    """
    if options.skip is not None:
        marked = mark_warmup(steps, empty_frame(API_CALL_COLUMNS), skip=options.skip)
    else:
        count = 8
        while True:
            covered = steps[steps[STEP_INDEX] < count]
            until = int(covered[END_NS].max())
            loads = sources.module_loads(until)
            if options.process is not None:
                loads = loads[loads[PID] == options.process]
            marked = mark_warmup(steps, loads, skip=None, known_until_ns=until)
            warm = marked.groupby(GLOBAL_TID)[IS_WARMUP].sum()
            if (warm * 4 < count).all() or count > marked[STEP_INDEX].max():
                break
            count *= 2
    if len(marked) and marked[IS_WARMUP].all():
        longest = int(marked.groupby(GLOBAL_TID).size().max())
        rule = "the warm-up rule" if options.skip is None else f"--skip {options.skip}"
        raise NoAnalysedStepsError(
            f"all {len(marked)} steps are skipped as warm-up by {rule} (the longest thread "
            f"has {longest}), so nothing is left to analyse; pass "
            f"--skip {suggest_skip(marked)} (the leading steps longer than "
            f"{WARMUP_LENGTH_FACTOR}x the median step) or leave --skip out",
            path=path,
        )
    return marked


def _peer_idle(parts: list[pd.DataFrame]) -> pd.DataFrame:
    parts = [part for part in parts if len(part)]
    if not parts:
        return pd.DataFrame(columns=PEER_IDLE_COLUMNS)
    found = pd.concat(parts, ignore_index=True)
    summed = found.groupby([PID, PEER_PID, "cause"])["duration_ns"].sum()
    return summed.reset_index()


def _of_process(pid: int | None, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for chunk in chunks:
        yield chunk if pid is None else chunk[chunk[PID].to_numpy() == pid]


def _read_all(
    sources: tuple[tuple[str, ChunkSource], ...], pid: int | None, columns: dict[str, str]
) -> pd.DataFrame:
    frames = [chunk for _, chunks in sources for chunk in _of_process(pid, chunks())]
    frames = [frame for frame in frames if len(frame)]
    return pd.concat(frames, ignore_index=True) if frames else empty_frame(columns)


def _merge(
    trace: Trace,
    options: AnalysisOptions,
    selection: StepSelection,
    range_tree: pd.DataFrame,
    steps: pd.DataFrame,
    stage_map: StageMap,
    picked: tuple[tuple[TimelineRequest, pd.DataFrame], ...],
    results: WindowResults,
    sources: RowSources,
    collectives: CollectiveMatch,
) -> Analysis:
    return Analysis(
        options=options,
        selection=selection,
        range_tree=range_tree,
        steps=steps,
        stage_map=stage_map,
        ledger=_concat(results.ledgers, LEDGER_COLUMNS),
        longest_gaps=merge_longest_gaps(results.gaps),
        blocked_host=_concat(results.blocked, BLOCKED_COLUMNS),
        peer_idle=_peer_idle(results.peer_idle),
        stage_stats=_summed(results.stage_stats, [PID, STAGE], STAGE_STAT_COLUMNS),
        top_kernels=top_kernels(
            _summed(results.kernels, [PID, STAGE, NAME], ["total_ns", "count"])
        ),
        api_call_totals=_summed(results.api_calls, [PID, STAGE, NAME], ["total", "count"]),
        op_census=_summed(results.op_census, OP_CENSUS_COLUMNS[:-1], OP_CENSUS_COLUMNS[-1:]),
        device_ops=sources.device_ops(),
        host_gaps=_concat(results.host_gaps, HOST_GAP_COLUMNS),
        launch_spacing=_summed(results.launch_spacing, SPACING_COLUMNS[:3], [LAUNCHES]),
        graph_setup_calls=_concat(results.graph_setup_calls, GRAPH_SETUP_COLUMNS),
        trace_start_ns=min(sources.trace_start_ns(), _earliest(trace.nvtx_ranges)),
        picked_steps=picked,
        step_details=results.step_details,
        windows=results.windows,
        collectives=collectives,
    )


def _earliest(ranges: pd.DataFrame) -> int:
    return int(ranges[START_NS].min()) if len(ranges) else np.iinfo(np.int64).max


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [frame for frame in frames if len(frame)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})
    return pd.concat(frames, ignore_index=True)


def _summed(frames: list[pd.DataFrame], keys: list[str], values: list[str]) -> pd.DataFrame:
    """Add per-window totals up per key."""
    frames = [frame for frame in frames if len(frame)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in [*keys, *values]})
    frame = pd.concat(frames, ignore_index=True)
    for key in keys:
        if isinstance(frame[key].dtype, pd.CategoricalDtype):
            frame[key] = frame[key].astype(str)
    return frame.groupby(keys, sort=True)[values].sum().reset_index()


def _memory_sources(trace: Trace, chunk_rows: int | None) -> RowSources:
    """A Trace's ops and calls as sorted chunks, as a streamed export would give them."""
    ops = trace.gpu_ops.sort_values(START_NS, kind="stable", ignore_index=True)
    calls = trace.api_calls.sort_values(START_NS, kind="stable", ignore_index=True)

    def chunks(frame: pd.DataFrame) -> ChunkSource:
        size = chunk_rows or max(len(frame), 1)
        return lambda: (frame.iloc[i : i + size] for i in range(0, len(frame), size))

    def trace_start() -> int:
        starts = [int(f[START_NS].iloc[0]) for f in (ops, calls) if len(f)]
        return min(starts) if starts else np.iinfo(np.int64).max

    def device_ops() -> pd.DataFrame:
        counts = trace.gpu_ops.groupby([PID, DEVICE_ID, OP_KIND], observed=True).size()
        return counts.rename("ops").reset_index()

    def known_pids() -> list[int]:
        return sorted(int(p) for p in set(trace.gpu_ops[PID]) | set(trace.api_calls[PID]))

    return RowSources(
        ops=(("GPU ops", chunks(ops)),),
        calls=chunks(calls),
        rows=len(ops) + len(calls),
        module_loads=lambda until_ns: trace.api_calls[trace.api_calls[START_NS] <= until_ns],
        device_ops=device_ops,
        trace_start_ns=trace_start,
        known_pids=known_pids,
        collectives=lambda chooser: _chosen_ops(trace.gpu_ops, chooser),
    )


def _chosen_ops(ops: pd.DataFrame, chooser: Callable[[pd.Index], np.ndarray]) -> pd.DataFrame:
    """The ops whose names `chooser` picks, the names as text (chooser sees each name once)."""
    category = ops[NAME].astype("category")
    picked = np.flatnonzero(chooser(pd.Index(category.cat.categories.astype(str))))
    chosen = ops.loc[
        np.isin(category.cat.codes.to_numpy(), picked), [START_NS, END_NS, PID, DEVICE_ID]
    ]
    return chosen.assign(**{NAME: category[chosen.index].astype(str)})
