"""`trace-gaps analyze` of several exports of one run (or one, on a --scheduler): analysed as
one on Dask, a local cluster for --jobs or the scheduler given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trace_gaps.commands.options import capped_jobs, text_terminal
from trace_gaps.formats import Format
from trace_gaps.inputs import resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.progress import progress
from trace_gaps.streams import say_not_analysed, write_output

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions


def analyze_run(
    paths: list[Path],
    options: AnalysisOptions,
    *,
    top: int,
    fmt: Format,
    output: Path | None,
    quiet: bool,
    jobs: int | None,
    scheduler: str | None,
    no_color: bool,
) -> None:
    """Several exports of one run (or one, on a --scheduler), analysed as one on Dask."""
    from trace_gaps.duplicates import refuse_duplicate_exports
    from trace_gaps.render import report_pieces
    from trace_gaps.run.cluster import dask_client  # asyncio: not for --help
    from trace_gaps.run.multi import analyse_exports

    resolved = [resolve_export(path, False) for path in paths]
    refuse_inputs_as_outputs([] if output is None else [output], resolved)
    if scheduler is not None:  # its workers run in folders of their own
        resolved = [Path(os.path.abspath(path)) for path in resolved]
    jobs = capped_jobs(jobs, quiet=quiet)
    refuse_duplicate_exports(resolved)
    with progress(quiet) as shown, dask_client(jobs, scheduler) as client:
        shown("analysing exports", 0, len(resolved))
        result = analyse_exports(
            resolved,
            options,
            top=top,
            client=client,
            on_export=lambda done, total: shown("analysing exports", done, total),
        )
        terminal = text_terminal(output, no_color=no_color)
        text = report_pieces(result.report, fmt, terminal)
    write_output(text, output, quiet=quiet, styled=fmt is Format.TEXT and terminal.color)
    if result.failed:
        say_not_analysed(result.failed)
        raise typer.Exit(1)
