"""`diff --repeats`: each side is several repeated captures of one program, not ranks of one
run. Each capture is analysed on its own; the step time is compared over the runs with their
run-to-run spread (repeats.py), the stage detail between the first capture of each side.

Which is which is checked, never guessed silently: exports captured at the same time are
ranks of one run (one report), exports captured one after another are repeats.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trace_gaps.analysis.pipeline import AnalysisOptions
from trace_gaps.diff import Diff, diff_reports, practical_threshold_ns
from trace_gaps.errors import TraceGapsError
from trace_gaps.nsys.head import capture_window
from trace_gaps.records import Report
from trace_gaps.repeats import captured_together, run_spread
from trace_gaps.report import build_report
from trace_gaps.run import analyse_export


def check_side_kind(paths: list[Path], *, repeats: bool, side: str) -> None:
    """Refuse a side whose exports are not what the command line says: repeats captured at
    the same time, or ranks (no --repeats) captured one after another."""
    if len(paths) < 2:
        return
    windows = [capture_window(path) for path in paths]
    known = [w for w in windows if w is not None]
    if len(known) < 2:
        return
    together = captured_together(known)
    names = ", ".join(path.name for path in paths[:4]) + (", ..." if len(paths) > 4 else "")
    if repeats and together:
        raise TraceGapsError(
            f"the {side} exports ({names}) were captured at the same time: they are ranks of "
            "one run, not repeats; leave --repeats out to compare them as one run"
        )
    if not repeats and not together:
        raise TraceGapsError(
            f"the {side} exports ({names}) were captured one after another, not as ranks of "
            "one run: pass --repeats to compare repeated captures with their run-to-run noise"
        )


def diff_repeats(before: list[Path], after: list[Path], options: AnalysisOptions) -> Diff:
    """The diff of two sides of repeated captures: run-level step time, first-run detail."""
    reports = [[_report(path, options) for path in side] for side in (before, after)]
    means = [[_run_mean(report) for report in side] for side in reports]
    detail = diff_reports(reports[0][0], reports[1][0])
    runs = run_spread(means[0], means[1], practical_threshold_ns(sum(means[0]) / len(means[0])))
    note = (
        f"Repeated captures: {len(before)} before, {len(after)} after. The step time is "
        "compared over the runs (each run's mean step; its slowest process), with a t interval "
        "from their run-to-run spread; the stage detail below compares the first capture of "
        f"each side ({before[0].name}, {after[0].name}) with the bootstrap over its steps."
    )
    return replace(detail, runs=runs, notes=[note, *detail.notes])


def _report(path: Path, options: AnalysisOptions) -> Report:
    trace, analysis = analyse_export(path.resolve(), options)
    return build_report(trace, analysis, step_ledger=True)


def _run_mean(report: Report) -> int:
    if not report.processes:
        raise TraceGapsError(f"{report.export.file}: no process with analysed steps")
    return max(p.steps.wall.mean_ns for p in report.processes)
