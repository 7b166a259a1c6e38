"""`diff --repeats`: each side is several repeated captures of one program, not ranks of one
run. Each capture is analysed on its own; the step time is compared over the runs with their
run-to-run spread (repeats.py), the stage detail between the first capture of each side.

Which is which is checked, never guessed silently: exports captured at the same time are
ranks of one run (one report), exports captured one after another are repeats.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.diff.build import ComparedSide, Diff, diff_sides
from trace_gaps.diff.drift import (
    ProcessSpeed,
    SideSpeeds,
    compared_steps,
    gpu_speed,
    host_speed,
    machine_change_ns,
    measuring,
    process_speeds,
    speed_of,
)
from trace_gaps.diff.noise import practical_threshold_ns
from trace_gaps.diff.repeats import RunSpread, captured_together, run_spread
from trace_gaps.errors import TraceGapsError
from trace_gaps.nsys.export import check_is_sqlite
from trace_gaps.nsys.head import capture_window
from trace_gaps.records.report import Report
from trace_gaps.report.build import build_report
from trace_gaps.run.one import analyse_export


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


# A capture analysed for --repeats: its report (with step ledger) and its speed figures.
Run = tuple[Report, SideSpeeds]


def diff_repeats(before: list[Path], after: list[Path], options: AnalysisOptions) -> Diff:
    """The diff of two sides of repeated captures: run-level step time, and the same less
    each run's machine part (its drift against the first before capture), first-run detail."""
    runs = [
        [
            analyse_run(path, options, keep_models=side == 0 and i == 0)
            for i, path in enumerate(paths)
        ]
        for side, paths in enumerate((before, after))
    ]
    return compare_runs(runs[0], runs[1], (before[0].name, after[0].name))


def compare_runs(before: list[Run], after: list[Run], first_names: tuple[str, str]) -> Diff:
    """compare repeated captures analysed (analyse_run; the first before capture with its
    replay models): the runs' step time, the code's part of it, the first captures' detail."""
    means = [[_run_mean(report) for report, _ in side] for side in (before, after)]
    detail = diff_sides(
        ComparedSide(before[0][0], speeds=before[0][1]),
        ComparedSide(after[0][0], speeds=after[0][1]),
    )
    threshold = practical_threshold_ns(sum(means[0]) / len(means[0]))
    runs = run_spread(means[0], means[1], threshold)
    code_runs = _code_runs([before, after], means, threshold)
    note = (
        f"Repeated captures: {len(before)} before, {len(after)} after. The step time is "
        "compared over the runs (each run's mean step; its slowest process), with a t interval "
        "from their run-to-run spread; the stage detail below compares the first capture of "
        f"each side ({first_names[0]}, {first_names[1]}) with the bootstrap over its steps."
    )
    return replace(detail, runs=runs, code_runs=code_runs, notes=[note, *detail.notes])


def _code_runs(
    analysed: list[list[Run]], means: list[list[int]], threshold_ns: float
) -> RunSpread | None:
    """Each run's mean step less its machine part: the first before capture replayed at the
    run's host and GPU speed, less its plain replay (0 for itself); None where a run's speed
    was not measured. Steps are nested in runs: the t interval is over the runs' values."""
    reference = _slowest_speed(*analysed[0][0])
    if reference is None:
        return None
    corrected: list[list[int]] = [[], []]
    for side, runs in enumerate(analysed):
        for (report, speeds), mean in zip(runs, means[side], strict=True):
            speed = _slowest_speed(report, speeds)
            if speed is None:
                return None
            host, gpu = host_speed(reference, speed), gpu_speed(reference, speed)
            corrected[side].append(mean - machine_change_ns(reference, host, gpu))
    return run_spread(corrected[0], corrected[1], threshold_ns)


def _slowest_speed(report: Report, speeds: SideSpeeds) -> ProcessSpeed | None:
    """The speed of the run's slowest process (the one its step time is)."""
    if not report.processes:
        return None
    slowest = max(report.processes, key=lambda p: (p.steps.wall.mean_ns, -p.pid))
    return speed_of(speeds, slowest)


def analyse_run(path: Path, options: AnalysisOptions, *, keep_models: bool) -> Run:
    """One repeated capture analysed: its report and its processes' speed figures (with the
    replay models, to be replayed at other runs' speeds, where keep_models)."""
    check_is_sqlite(path)  # a symlink loop named in one line
    trace, analysis = analyse_export(path, measuring(options))
    report = build_report(trace, analysis, step_ledger=True)
    return report, process_speeds(analysis, compared_steps(report), keep_models=keep_models)


def _run_mean(report: Report) -> int:
    if not report.processes:
        raise TraceGapsError(f"{report.export.file}: no process with analysed steps")
    return max(p.steps.wall.mean_ns for p in report.processes)
