"""The side runner: a diff's two sides analysed, and handed to its statistics (diff.py) as
plain records, ComparedSide, whichever way they were run.

One after the other, or at once when they are big and the cores are too few for window
workers or enough for both sides' (parallel.default_jobs() each, and a main process each):
the after side in a child forked from this process, the before side here. Each
side also makes, beside its analysis, what the statistics would otherwise make from its
report after both sides are done: its step bucket tables (from the analysis' ledger frame;
the report is then built without step ledger entries, a third of the bytes a forked side
sends back), and the bootstrap's resampled means (side_draws.py relays the generator from
the before side to the after side).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps import parallel
from trace_gaps.analysis.engine.metrics import LEDGER
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions
from trace_gaps.analysis.ledger import BUCKET, CAUSE, DURATION_NS
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID
from trace_gaps.diff.build import ComparedSide
from trace_gaps.diff.drift import SideSpeeds, compared_steps, measuring, process_speeds
from trace_gaps.diff.side_draws import BeforeSideDraws, DrawRelay, after_side_means
from trace_gaps.diff.step_tables import StepBuckets, bucket_table, step_bucket_tables
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.inputs import resolve_export
from trace_gaps.model import END_NS, PID, START_NS, Trace
from trace_gaps.nsys.export import check_is_sqlite
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.report.build import Report, build_report
from trace_gaps.run.one import analyse_export

# Sides analysed side by side, each in a process of its own, when they are this big in all
# and the machine has too few cores for window workers (parallel.default_jobs() is 1), or
# enough for both sides' workers at once.
DIFF_SIDES_APART_BYTES = 32_000_000


def run_sides(
    sides: list[list[Path]], options: tuple[AnalysisOptions, AnalysisOptions], output: Path | None
) -> tuple[ComparedSide, ComparedSide]:
    """BEFORE and AFTER analysed, each side one export or several of one run; output: the
    diff's own file, never one of the exports."""
    apart = diff_jobs(sides) == 2
    # Two sides at once on few cores keep both busy: read-ahead threads only add switches.
    read_ahead = not apart or parallel.default_jobs() > 1
    shared = (output, DrawRelay())  # the relay: inherited by a forked side
    before_task = (sides[0], options[0], read_ahead, True)
    after_task = (sides[1], options[1], read_ahead, False)
    # Apart: the after side in a child forked now, the before side in this process (one
    # fork, not two; forked() runs it here afterwards where it cannot fork).
    after_side = (
        parallel.forked(run_side, shared, *after_task)
        if apart
        else lambda: run_side(shared, *after_task)
    )
    before = run_side(shared, *before_task)
    return before, after_side()


def diff_jobs(sides: list[list[Path]]) -> int:
    """2: analyse the two sides of a diff at once, the after side in a forked process; 1: one
    after the other (each with its window workers). At once where the exports are big and
    the cores either too few for workers or enough for both sides' workers and main
    processes (16 cores: two sides of 4 workers)."""
    size = sum(path.stat().st_size for paths in sides for path in paths if path.is_file())
    jobs = parallel.default_jobs()
    room = jobs == 1 or parallel.usable_cores() >= 2 * (jobs + 1)
    return 2 if room and size >= DIFF_SIDES_APART_BYTES else 1


