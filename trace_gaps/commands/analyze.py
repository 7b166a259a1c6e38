"""`trace-gaps analyze`: the per-step, per-stage ledger and the ranked candidates."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analyze_run import analyze_run
from trace_gaps.commands.options import (
    ExportsArg,
    JobsOpt,
    NoColorOpt,
    QuietOpt,
    SchedulerOpt,
    TopOpt,
    analysis_options,
    capped_jobs,
    text_terminal,
)
from trace_gaps.errors import TraceGapsError, UsageError, about_file
from trace_gaps.formats import Format
from trace_gaps.inputs import given_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.progress import progress
from trace_gaps.streams import say, write_output

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions

WhatIfOpt = Annotated[
    str | None,
    typer.Option(
        "--what-if",
        help="Predict the step with levers pulled, e.g. 'verify_forward=graph,sample=nosync' "
        "(graph, nogaps, host50, nohost, nosync, noapi, ontime, gpuN, sol; docs/what-if.md).",
    ),
]


@analysis_options(offer=("steps", "kernels"))
def analyze(
    *,
    exports: ExportsArg = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Analyse the sample trace shipped with trace-gaps.")
    ] = False,
    options: AnalysisOptions,
    top: TopOpt = 10,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.TEXT,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    quiet: QuietOpt = False,
    jobs: JobsOpt = None,
    scheduler: SchedulerOpt = None,
    what_if: WhatIfOpt = None,
    no_color: NoColorOpt = False,
) -> None:
    """Per-step, per-stage ledger of GPU busy and idle time, and the ranked bottlenecks."""
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
    paths = given_exports(exports, demo, verb="analyses")
    outputs = [] if output is None else [output]
    refuse_inputs_as_outputs(outputs, paths)
    if len(paths) > 1 or scheduler is not None:
        if demo:
            raise UsageError("--scheduler needs exports, not --demo.")
        if what_if is not None:
            raise UsageError("--what-if predicts one export at a time: give one.")
        if jobs is not None and scheduler is not None:
            raise UsageError("give --jobs or --scheduler, not both.")
        analyze_run(
            paths,
            options,
            top=top,
            fmt=fmt,
            output=output,
            quiet=quiet,
            jobs=jobs,
            scheduler=scheduler,
            no_color=no_color,
        )
        return
    from trace_gaps.render import report_pieces
    from trace_gaps.report.build import build_report
    from trace_gaps.run.one import analyse_export

    path = resolve_export(paths[0] if paths else None, demo)
    refuse_inputs_as_outputs(outputs, [path])
    # The progress bar is cleared before anything is written.
    with progress(quiet) as shown, about_file(path):
        shown(f"reading {path.name}")
        trace, analysis = analyse_export(
            path,
            options,
            on_window=lambda done, total: shown(f"analysing {path.name}", done, total),
            jobs=capped_jobs(jobs, quiet=quiet),
        )
        shown("ranking candidates")
        # Only the JSON report holds every step's ledger (40,000 entries at 1,700 steps).
        try:
            report = build_report(
                trace, analysis, top=top, step_ledger=fmt is Format.JSON, what_if=what_if
            )
        except LeverError as error:
            raise TraceGapsError(f"--what-if: {error}") from error
        terminal = text_terminal(output, no_color=no_color)
        named = "--demo" if demo else shlex.quote(str(paths[0]))
        text = report_pieces(report, fmt, terminal, export_argument=named)
    if not quiet and analysis.window_pool.slower_than_one_process():
        say(analysis.window_pool.note(f"the {analysis.windows} windows"))
    write_output(text, output, quiet=quiet, styled=fmt is Format.TEXT and terminal.color)
