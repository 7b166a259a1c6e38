"""Exports analysed with the timelines of the steps to draw: for export perfetto, a report
per export, several on export 0's clock (clocked_reports); for report's bundle, one report of
the run and the exports that failed (pictured_run); for plot, one report of one run, the
exports of any other refused (run_report)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest, choose_request
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.model import ExportInfo
from trace_gaps.records.notes import NoteCode
from trace_gaps.records.report import Report
from trace_gaps.report.build import build_report

DEFAULT_STEPS = 20


def steps_request(steps: str | None) -> TimelineRequest:
    """Steps A to B-1 ("A:B") of every process's step thread; by default the first
    DEFAULT_STEPS."""
    if steps is None:
        return TimelineRequest(StepPick.RANGE, first=0, stop=DEFAULT_STEPS, all_processes=True)
    return replace(choose_request(steps=steps), all_processes=True)


def clocked_reports(
    paths: Sequence[Path], options: AnalysisOptions, request: TimelineRequest, *, top: int = 10
) -> list[Report]:
    """Each export analysed with the request's timelines; several as one run (run/multi.py), their
    timelines' starts counted from export 0's trace start on the common clock."""
    if len(paths) == 1:
        from trace_gaps.run.one import analyse_export

        with about_file(paths[0]):
            trace, analysis = analyse_export(paths[0], options, timelines=(request,))
            return [build_report(trace, analysis, top=top)]
    from trace_gaps.run.multi import analyse_exports

    result = analyse_exports(paths, options, top=top, timelines=(request,))
    if result.failed:
        failed, message = result.failed[0]
        raise TraceGapsError(f"{failed}: not analysed: {message}")
    return result.reports


@dataclass(frozen=True, slots=True)
class PicturedRun:
    """One report of the exports that could be analysed, their infos, and those that failed."""

    report: Report
    infos: list[ExportInfo]
    failed: list[tuple[Path, str]]


def pictured_run(
    paths: Sequence[Path],
    options: AnalysisOptions,
    *,
    top: int,
    timelines: tuple[TimelineRequest, ...],
) -> PicturedRun:
    """One export's report, or several as one run (run/multi.py), with the timelines asked."""
    if len(paths) > 1:
        from trace_gaps.run.multi import analyse_exports

        result = analyse_exports(paths, options, top=top, timelines=timelines)
        return PicturedRun(result.report, result.infos, result.failed)
    from trace_gaps.run.one import load_and_report

    trace, report = load_and_report(paths[0], options, top=top, timelines=timelines)
    return PicturedRun(report, [trace.info], [])


def run_report(
    paths: Sequence[Path],
    options: AnalysisOptions,
    *,
    timelines: tuple[TimelineRequest, ...] = (),
    top: int = 10,
) -> Report:
    """One export's report, or several of one run as one (pictured_run), for a picture on one
    time axis: an export that could not be analysed, or that is not of the first one's run
    (analysed apart, on its own clock), is refused with analyze's reason."""
    run = pictured_run(paths, options, top=top, timelines=timelines)
    if run.failed:
        failed, message = run.failed[0]
        raise TraceGapsError(f"{failed}: not analysed: {message}")
    if run.report.apart_exports:
        apart = ", ".join(run.report.apart_exports)
        why = " ".join(n.text for n in run.report.notes if n.code == NoteCode.EXPORTS_APART)
        raise TraceGapsError(
            f"{why or apart + ' is not of the first export' + chr(39) + 's run.'} "
            f"A picture has one time axis: draw {apart} on its own."
        )
    return run.report
