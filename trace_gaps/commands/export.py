"""`trace-gaps export perfetto`: the analysis in another tool's format."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analysis_options import TopOpt, analysis_options
from trace_gaps.commands.arguments import HELP_OPTIONS, ExportsArg
from trace_gaps.commands.output_options import QuietOpt
from trace_gaps.inputs import given_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.streams import write_output

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions

app = typer.Typer(
    help="The analysis in another tool's format.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)


@app.command("perfetto")
@analysis_options()
def export_perfetto(
    *,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="JSON file to write (opens in ui.perfetto.dev).")
    ],
    exports: ExportsArg = None,
    demo: Annotated[bool, typer.Option("--demo", help="Draw the shipped sample trace.")] = False,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            metavar="A:B",
            help="Steps A to B-1 of each process ('A:' from A on; default: 0:20).",
        ),
    ] = None,
    options: AnalysisOptions,
    top: TopOpt = 10,
    quiet: QuietOpt = False,
) -> None:
    """Write a Chrome trace (JSON) of the analysis for ui.perfetto.dev.

    Steps, stages, CUDA calls, GPU ops, idle, top candidates; exports on one clock.
    """
    from trace_gaps.render.perfetto import render_perfetto
    from trace_gaps.run.timelines import clocked_reports, steps_request

    paths = given_exports(exports, demo, verb="exports")
    refuse_inputs_as_outputs([output], paths)
    paths = [resolve_export(path, False) for path in paths] or [resolve_export(None, demo)]
    refuse_inputs_as_outputs([output], paths)
    sources = clocked_reports(paths, options, steps_request(steps), top=top)
    write_output(render_perfetto(sources), output, quiet=quiet)