def run_side(
    shared: tuple[Path | None, DrawRelay],
    paths: list[Path],
    options: AnalysisOptions,
    read_ahead: bool,
    is_before: bool,
) -> ComparedSide:
    """One side of a diff, analysed: its report without the step ledger entries its tables
    hold (the statistics need no more of them), its step bucket tables, and its bootstrap
    means where the relay lets them be drawn here (one process a side: side_draws.py). One
    export or several of one run (a quoted glob).

    shared: the diff's own file and the draws' relay (what both sides share).
    read_ahead False: one export is read without read-ahead threads (analyse_export)."""
    output, relay = shared
    if len(paths) > 1:
        from trace_gaps.run.multi import analyse_exports

        resolved = [resolve_export(path, False) for path in paths]
        if output is not None:
            refuse_inputs_as_outputs([output], resolved)
        result = analyse_exports(
            resolved, measuring(options), measure=partial(export_speeds, keep_models=is_before)
        )
        if result.failed:
            failed, message = result.failed[0]
            raise TraceGapsError(f"{failed}: not analysed: {message}")
        tables = step_bucket_tables(result.report)
        speeds = {key: speed for measured in result.measured for key, speed in measured.items()}
        return ComparedSide(without_tabled_steps(result.report, tables), tables, speeds=speeds)
    path = paths[0]
    with about_file(path):
        export = resolve_export(path, False)
        if output is not None:
            refuse_inputs_as_outputs([output], [export])
        draws = BeforeSideDraws(relay) if is_before else None
        check_is_sqlite(export)  # a symlink loop named in one line
        trace, analysis = analyse_export(
            export,  # as typed: the errors name it so, as every other command's
            measuring(options),
            read_ahead=read_ahead,
            on_steps=None if draws is None else draws.on_steps,
        )
        # The tables from the analysis' ledger: the report's step ledger is not made.
        report = build_report(trace, analysis, step_ledger=False)
        tables = analysis_bucket_tables(analysis)
        # The before side keeps its replay models: it is replayed at the after side's speed.
        speeds = process_speeds(analysis, compared_steps(report), keep_models=is_before)
    means = None
    if len(report.processes) == len(tables) == 1:
        pid, table = next(iter(tables.items()))
        walls = analysed_walls(analysis, pid)
        means = draws.means(walls, table) if draws else after_side_means(relay, walls, table)
    return ComparedSide(report, tables, means, speeds)


def export_speeds(
    analysed: tuple[Trace, Analysis], report: Report, *, keep_models: bool
) -> SideSpeeds:
    """One export of a side of several: its processes' speeds, keyed by its file as the
    merged report's processes name it (a task where its analysis is)."""
    _, analysis = analysed
    return process_speeds(
        analysis, compared_steps(report), keep_models=keep_models, export_file=report.export.file
    )


def analysis_bucket_tables(analysis: Analysis) -> StepBuckets:
    """diff.step_bucket_tables of the analysis' report, from its ledger frame: the same
    tables without the report's step ledger entries (the 1M capture: 20 ms against the
    entries' 28 ms and their table's 40 ms)."""
    names = np.array(analysis.stage_map.names, dtype=object)
    ledger = analysis.metrics[LEDGER]
    tables: StepBuckets = {}
    for pid in sorted(analysis.steps[PID].unique()):
        analysed = pd.Index(_analysed_steps(analysis, pid)[STEP_ID].to_numpy())
        if analysed.empty:
            continue
        rows = ledger[ledger[STEP_ID].isin(analysed)]
        entries = pd.DataFrame(
            {
                "step_id": rows[STEP_ID].to_numpy(),
                "stage": names[rows[STAGE].to_numpy()],
                "bucket": rows[BUCKET].to_numpy(),
                "cause": rows[CAUSE].to_numpy(),
                "duration_ns": rows[DURATION_NS].to_numpy(),
            }
        )
        tables[int(pid)] = bucket_table(entries, analysed)
    return tables


def without_tabled_steps(report: Report, tables: StepBuckets) -> Report:
    """The report without the step ledger entries of the processes that have a step bucket
    table: the statistics read those entries only to make the tables. A side sends a third
    of the bytes back (the 1M capture: 1.7 MB -> 0.5 MB), and diff's own process loads it
    in 4 ms instead of 85 (the entries were 40,000 objects)."""
    processes = [
        replace(process, step_ledger=[]) if process.pid in tables else process
        for process in report.processes
    ]
    return replace(report, processes=processes)


def analysed_walls(analysis: Analysis, pid: int) -> np.ndarray:
    """The wall times of a process' analysed steps, as its report's step rows give them
    (in their order: the rows of its table in analysis_bucket_tables)."""
    steps = _analysed_steps(analysis, pid)
    walls: np.ndarray = (steps[END_NS] - steps[START_NS]).to_numpy(dtype=np.int64)
    return walls


def _analysed_steps(analysis: Analysis, pid: int) -> pd.DataFrame:
    # In the order of the report's step rows (the walls the statistics pair them with).
    steps = analysis.steps[analysis.steps[PID].to_numpy() == pid]
    analysed: pd.DataFrame = steps[~steps[IS_WARMUP].to_numpy()]
    return analysed
