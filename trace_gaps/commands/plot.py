"""`trace-gaps plot timeline|steps`: one step's timeline as lanes, or every step's ledger as bars."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analysis_options import analysis_options
from trace_gaps.commands.arguments import HELP_OPTIONS, ExportsArg
from trace_gaps.commands.output_options import QuietOpt
from trace_gaps.commands.pictures import check_image_path, image_sources, zoom_window
from trace_gaps.errors import UsageError
from trace_gaps.streams import save_figure

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions

app = typer.Typer(
    help="Pictures of the steps: one step's timeline as lanes, or every step's ledger as bars.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)

ImageOpt = Annotated[Path, typer.Option("--output", "-o", help="Image to write: .png or .svg.")]
DemoOpt = Annotated[bool, typer.Option("--demo", help="Draw the shipped sample trace.")]


@app.command("timeline")
@analysis_options()
def plot_timeline(
    *,
    output: ImageOpt,
    exports: ExportsArg = None,
    demo: DemoOpt = False,
    median: Annotated[
        bool,
        typer.Option(
            "--median",
            help="The analysed step nearest the median wall time (default where the top "
            "candidate is not a collective wait, a sync or long host gaps; otherwise the "
            "default is the step where that time is largest).",
        ),
    ] = False,
    worst: Annotated[bool, typer.Option("--worst", help="The slowest analysed step.")] = False,
    step_index: Annotated[
        int | None,
        typer.Option(
            "--step-index", min=0, help="The step with this index (from 0, warm-up included)."
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option("--steps", metavar="A:B", help="Consecutive steps A to B-1 ('A:' from A on)."),
    ] = None,
    options: AnalysisOptions,
    from_ms: Annotated[
        float | None,
        typer.Option(
            "--from", min=0, metavar="MS", help="Draw from this time, in ms from the step start."
        ),
    ] = None,
    to_ms: Annotated[
        float | None,
        typer.Option(
            "--to", min=0, metavar="MS", help="Draw up to this time, in ms from the step start."
        ),
    ] = None,
    ranks: Annotated[
        bool,
        typer.Option(
            "--ranks",
            help="Every process's lanes on one time axis, for the same step index, so the "
            "skew between ranks shows (the default with several exports).",
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Draw a step as lanes: stages, CUDA calls, GPU streams, and GPU idle time by cause.

    A lane too dense to tell its spans apart says "saturated at this zoom": zoom in with
    --from/--to.
    """
    check_image_path(output)
    window_ns = zoom_window(from_ms, to_ms)
    from trace_gaps.plot import plot_timeline
    from trace_gaps.report.timeline import StepPick, TimelineRequest, choose_request
    from trace_gaps.run.timelines import run_report

    paths = image_sources(output, exports, demo)
    request = choose_request(step_index=step_index, steps=steps, worst=worst, median=median)
    # The median step stands in where the top finding is not one a step shows.
    requests = (request, TimelineRequest()) if request.pick is StepPick.FINDING else (request,)
    if ranks or len(paths) > 1:
        if options.process is not None:
            raise UsageError(
                "--ranks and several exports draw every process: give no --process with them."
            )
        requests = (dataclasses.replace(requests[-1], all_processes=True),)
    report = run_report(paths, options, timelines=requests)
    save_figure(plot_timeline(report, window_ns=window_ns), output, quiet=quiet)


@app.command("steps")
@analysis_options(offer=("steps",))
def plot_steps(
    *,
    output: ImageOpt,
    exports: ExportsArg = None,
    demo: DemoOpt = False,
    options: AnalysisOptions,
    quiet: QuietOpt = False,
) -> None:
    """Draw every step as a stacked bar of its ledger, a panel per process; warm-up faded."""
    check_image_path(output)
    from trace_gaps.plot import plot_steps
    from trace_gaps.run.timelines import run_report

    report = run_report(image_sources(output, exports, demo), options)
    save_figure(plot_steps(report), output, quiet=quiet)
