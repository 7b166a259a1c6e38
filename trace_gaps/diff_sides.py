"""The two sides of `diff`, analysed and compared: one after the other, or at once, the after
side in a forked process, when they are big and the cores too few for window workers."""

from __future__ import annotations

from pathlib import Path

from trace_gaps import parallel
from trace_gaps.analysis.pipeline import AnalysisOptions
from trace_gaps.diff import (
    Diff,
    StepBuckets,
    analysed_walls,
    analysis_bucket_tables,
    diff_reports,
    step_bucket_tables,
    without_tabled_steps,
)
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.inputs import resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.report import Report, build_report
from trace_gaps.run import analyse_export
from trace_gaps.side_draws import BeforeSideDraws, DrawRelay, SideMeans, after_side_means

# Sides analysed side by side, each in a process of its own, when they are this big in all
# and the machine has too few cores for window workers (parallel.default_jobs() is 1).
DIFF_SIDES_APART_BYTES = 32_000_000


def diff_sides(
    sides: list[list[Path]], options: tuple[AnalysisOptions, AnalysisOptions], output: Path | None
) -> Diff:
    """BEFORE → AFTER, each side one export or several of one run; output: the diff's own
    file, never one of the exports."""
    apart = diff_jobs(sides) == 2
    # Two sides at once on few cores keep both busy: read-ahead threads only add switches.
    shared = (output, DrawRelay())  # the relay: inherited by a forked side
    before_task = (sides[0], options[0], not apart, True)
    after_task = (sides[1], options[1], not apart, False)
    # Apart: the after side in a child forked now, the before side in this process (one
    # fork, not two; forked() runs it here afterwards where it cannot fork).
    after_side = (
        parallel.forked(diff_side, shared, *after_task)
        if apart
        else lambda: diff_side(shared, *after_task)
    )
    before_report, before_buckets, before_means = diff_side(shared, *before_task)
    after_report, after_buckets, after_means = after_side()
    return diff_reports(
        before_report,
        after_report,
        step_buckets=(before_buckets, after_buckets),
        side_means=(before_means, after_means),
    )


def diff_jobs(sides: list[list[Path]]) -> int:
    """2: analyse the two sides of a diff at once, the after side in a forked process; 1: one
    after the other (each then has its own window workers where the cores allow them)."""
    size = sum(path.stat().st_size for paths in sides for path in paths if path.is_file())
    return 2 if parallel.default_jobs() == 1 and size >= DIFF_SIDES_APART_BYTES else 1


def diff_side(
    shared: tuple[Path | None, DrawRelay],
    paths: list[Path],
    options: AnalysisOptions,
    read_ahead: bool,
    is_before: bool,
) -> tuple[Report, StepBuckets, SideMeans | None]:
    """One side of a diff, analysed: its Report, its step bucket tables and its bootstrap
    means (made here, so that two sides in two processes make theirs at once; the means
    where the relay lets them be drawn here: side_draws.py), the report without the step
    ledger entries the tables hold (diff needs no more of them). One export or several of
    one run (a quoted glob).

    shared: the diff's own file and the draws' relay (what both sides share).
    read_ahead False: one export is read without read-ahead threads (analyse_export)."""
    output, relay = shared
    if len(paths) > 1:
        from trace_gaps.multi import analyse_exports

        resolved = [resolve_export(path, False) for path in paths]
        if output is not None:
            refuse_inputs_as_outputs([output], resolved)
        result = analyse_exports(resolved, options)
        if result.failed:
            failed, message = result.failed[0]
            raise TraceGapsError(f"{failed}: not analysed: {message}")
        tables = step_bucket_tables(result.report)
        return without_tabled_steps(result.report, tables), tables, None
    path = paths[0]
    with about_file(path):
        export = resolve_export(path, False)
        if output is not None:
            refuse_inputs_as_outputs([output], [export])
        draws = BeforeSideDraws(relay) if is_before else None
        trace, analysis = analyse_export(
            export.resolve(),
            options,
            read_ahead=read_ahead,
            on_steps=None if draws is None else draws.on_steps,
        )
        # The tables from the analysis' ledger: the report's step ledger is not made.
        report = build_report(trace, analysis, step_ledger=False)
        tables = analysis_bucket_tables(analysis)
    means = None
    if len(report.processes) == len(tables) == 1:
        pid, table = next(iter(tables.items()))
        walls = analysed_walls(analysis, pid)
        means = draws.means(walls, table) if draws else after_side_means(relay, walls, table)
    return report, tables, means
