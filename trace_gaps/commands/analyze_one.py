"""`trace-gaps analyze` of one export: read and analysed in windows of steps (on --jobs
workers), ranked, and shown; and the checks of the options before any work."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trace_gaps.commands.output_options import ReportOutput
from trace_gaps.commands.worker_options import capped_jobs
from trace_gaps.errors import TraceGapsError, UsageError, about_file
from trace_gaps.formats import Format
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.progress import progress
from trace_gaps.streams import say

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions


def check_analyze(options: AnalysisOptions, *, fmt: Format, what_if: str | None) -> None:
    """Refuse levers that do not parse, and --kernels in CSV, before any file is read."""
    from trace_gaps.analysis.replay.levers import LeverError, parse_levers

    if what_if is not None:
        try:
            parse_levers(what_if)
        except LeverError as error:
            raise UsageError(f"--what-if: {error}") from error
    if options.kernel_summary and fmt is Format.CSV:
        raise UsageError(
            "--kernels has no CSV form (the CSV is the ledger); use -f text, md or json."
        )


def check_analyze_run(
    *, demo: bool, what_if: str | None, jobs: int | None, scheduler: str | None
) -> None:
    """Refuse what several exports (or a --scheduler) cannot take."""
    if demo:
        raise UsageError("--scheduler needs exports, not --demo.")
    if what_if is not None:
        raise UsageError("--what-if predicts one export at a time: give one.")
    if jobs is not None and scheduler is not None:
        raise UsageError("give --jobs or --scheduler, not both.")


def analyze_one(
    path: Path,
    options: AnalysisOptions,
    *,
    top: int,
    what_if: str | None,
    jobs: int | None,
    named: str,
    shown: ReportOutput,
) -> None:
    """One export analysed, ranked and shown; named: the export as the command line gave it
    (for the report's own command lines)."""
    from trace_gaps.analysis.replay.levers import LeverError
    from trace_gaps.report.build import build_report
    from trace_gaps.run.one import analyse_export

    refuse_inputs_as_outputs([] if shown.output is None else [shown.output], [path])
    # The progress bar is cleared before anything is written.
    with progress(shown.quiet) as said, about_file(path):
        said(f"reading {path.name}")
        trace, analysis = analyse_export(
            path,
            options,
            on_window=lambda done, total: said(f"analysing {path.name}", done, total),
            jobs=capped_jobs(jobs, quiet=shown.quiet),
        )
        said("ranking candidates")
        # Only the JSON report holds every step's ledger (40,000 entries at 1,700 steps).
        try:
            report = build_report(
                trace, analysis, top=top, step_ledger=shown.fmt is Format.JSON, what_if=what_if
            )
        except LeverError as error:
            raise TraceGapsError(f"--what-if: {error}") from error
        drawn = shown.draw(report, export_argument=named)
    if not shown.quiet and analysis.window_pool.slower_than_one_process():
        say(analysis.window_pool.note(f"the {analysis.windows} windows"))
    shown.write(drawn)
