"""`trace-gaps analyze` of several exports of one run (or one, on a --scheduler): analysed as
one on Dask, a local cluster for --jobs or the scheduler given."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from trace_gaps.commands.output_options import ReportOutput
from trace_gaps.commands.worker_options import capped_jobs
from trace_gaps.errors import NotAnalysedError
from trace_gaps.inputs import resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.progress import progress
from trace_gaps.streams import say_not_analysed

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions


def analyze_run(
    paths: list[Path],
    options: AnalysisOptions,
    *,
    top: int,
    jobs: int | None,
    scheduler: str | None,
    shown: ReportOutput,
) -> None:
    """Several exports of one run (or one, on a --scheduler), analysed as one on Dask."""
    from trace_gaps.duplicates import refuse_duplicate_exports
    from trace_gaps.run.cluster import dask_client  # asyncio: not for --help
    from trace_gaps.run.multi import analyse_exports

    resolved = [resolve_export(path, False) for path in paths]
    refuse_inputs_as_outputs([] if shown.output is None else [shown.output], resolved)
    if scheduler is not None:  # its workers run in folders of their own
        resolved = [Path(os.path.abspath(path)) for path in resolved]
    jobs = capped_jobs(jobs, quiet=shown.quiet)
    refuse_duplicate_exports(resolved)
    with progress(shown.quiet) as said, dask_client(jobs, scheduler) as client:
        said("analysing exports", 0, len(resolved))
        result = analyse_exports(
            resolved,
            options,
            top=top,
            client=client,
            on_export=lambda done, total: said("analysing exports", done, total),
        )
        drawn = shown.draw(result.report)
    shown.write(drawn)
    if result.failed:
        say_not_analysed(result.failed)
        raise NotAnalysedError(f"{len(result.failed)} of the run's exports not analysed")
