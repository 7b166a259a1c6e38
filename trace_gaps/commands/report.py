"""`trace-gaps report`: a folder for a bug report, the report in every form with its pictures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analysis_options import TopOpt, analysis_options
from trace_gaps.commands.arguments import ExportsArg
from trace_gaps.commands.output_options import QuietOpt
from trace_gaps.errors import NotAnalysedError
from trace_gaps.inputs import given_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.streams import say, say_not_analysed

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions


@analysis_options(offer=("steps", "kernels"))
def report(
    *,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the report in.")],
    exports: ExportsArg = None,
    demo: Annotated[bool, typer.Option("--demo", help="Use the shipped sample trace.")] = False,
    options: AnalysisOptions,
    top: TopOpt = 10,
    include_command: Annotated[
        bool,
        typer.Option(
            "--include-command",
            help="Keep the host name, working directory, program path and arguments in "
            "report.md (left out by default: they can hold tokens or private paths).",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Write into a folder that is not empty.")
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Write a folder for a bug report: report.md, report.html (one page), report.json, PNGs."""
    from trace_gaps.render.bundle import (
        BUNDLE_FILES,
        BUNDLE_VIEWS,
        build_provenance,
        check_bundle_folder,
        write_bundle,
    )
    from trace_gaps.run.timelines import pictured_run

    bundle_files = [output, *(output / name for name in BUNDLE_FILES)]
    paths = given_exports(exports, demo, verb="reports")
    refuse_inputs_as_outputs(bundle_files, paths)
    check_bundle_folder(output, force=force)
    resolved = resolved_exports(paths, demo, bundle_files)
    run = pictured_run(resolved, options, top=top, timelines=BUNDLE_VIEWS)
    say_not_analysed(run.failed)
    provenances = [build_provenance(i, include_command=include_command) for i in run.infos]
    for written in write_bundle(run.report, provenances, output, force=force):
        if not quiet:
            say(f"wrote {written}")
    if run.failed:  # the others reported; the failed ones named above
        raise NotAnalysedError(f"{len(run.failed)} of the run's exports not analysed")


def resolved_exports(paths: list[Path], demo: bool, bundle_files: list[Path]) -> list[Path]:
    """The exports to report on (the shipped sample with --demo), none of them an output, none
    given twice."""
    from trace_gaps.duplicates import refuse_duplicate_exports

    if len(paths) <= 1:
        path = resolve_export(paths[0] if paths else None, demo)
        refuse_inputs_as_outputs(bundle_files, [path])
        return [path]
    resolved = [resolve_export(path, False) for path in paths]
    refuse_inputs_as_outputs(bundle_files, resolved)
    refuse_duplicate_exports(resolved)
    return resolved
