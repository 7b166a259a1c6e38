"""`trace-gaps analyze`: the per-step, per-stage ledger and the ranked candidates."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analysis_options import (
    CommandOption,
    TopOpt,
    offered_options,
    with_options,
)
from trace_gaps.commands.analyze_one import analyze_one, check_analyze, check_analyze_run
from trace_gaps.commands.analyze_run import analyze_run
from trace_gaps.commands.arguments import ExportsArg
from trace_gaps.commands.output_options import NoColorOpt, QuietOpt, ReportOutput
from trace_gaps.commands.worker_options import JobsOpt, SchedulerOpt
from trace_gaps.formats import Format
from trace_gaps.inputs import given_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions

WhatIfOpt = Annotated[
    str | None,
    typer.Option(
        "--what-if",
        help="Predict the step with levers pulled, e.g. 'verify_forward=graph,sample=nosync' "
        "(graph, nogaps, host50 or hostN, nohost, nosync, noapi, ontime, gpuN, sol; docs/what-if.md).",
    ),
]


# The options both surfaces take (the MCP tools take them too, mcp/parameters.py).
ANALYZE_OPTIONS = (
    *offered_options(offer=("steps", "kernels")),
    CommandOption("top", TopOpt, 10),
)


@with_options(ANALYZE_OPTIONS)
def analyze(
    *,
    exports: ExportsArg = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Analyse the sample trace shipped with trace-gaps.")
    ] = False,
    options: AnalysisOptions,
    top: int,
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
    check_analyze(options, fmt=fmt, what_if=what_if)
    paths = given_exports(exports, demo, verb="analyses")
    refuse_inputs_as_outputs([] if output is None else [output], paths)
    shown = ReportOutput(fmt=fmt, output=output, quiet=quiet, no_color=no_color)
    if len(paths) > 1 or scheduler is not None:
        check_analyze_run(demo=demo, what_if=what_if, jobs=jobs, scheduler=scheduler)
        analyze_run(paths, options, top=top, jobs=jobs, scheduler=scheduler, shown=shown)
        return
    path = resolve_export(paths[0] if paths else None, demo)
    named = "--demo" if demo else shlex.quote(str(paths[0]))
    analyze_one(path, options, top=top, what_if=what_if, jobs=jobs, named=named, shown=shown)
