"""Run the analyses in order: steps → stages → (per window) ledger and launches → merged totals.

The step structure (range tree, steps, warm-up: structure.py; the stage map) is global and
comes from the NVTX ranges alone; everything that reads ops and calls runs window by window
(see windows.py, spans.py) and is merged here into one Analysis.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import CollectiveMatch, match_collectives, user_collectives
from trace_gaps.analysis.engine.frames import WindowInputs
from trace_gaps.analysis.engine.memory import memory_sources
from trace_gaps.analysis.engine.metric import MergedMetrics
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest, choose_steps
from trace_gaps.analysis.engine.spans import analyse_in_spans, span_window_rows, spans_can_run
from trace_gaps.analysis.engine.streams import RowStream, of_process
from trace_gaps.analysis.engine.structure import StepStructure, WholeRows, build_structure
from trace_gaps.analysis.engine.windows import WindowResults, analyse_in_windows, plan_windows
from trace_gaps.analysis.gpu_metrics import sample_reach_ns
from trace_gaps.analysis.host import OsCallIndex, held_os_calls
from trace_gaps.analysis.kinds import kind_table, of_one_kind, ordered_kinds
from trace_gaps.analysis.stages import StageMap, map_stages, stage_calls
from trace_gaps.analysis.step_choice import StepSelection
from trace_gaps.analysis.step_range import StepRange, restrict_steps
from trace_gaps.analysis.steps import (
    IS_WARMUP,
    STEP_ID,
)
from trace_gaps.analysis.threads import borrowed_threads, lent_threads
from trace_gaps.model import (
    API_CALL_COLUMNS,
    END_NS,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    OS_CALL_COLUMNS,
    START_NS,
    ChunkSource,
    NeedsWholeTrace,
    RowSources,
    Trace,
    empty_frame,
)
from trace_gaps.parallel import PoolTime


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """What the user chose; times in ns."""

    step_name: str | None = None
    skip: int | None = None
    depth: int = 1
    process: int | None = None
    kind: str | None = None  # analyse only the steps of this kind (families.PHASE_WORDS)
    domain: str | None = None  # steps and stages from this NVTX domain only ("default": 0)
    # Regular expressions of kernel names that are collectives too (--collective).
    collective_patterns: tuple[str, ...] = ()
    step_range: StepRange | None = None  # analyse only these step indices (--steps A:B)
    kernel_summary: bool = False  # keep every analysed op's duration (analyze --kernels)


@dataclass(frozen=True, slots=True)
class Analysis:
    """The step structure and every merged result, for the report and the plots to read."""

    options: AnalysisOptions
    selection: StepSelection
    range_tree: pd.DataFrame
    steps: pd.DataFrame
    stage_map: StageMap
    metrics: MergedMetrics  # every declared metric (metrics.py): analysis.metrics[LEDGER]
    device_ops: pd.DataFrame  # per (pid, device, kind): ops of every process in the export
    trace_start_ns: int  # the earliest op, call or range in the export
    picked_steps: tuple[tuple[TimelineRequest, pd.DataFrame], ...]  # per timeline request
    windows: int  # how many windows the analysis ran in
    collectives: CollectiveMatch  # every collective op of the export, matched across processes
    kinds: pd.DataFrame = field(default_factory=pd.DataFrame)  # kinds.KIND_COLUMNS, per thread
    # Step instances once overlapping ones are dropped, before --steps and the kind chose
    # among them (-1: not known; layout_notes.overlapping_steps).
    steps_cut: int = -1
    other_kinds: tuple[Analysis, ...] = ()  # the analyses of the other kinds (analyse_kinds)
    # Launching thread -> the step thread it stands in for (threads.borrowed_threads).
    borrowed_threads: dict[int, int] = field(default_factory=dict)
    # Where the window workers' time went (jobs > 1): whether they paid.
    window_pool: PoolTime = field(default_factory=PoolTime)

    @property
    def kind(self) -> str | None:
        """The kind of step analysed here, None where steps do not come in kinds."""
        return self.options.kind

    def by_kind(self) -> tuple[Analysis, ...]:
        """This analysis and those of the other kinds, decode first."""
        return (self, *self.other_kinds)


def analyse_kinds(
    analyse: Callable[[AnalysisOptions], Analysis], options: AnalysisOptions
) -> Analysis:
    """Analyse every kind of step on its own when the steps come in kinds (kinds.py): the
    first kind (decode where there is one) is returned, the others in its other_kinds.
    With options.kind set, or steps of one kind, this is one analysis."""
    first = analyse(options)
    if options.kind is not None or first.kind is None:
        return first
    kinds = ordered_kinds(first.kinds)
    others = tuple(analyse(replace(options, kind=kind)) for kind in kinds[1:])
    return replace(first, other_kinds=others)


def analyse_trace(
    trace: Trace,
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    window_rows: int | None = None,
    chunk_rows: int | None = None,
    collectives: CollectiveMatch | None = None,
    on_steps: Callable[[pd.DataFrame], None] | None = None,
) -> Analysis:
    """Analyse a Trace held in memory; window_rows None analyses it as one window.

    window_rows and chunk_rows cut the analysis as a streamed export is cut (for tests).
    on_steps: as analyse_rows'.
    """
    sources = memory_sources(trace, chunk_rows)
    return analyse_kinds(
        lambda chosen: analyse_rows(
            trace,
            sources,
            chosen,
            timelines=timelines,
            window_rows=window_rows,
            collectives=collectives,
            on_steps=on_steps,
        ),
        options,
    )


REPLAY_STEPS_MAX = 48  # steps what-if replays per thread


def replay_steps(steps: pd.DataFrame, most: int = REPLAY_STEPS_MAX) -> frozenset[int]:
    """The steps what-if replays: per thread, its analysed steps, or `most` of them evenly
    spaced in wall-time order when it has more (their mean stays near the mean step)."""
    analysed = steps[~steps[IS_WARMUP]]
    chosen: list[int] = []
    for _, thread in analysed.groupby(GLOBAL_TID, sort=True):
        walls = (thread[END_NS] - thread[START_NS]).to_numpy()
        ids = thread[STEP_ID].to_numpy()[np.argsort(walls, kind="stable")]
        if len(ids) > most:
            ids = ids[np.linspace(0, len(ids) - 1, most).round().astype(np.int64)]
        chosen.extend(int(i) for i in ids)
    return frozenset(chosen)


def analyse_rows(
    trace: Trace,
    sources: RowSources,
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    window_rows: int | None = None,
    on_window: Callable[[int, int], None] | None = None,
    collectives: CollectiveMatch | None = None,
    jobs: int = 1,
    on_steps: Callable[[pd.DataFrame], None] | None = None,
) -> Analysis:
    """Analyse rows streamed from sources; trace holds the ranges, threads and OS calls.

    collectives, when given, is the match made across several exports (multi.py), with this
    export's ops as export 0 in its own clock; otherwise the export's collectives are matched
    among its own processes. Raises NeedsWholeTrace when the rows cannot be analysed window
    by window. jobs > 1: that many worker processes each read and analyse spans of the
    windows from the export itself where the sources can be read so (sources.spans:
    analyse_in_spans), else compute the windows' metrics while this process reads on
    (analyse_in_windows); the result is the same. on_steps is
    called with the steps (the Analysis' steps, warm-up marked) once they are cut, before
    any op or call is analysed.
    """
    pid = options.process
    structure = build_structure(
        trace,
        sources,
        step_name=options.step_name,
        process=pid,
        domain=options.domain,
        skip=options.skip,
    )
    steps = structure.steps
    if options.step_range is not None:
        steps = restrict_steps(steps, options.step_range)
    kinds = kind_table(steps)
    steps, kind = of_one_kind(steps, kinds, options.kind, trace.info.path)
    options = replace(options, kind=kind)
    if on_steps is not None:
        on_steps(steps)
    borrowed = borrowed_threads(steps, sources)
    stage_map = map_stages(structure.range_tree, steps, depth=options.depth, borrowed=borrowed)
    picked = tuple((request, choose_steps(steps, request)) for request in timelines)
    # Matched across every process, --process or not: a wait depends on the peers.
    if collectives is None:
        chooser = user_collectives(options.collective_patterns)
        collectives = match_collectives(sources.collectives(chooser))
    inputs = WindowInputs(
        steps=steps,
        stage_map=stage_map,
        os_calls=OsCallIndex.of(empty_frame(OS_CALL_COLUMNS)),  # each window's: its own
        collective_waits=collectives.lookup(),
        detail_step_ids=_step_ids(picked, finding=False),
        finding_step_ids=_step_ids(picked, finding=True),
        replay_step_ids=replay_steps(steps),
        graph_mode=trace.info.graph_trace_mode,
        kernel_durations=options.kernel_summary,
        gpu_metrics=sources.gpu_metrics,
    )
    # Each call staged once, as read; a borrowed thread's as the step thread's.
    staging = functools.partial(_staged, borrowed=borrowed, stage_map=stage_map)
    results = _analyse_windows(
        trace, sources, structure.whole, inputs, staging, pid, window_rows, on_window, jobs
    )
    return _merge(
        trace,
        options,
        structure,
        steps,
        stage_map,
        picked,
        results,
        sources,
        collectives,
        kinds,
        borrowed,
    )


def _analyse_windows(
    trace: Trace,
    sources: RowSources,
    whole: WholeRows | None,
    inputs: WindowInputs,
    staging: Callable[[pd.DataFrame], pd.DataFrame],
    pid: int | None,
    window_rows: int | None,
    on_window: Callable[[int, int], None] | None,
    jobs: int,
) -> WindowResults:
    """Every window's metrics, merged: the windows in spans read by workers where those can
    run (analyse_in_spans), else the rows streamed in this process (analyse_in_windows).
    whole: the rows, read at once, of whole-process steps (one window, in this process)."""
    steps = inputs.steps
    reach = sample_reach_ns(inputs.gpu_metrics)
    op_chunks: list[tuple[str, Iterator[pd.DataFrame]]] | None = None
    call_chunks: Iterator[pd.DataFrame] | None = None
    rows = sources.rows
    if whole is not None:
        op_chunks = [("GPU ops", iter([whole.ops.sort_values(START_NS, kind="stable")]))]
        call_chunks = iter([whole.calls.sort_values(START_NS, kind="stable")])
        rows, window_rows = len(whole.ops) + len(whole.calls), None
    if sources.spans is not None and op_chunks is None and window_rows is not None:
        spanned = plan_windows(
            steps, rows, span_window_rows(rows, jobs, window_rows), sample_reach_ns=reach
        )
        if spans_can_run(jobs, spanned):
            try:
                return analyse_in_spans(
                    sources.spans, staging, pid, inputs, spanned, on_window, jobs
                )
            except NeedsWholeTrace:
                pass  # streamed in this process, which decides
    return analyse_in_windows(
        [
            RowStream(name, chunks, empty_frame(GPU_OP_COLUMNS))
            for name, chunks in op_chunks or _chunks_of(sources.ops, pid)
        ],
        RowStream(
            "CUDA API",
            call_chunks or of_process(pid, sources.calls()),
            empty_frame(API_CALL_COLUMNS),
            staging,
        ),
        inputs,
        plan_windows(steps, rows, window_rows, sample_reach_ns=reach),
        sources.os_calls_near or held_os_calls(trace.os_calls),
        on_window,
        jobs=jobs,
    )


def _step_ids(
    picked: tuple[tuple[TimelineRequest, pd.DataFrame], ...], *, finding: bool
) -> frozenset[int]:
    """The ids of the steps picked by FINDING requests (finding), or by the others: a FINDING
    request keeps the details of its one step only (metrics.FINDING_STEPS)."""
    return frozenset(
        int(i)
        for request, chosen in picked
        if (request.pick is StepPick.FINDING) == finding
        for i in chosen[STEP_ID]
    )


def _staged(calls: pd.DataFrame, *, borrowed: dict[int, int], stage_map: StageMap) -> pd.DataFrame:
    """The calls staged (stage open on their thread); a borrowed thread's as its step
    thread's (threads.borrowed_threads)."""
    return stage_calls(lent_threads(calls, borrowed), stage_map)


def _chunks_of(
    sources: tuple[tuple[str, ChunkSource], ...], pid: int | None
) -> list[tuple[str, Iterator[pd.DataFrame]]]:
    return [(name, of_process(pid, chunks())) for name, chunks in sources]


def _merge(
    trace: Trace,
    options: AnalysisOptions,
    structure: StepStructure,
    steps: pd.DataFrame,
    stage_map: StageMap,
    picked: tuple[tuple[TimelineRequest, pd.DataFrame], ...],
    results: WindowResults,
    sources: RowSources,
    collectives: CollectiveMatch,
    kinds: pd.DataFrame,
    borrowed: dict[int, int],
) -> Analysis:
    return Analysis(
        options=options,
        selection=structure.selection,
        range_tree=structure.range_tree,
        steps=steps,
        stage_map=stage_map,
        metrics=results.metrics,
        device_ops=sources.device_ops(),
        trace_start_ns=min(sources.trace_start_ns(), _earliest(trace.nvtx_ranges)),
        picked_steps=picked,
        windows=results.windows,
        collectives=collectives,
        kinds=kinds,
        steps_cut=len(structure.steps),
        borrowed_threads=borrowed,
        window_pool=results.pool,
    )


def _earliest(ranges: pd.DataFrame) -> int:
    return int(ranges[START_NS].min()) if len(ranges) else np.iinfo(np.int64).max
