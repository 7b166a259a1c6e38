"""The options of where the analysis runs: --jobs (worker processes) and --scheduler (a
dask.distributed cluster)."""

from __future__ import annotations

from typing import Annotated

import typer

from trace_gaps.streams import say

JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        help="Worker processes. One export: its windows of steps are analysed on them while "
        "it is read (default: one per core up to 4; none on 2 cores or fewer). Several: "
        "an export per worker of a local Dask cluster (pip install 'trace-gaps\\[dask]').",
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="Run on this dask.distributed scheduler (tcp://host:8786); workers need "
        "trace-gaps and the exports at the same paths.",
    ),
]


def capped_jobs(jobs: int | None, *, quiet: bool) -> int | None:
    """--jobs, at most one worker per core this process may use (more only share the cores,
    each with its own memory): said on stderr when it is cut."""
    from trace_gaps.parallel import usable_cores

    cores = usable_cores()
    if jobs is None or jobs <= cores:
        return jobs
    if not quiet:
        say(f"note: --jobs {jobs} capped at {cores}, the cores this machine gives trace-gaps")
    return cores
