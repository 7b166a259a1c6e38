"""The command line: parse options, run the pipeline, write the output, map user errors."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trace_gaps import __version__
from trace_gaps.errors import TraceGapsError, about_file
from trace_gaps.formats import DiffFormat, Format, InfoFormat
from trace_gaps.nsys.convert import convert_report, find_nsys, is_report
from trace_gaps.output import (
    escape_control_characters,
    refuse_inputs_as_outputs,
    write_figure_atomically,
    write_text_atomically,
)
from trace_gaps.units import NS_PER_MS

# pandas, matplotlib and the analysis are imported inside the commands that use them, so
# `--help`, `--version` and a wrong option answer at once (benchmarks/bench_startup.py).
if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from trace_gaps.analysis.pipeline import AnalysisOptions
    from trace_gaps.diff import StepBuckets
    from trace_gaps.model import Trace
    from trace_gaps.report import Report
    from trace_gaps.side_draws import DrawRelay, SideMeans
    from trace_gaps.timeline import TimelineRequest

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    help="Where does each decode step's time go? Read an Nsight Systems SQLite export and "
    "charge every nanosecond of every step to a stage: GPU busy, or GPU idle and why.\n\n"
    "Exit codes: 0 ok; 1 bad input or empty analysis; 2 usage error; "
    "3 diff --fail-if-slower gate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"trace-gaps {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=show_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """trace-gaps: the options every command shares (--version)."""


ExportArg = Annotated[
    Path | None,
    typer.Argument(help="File from `nsys export --type sqlite`.", show_default=False),
]
StepOpt = Annotated[
    str | None,
    typer.Option(
        "--step",
        help="NVTX range that marks one step: a name, a family (`step[DECODE bs=* tokens=*]`) "
        "or a glob (`'step[DECODE*'`) (default: found).",
    ),
]
KindOpt = Annotated[
    str | None,
    typer.Option(
        "--kind",
        help="Only steps of this kind (DECODE, PREFILL, EXTEND, MIXED: the phase word in a "
        "step's name or in a range inside it; default: every kind, each on its own).",
    ),
]
DomainOpt = Annotated[
    str | None,
    typer.Option(
        "--domain",
        help="Steps and stages from this NVTX domain only ('default' for the default domain; "
        "default: every domain but the libraries').",
    ),
]
SkipOpt = Annotated[
    int | None,
    typer.Option(
        "--skip", min=0, help="Drop exactly the first N steps of each thread (default: auto)."
    ),
]
DepthOpt = Annotated[
    int, typer.Option("--depth", min=1, max=4, help="Stage depth inside the step.")
]
ProcessOpt = Annotated[int | None, typer.Option("--process", help="Analyse only this pid.")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar and no 'wrote FILE' lines on stderr.")
]


def check_patterns(patterns: list[str] | None) -> list[str] | None:
    """Refuse a --collective that is not a regular expression, before any work."""
    import re

    for pattern in patterns or []:
        try:
            re.compile(pattern)
        except re.error as error:
            raise typer.BadParameter(f"{pattern!r} is not a regular expression: {error}.") from None
    return patterns


CollectiveOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--collective",
        metavar="PATTERN",
        callback=check_patterns,
        help="Kernels whose name contains a match of this regular expression are collectives "
        "too, besides the known ones (NCCL, RCCL, vLLM and TensorRT-LLM all-reduce, DeepEP "
        "dispatch/combine: docs/definitions.md); repeatable.",
    ),
]


class Progress:
    """A progress bar on stderr with the real total (windows, or exports) and its ETA.

    Nothing is shown with --quiet or when stderr is not a terminal (pipes, CI, tests).
    rich.progress is imported only once a bar is shown.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None  # rich.progress.Progress, once started
        self.task: Any = None

    def __call__(self, description: str, done: int | None = None, total: int | None = None) -> None:
        """Name what runs now and, where known, how much of a known total is done."""
        if not self.enabled:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            self.bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
                auto_refresh=False,  # no refresh thread: diff forks its sides from here
            )
            self.bar.start()
            self.task = self.bar.add_task(description, total=total)
        if total is None:
            self.bar.update(self.task, description=description, refresh=True)
        else:
            self.bar.update(
                self.task, description=description, completed=done or 0, total=total, refresh=True
            )

    def stop(self) -> None:
        self.enabled = False
        if self.bar is not None:
            self.bar.stop()


@contextmanager
def progress(quiet: bool) -> Iterator[Progress]:
    """A Progress for one command; it is cleared when the command ends, however it ends."""
    stderr = sys.stderr  # None when the command runs with stderr closed (2>&-)
    shown = Progress(enabled=not quiet and stderr is not None and stderr.isatty())
    try:
        yield shown
    finally:
        shown.stop()


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a TraceGapsError into one line, `error: <file>: <message>`, on stderr and exit code 1."""
    tolerate_any_encoding()
    keep_descriptor_2_open()
    try:
        yield
    except TraceGapsError as error:
        # One line whatever the message quotes (range names may hold newlines).
        say("error: " + " ".join(str(error).split()))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        # typer would end silently with 130; say it, as a Ctrl-C while loading does.
        say("error: interrupted")
        raise typer.Exit(130) from None


def keep_descriptor_2_open() -> None:
    """With stderr closed (2>&-), put /dev/null on descriptor 2: else the next file opened
    (an output, the export) takes it, and whatever writes to stderr (nsys, a library) would
    write into that file. Messages are then dropped (sys.stderr stays None)."""
    try:
        os.fstat(2)
    except OSError:
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != 2:
                os.dup2(devnull, 2)
                os.close(devnull)


def say(line: str) -> None:
    """A line on stderr; control characters in the paths it names are escaped.

    Messages are advisory: a stderr that cannot be written (full, a closed pipe) drops them,
    and the command's outcome and exit code stay what they are."""
    try:
        typer.echo(escape_control_characters(line), err=True)
    except OSError:
        with contextlib.suppress(OSError):  # nothing more reaches it, not even at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)


def demo_export() -> Path:
    """The real sample export that ships inside the package."""
    return Path(str(resources.files("trace_gaps") / "data" / "demo.sqlite"))


def resolve_export(export: Path | None, demo: bool) -> Path:
    """The export to read: the argument, or the packaged demo trace.

    A native report (.nsys-rep) is exported to SQLite first when nsys is on PATH; without
    nsys, loading it fails with the export command to run.
    """
    if demo and export is not None:
        raise TraceGapsError("--demo uses the shipped trace: give no export with it.")
    if demo:
        return demo_export()
    if export is None:
        raise TraceGapsError(
            "no export given. Pass RUN.sqlite (from nsys export --type sqlite) or --demo."
        )
    nsys = find_nsys()
    if nsys is None or not export.is_file() or not is_report(export):
        return export
    converted = convert_report(export, nsys)
    done = "reusing its export" if converted.reused else "exported it with nsys to"
    say(f"note: {export} is an Nsight Systems report; {done} {converted.sqlite}")
    return converted.sqlite


def write_output(text: str, output: Path | None, *, quiet: bool = False) -> None:
    """Write to the file given with -o, else to stdout. Control characters in names are
    escaped (terminal escapes, NUL), in every format."""
    text = escape_control_characters(text)
    if output is None:
        write_stdout(text)
        return
    try:
        write_text_atomically(output, text)
    except OSError as error:
        raise TraceGapsError(
            f"cannot write {output}: {error.strerror}. Choose another -o path."
        ) from error
    if not quiet:
        say(f"wrote {output}")


def write_stdout(text: str) -> None:
    """Write to stdout; a closed or full stdout is a one-line error, a closed pipe (| head)
    ends quietly."""
    stdout = sys.stdout
    if stdout is None:
        raise TraceGapsError("standard output is closed; pass -o FILE, or redirect it.")
    try:
        stdout.write(text)
        stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        raise typer.Exit(0) from None
    except OSError as error:
        _discard_stdout()
        raise TraceGapsError(
            f"cannot write to standard output: {error.strerror}. Pass -o FILE instead."
        ) from error


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (tests), or already gone


def tolerate_any_encoding() -> None:
    """Names are user strings: on a stdout or stderr that cannot encode them (latin-1, ascii),
    write them as backslash escapes instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


ExportsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="File(s) from `nsys export --type sqlite`. Several (or a quoted glob): the "
        "exports of one run, one per rank or node, analysed as one.",
        show_default=False,
    ),
]
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


@app.command()
def analyze(
    exports: ExportsArg = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Analyse the sample trace shipped with trace-gaps.")
    ] = False,
    step: StepOpt = None,
    skip: SkipOpt = None,
    depth: DepthOpt = 1,
    kind: KindOpt = None,
    domain: DomainOpt = None,
    process: ProcessOpt = None,
    collective: CollectiveOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many candidates to rank.")] = 10,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.TEXT,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    quiet: QuietOpt = False,
    jobs: JobsOpt = None,
    scheduler: SchedulerOpt = None,
    what_if: Annotated[
        str | None,
        typer.Option(
            "--what-if",
            help="Predict the step with levers pulled, e.g. 'verify_forward=graph,sample=nosync' "
            "(graph, nogaps, host50, nohost, nosync, noapi, ontime, gpuN; docs/what-if.md).",
        ),
    ] = None,
) -> None:
    """Per-step, per-stage ledger of GPU busy and idle time, and the ranked bottlenecks."""
    with user_errors():
        from trace_gaps.analysis.pipeline import AnalysisOptions
        from trace_gaps.analysis.replay import LeverError, parse_levers
        from trace_gaps.render import render_report

        if what_if is not None:
            try:
                parse_levers(what_if)
            except LeverError as error:
                raise TraceGapsError(f"--what-if: {error}") from error

        paths = expand_exports(exports)
        if demo and paths:
            raise TraceGapsError("--demo analyses the shipped trace: give no export with it.")
        outputs = [] if output is None else [output]
        refuse_inputs_as_outputs(outputs, paths)
        options = AnalysisOptions(
            step_name=step,
            skip=skip,
            depth=depth,
            process=process,
            kind=kind,
            domain=domain,
            collective_patterns=tuple(collective or ()),
        )
        if len(paths) > 1 or scheduler is not None:
            if demo:
                raise TraceGapsError("--scheduler needs exports, not --demo.")
            if what_if is not None:
                raise TraceGapsError("--what-if predicts one export at a time: give one.")
            from trace_gaps.duplicates import refuse_duplicate_exports
            from trace_gaps.multi import analyse_exports

            resolved = [resolve_export(path, False) for path in paths]
            refuse_inputs_as_outputs(outputs, resolved)
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
                text = render_report(result.report, fmt)
            write_output(text, output, quiet=quiet)
            if result.failed:
                for path, message in result.failed:
                    typer.echo(f"error: {path}: not analysed: {message}", err=True)
                raise typer.Exit(1)
            return
        from trace_gaps.report import build_report
        from trace_gaps.run import analyse_export

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
            text = render_report(report, fmt)
        write_output(text, output, quiet=quiet)


def expand_exports(exports: list[Path] | None) -> list[Path]:
    """The export arguments, with quoted globs (`'run_*.sqlite'`) expanded, sorted."""
    paths: list[Path] = []
    for export in exports or []:
        text = str(export)
        if not export.exists() and any(c in text for c in "*?["):
            found = sorted(Path(p) for p in glob.glob(text))
            if not found:
                raise TraceGapsError(f"{text}: no file matches this pattern.")
            paths.extend(found)
        else:
            paths.append(export)
    return paths


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


@contextmanager
def dask_client(jobs: int | None, scheduler: str | None) -> Iterator[Any]:
    """A dask.distributed Client for --jobs (a local cluster) or --scheduler; None without."""
    if jobs is None and scheduler is None:
        yield None
        return
    if jobs is not None and scheduler is not None:
        raise TraceGapsError("give --jobs or --scheduler, not both.")
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise TraceGapsError(
            "--jobs and --scheduler run on Dask, which is not installed: "
            "pip install 'trace-gaps[dask]'."
        ) from None
    if scheduler is not None:
        from trace_gaps.cluster import SCHEDULER_TIMEOUT_S, check_scheduler

        # Dask's own timeout would not cover a server that accepts and stays silent.
        check_scheduler(scheduler, timeout_s=SCHEDULER_TIMEOUT_S)
        try:
            client = Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)  # type: ignore[no-untyped-call]
        except OSError as error:
            raise TraceGapsError(
                f"cannot reach the Dask scheduler at {scheduler}: {error}. Check the address."
            ) from None
        with client:
            yield client
        return
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        yield client


@app.command()
def info(
    export: ExportArg = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Describe the shipped sample trace.")
    ] = False,
    fmt: Annotated[
        InfoFormat, typer.Option("--format", "-f", help="Output format.")
    ] = InfoFormat.TEXT,
    as_json: Annotated[bool, typer.Option("--json", hidden=True, help="Same as -f json.")] = False,
    include_command: Annotated[
        bool,
        typer.Option(
            "--include-command",
            help="Show the host name, working directory, program path and arguments among "
            "the capture settings (left out by default).",
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """What the export holds: versions, capture settings, GPUs, threads, rows, NVTX ranges."""
    with user_errors():
        from trace_gaps.nsys.export import count_rows, devices_per_process
        from trace_gaps.nsys.stream import stream_export
        from trace_gaps.overview import build_overview
        from trace_gaps.render import render_overview

        path = resolve_export(export, demo)
        with about_file(path), stream_export(path) as opened:
            overview = build_overview(
                opened.head,
                count_rows(path),
                calls_per_thread=opened.calls_per_thread(),
                active_pids=opened.sources.known_pids(),
                module_loads=opened.sources.module_loads,
                devices=devices_per_process(path),
                include_command=include_command,
            )
        shown = Format.JSON if as_json or fmt is InfoFormat.JSON else Format.TEXT
        write_output(render_overview(overview, shown), None, quiet=quiet)


DiffExportArg = Annotated[
    # No exists=True: typer's boxed usage error would replace our one-line message.
    Path,
    typer.Argument(
        help="File from `nsys export --type sqlite`, or a quoted glob ('run_*.sqlite') of one "
        "run's exports, analysed as one."
    ),
]


# Sides analysed side by side, each in a process of its own, when they are this big in all
# and the machine has too few cores for window workers (parallel.default_jobs() is 1).
DIFF_SIDES_APART_BYTES = 32_000_000


def diff_jobs(sides: list[list[Path]]) -> int:
    """2: analyse the two sides of a diff at once, the after side in a forked process; 1: one
    after the other (each then has its own window workers where the cores allow them)."""
    from trace_gaps.parallel import default_jobs

    size = sum(path.stat().st_size for paths in sides for path in paths if path.is_file())
    return 2 if default_jobs() == 1 and size >= DIFF_SIDES_APART_BYTES else 1


def diff_side(
    shared: tuple[Path | None, DrawRelay],
    paths: list[Path],
    options: AnalysisOptions,
    read_ahead: bool,
    is_before: bool,
) -> tuple[Report, StepBuckets, SideMeans | None]:
    """One side of a diff, analysed: its Report, its step bucket tables and its bootstrap
    means (made here, so that two sides in two processes make theirs at once; the means
    where the relay lets them be drawn here: side_draws.py), the report without the step
    ledger entries the tables hold (diff needs no more of them). One export or several of
    one run (a quoted glob).

    shared: the diff's own file and the draws' relay (what both sides share).
    read_ahead False: one export is read without read-ahead threads (analyse_export)."""
    from trace_gaps.diff import (
        analysed_walls,
        analysis_bucket_tables,
        step_bucket_tables,
        without_tabled_steps,
    )
    from trace_gaps.report import build_report
    from trace_gaps.run import analyse_export
    from trace_gaps.side_draws import BeforeSideDraws, after_side_means

    output, relay = shared
    if len(paths) > 1:
        from trace_gaps.multi import analyse_exports

        resolved = [resolve_export(path, False) for path in paths]
        if output is not None:
            refuse_inputs_as_outputs([output], resolved)
        result = analyse_exports(resolved, options)
        if result.failed:
            failed, message = result.failed[0]
            raise TraceGapsError(f"{failed}: not analysed: {message}")
        tables = step_bucket_tables(result.report)
        return without_tabled_steps(result.report, tables), tables, None
    path = paths[0]
    with about_file(path):
        export = resolve_export(path, False)
        if output is not None:
            refuse_inputs_as_outputs([output], [export])
        draws = BeforeSideDraws(relay) if is_before else None
        trace, analysis = analyse_export(
            export.resolve(),
            options,
            read_ahead=read_ahead,
            on_steps=None if draws is None else draws.on_steps,
        )
        # The tables from the analysis' ledger: the report's step ledger is not made.
        report = build_report(trace, analysis, step_ledger=False)
        tables = analysis_bucket_tables(analysis)
    means = None
    if len(report.processes) == len(tables) == 1:
        pid, table = next(iter(tables.items()))
        walls = analysed_walls(analysis, pid)
        means = draws.means(walls, table) if draws else after_side_means(relay, walls, table)
    return report, tables, means


@app.command()
def diff(
    before: DiffExportArg,
    after: DiffExportArg,
    step: StepOpt = None,
    skip: SkipOpt = None,
    depth: DepthOpt = 1,
    kind: KindOpt = None,
    domain: DomainOpt = None,
    process: Annotated[int | None, typer.Option(help="Compare this pid on both sides.")] = None,
    process_before: Annotated[int | None, typer.Option(help="The pid in BEFORE.")] = None,
    process_after: Annotated[int | None, typer.Option(help="The pid in AFTER.")] = None,
    repeats: Annotated[
        bool,
        typer.Option(
            "--repeats",
            help="Each side's exports are repeated captures of one program (not ranks of one "
            "run): compare the step time over the runs, with their run-to-run noise.",
        ),
    ] = False,
    collective: CollectiveOpt = None,
    fail_if_slower: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="PCT",
            help="Exit 3 when the step time grew by more "
            "than PCT % beyond the noise (the CI's lower bound); for CI gating.",
        ),
    ] = None,
    fmt: Annotated[
        DiffFormat, typer.Option("--format", "-f", help="Output format.")
    ] = DiffFormat.TEXT,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Did the fix work? Step time with its noise, stage and launch changes, BEFORE → AFTER."""
    with user_errors():
        from trace_gaps.analysis.pipeline import AnalysisOptions
        from trace_gaps.diff import diff_reports, is_slower_than, slower_than
        from trace_gaps.duplicates import refuse_duplicate_exports
        from trace_gaps.parallel import forked
        from trace_gaps.render import render_diff
        from trace_gaps.run import analyse_export  # noqa: F401 - imported before the sides fork
        from trace_gaps.side_draws import DrawRelay

        sides = [expand_exports([before]), expand_exports([after])]
        refuse_inputs_as_outputs([] if output is None else [output], [*sides[0], *sides[1]])
        for side_paths in sides:
            refuse_duplicate_exports(side_paths)
        from trace_gaps.diff_runs import check_side_kind, diff_repeats

        for side, paths in zip(("before", "after"), sides, strict=True):
            check_side_kind([resolve_export(p, False) for p in paths], repeats=repeats, side=side)
        if repeats:
            options = AnalysisOptions(
                step, skip, depth, process, kind, domain, tuple(collective or ())
            )
            with progress(quiet) as shown:
                shown("analysing every capture")
                resolved = [[resolve_export(p, False) for p in side] for side in sides]
                result = diff_repeats(resolved[0], resolved[1], options)
            write_output(render_diff(result, Format(fmt.value)), output, quiet=quiet)
            if fail_if_slower is not None and is_slower_than(result, fail_if_slower):
                typer.echo(
                    f"error: step time grew more than {fail_if_slower:g} % beyond the "
                    "run-to-run noise",
                    err=True,
                )
                raise typer.Exit(3)
            return
        apart = diff_jobs(sides) == 2
        # Two sides at once on few cores keep both busy: read-ahead threads only add switches.
        before_task, after_task = (
            (
                paths,
                AnalysisOptions(step, skip, depth, pid, kind, domain, tuple(collective or ())),
                not apart,
                is_before,
            )
            for paths, pid, is_before in (
                (sides[0], process_before, True),
                (sides[1], process_after, False),
            )
            for pid in [pid if pid is not None else process]
        )
        shared = (output, DrawRelay())  # the relay: inherited by a forked side
        with progress(quiet) as shown:
            shown("analysing both sides")
            # Apart: the after side in a child forked now, the before side in this process
            # (one fork, not two; forked() runs it here afterwards where it cannot fork).
            after_side = (
                forked(diff_side, shared, *after_task)
                if apart
                else lambda: diff_side(shared, *after_task)
            )
            before_report, before_buckets, before_means = diff_side(shared, *before_task)
            after_report, after_buckets, after_means = after_side()
        result = diff_reports(
            before_report,
            after_report,
            step_buckets=(before_buckets, after_buckets),
            side_means=(before_means, after_means),
        )
        write_output(render_diff(result, Format(fmt.value)), output, quiet=quiet)
    grown = None if fail_if_slower is None else slower_than(result, fail_if_slower)
    if grown is not None:
        say(f"error: {grown} grew more than {fail_if_slower:g} % beyond noise")
        raise typer.Exit(3)


plot_app = typer.Typer(
    help="Pictures of the steps: one step's timeline as lanes, or every step's ledger as bars.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)
app.add_typer(plot_app, name="plot")

ImageOpt = Annotated[Path, typer.Option("--output", "-o", help="Image to write: .png or .svg.")]
DrawDemoOpt = Annotated[bool, typer.Option("--demo", help="Draw the shipped sample trace.")]
MedianOpt = Annotated[
    bool, typer.Option("--median", help="The analysed step nearest the median wall time (default).")
]
WorstOpt = Annotated[bool, typer.Option("--worst", help="The slowest analysed step.")]
StepIndexOpt = Annotated[
    int | None,
    typer.Option(
        "--step-index", min=0, help="The step with this index (from 0, warm-up included)."
    ),
]
StepsOpt = Annotated[
    str | None, typer.Option("--steps", metavar="A:B", help="Consecutive steps A to B-1.")
]


def check_image_path(output: Path) -> None:
    """Refuse an image name matplotlib would not write as PNG or SVG, before any work."""
    if output.suffix.lower() not in (".png", ".svg"):
        raise TraceGapsError(f"cannot write {output}: name a .png or .svg file with -o.")


def zoom_window(from_ms: float | None, to_ms: float | None) -> tuple[int, int] | None:
    """--from/--to as a window in ns from the step start; None draws the whole step."""
    if from_ms is None and to_ms is None:
        return None
    for name, value in (("--from", from_ms), ("--to", to_ms)):
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(
                f"{name} {value:g} is not a time: give ms from the step start."
            )
    # Past int64, a time is later than any step: the window is empty, said once drawn.
    low_ns = min(round((from_ms or 0.0) * NS_PER_MS), sys.maxsize - 1)
    high_ns = sys.maxsize if to_ms is None else min(round(to_ms * NS_PER_MS), sys.maxsize)
    if high_ns <= low_ns:
        raise typer.BadParameter(f"--to {to_ms or 0:g} must be after --from {from_ms or 0:g}.")
    return low_ns, high_ns


def save_figure(figure: Figure, output: Path, *, quiet: bool = False) -> None:
    """Write the figure, its format chosen by the file's suffix."""
    try:
        write_figure_atomically(output, figure)
    except OSError as error:
        raise TraceGapsError(
            f"cannot write {output}: {error.strerror}. Choose another -o path."
        ) from error
    if not quiet:
        say(f"wrote {output}")


def load_and_report(
    path: Path,
    options: AnalysisOptions,
    *,
    top: int = 10,
    timelines: tuple[TimelineRequest, ...] = (),
) -> tuple[Trace, Report]:
    """Load an export and build its Report; errors raised on the way name the file."""
    from trace_gaps.report import build_report
    from trace_gaps.run import analyse_export

    with about_file(path):
        trace, analysis = analyse_export(path, options, timelines=timelines)
        return trace, build_report(trace, analysis, top=top)


@plot_app.command("timeline")
def plot_timeline_command(
    output: ImageOpt,
    export: ExportArg = None,
    demo: DrawDemoOpt = False,
    median: MedianOpt = False,
    worst: WorstOpt = False,
    step_index: StepIndexOpt = None,
    steps: StepsOpt = None,
    step: StepOpt = None,
    skip: SkipOpt = None,
    depth: DepthOpt = 1,
    kind: KindOpt = None,
    domain: DomainOpt = None,
    process: ProcessOpt = None,
    collective: CollectiveOpt = None,
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
            "skew between ranks shows.",
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Draw a step as lanes: stages, CUDA calls, GPU streams, and GPU idle time by cause.

    A lane too dense to tell its spans apart says "saturated at this zoom": zoom in with
    --from/--to.
    """
    with user_errors():
        check_image_path(output)
        window_ns = zoom_window(from_ms, to_ms)
        from trace_gaps.analysis.pipeline import AnalysisOptions
        from trace_gaps.plot import plot_timeline
        from trace_gaps.timeline import choose_request

        request = choose_request(step_index=step_index, steps=steps, worst=worst, median=median)
        if ranks:
            if process is not None:
                raise TraceGapsError("--ranks draws every process: give no --process with it.")
            request = dataclasses.replace(request, all_processes=True)
        refuse_inputs_as_outputs([output], [export])
        path = resolve_export(export, demo)
        refuse_inputs_as_outputs([output], [path])
        options = AnalysisOptions(
            step_name=step,
            skip=skip,
            depth=depth,
            process=process,
            kind=kind,
            domain=domain,
            collective_patterns=tuple(collective or ()),
        )
        _, report = load_and_report(path, options, timelines=(request,))
        save_figure(plot_timeline(report, window_ns=window_ns), output, quiet=quiet)


@plot_app.command("steps")
def plot_steps_command(
    output: ImageOpt,
    export: ExportArg = None,
    demo: DrawDemoOpt = False,
    step: StepOpt = None,
    skip: SkipOpt = None,
    depth: DepthOpt = 1,
    kind: KindOpt = None,
    domain: DomainOpt = None,
    process: ProcessOpt = None,
    collective: CollectiveOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Draw every step as a stacked bar of its ledger; warm-up steps faded."""
    with user_errors():
        check_image_path(output)
        from trace_gaps.analysis.pipeline import AnalysisOptions
        from trace_gaps.plot import plot_steps

        refuse_inputs_as_outputs([output], [export])
        path = resolve_export(export, demo)
        refuse_inputs_as_outputs([output], [path])
        options = AnalysisOptions(
            step_name=step,
            skip=skip,
            depth=depth,
            process=process,
            kind=kind,
            domain=domain,
            collective_patterns=tuple(collective or ()),
        )
        _, report = load_and_report(path, options)
        save_figure(plot_steps(report), output, quiet=quiet)


@app.command("report")
def report_command(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the report in.")],
    exports: ExportsArg = None,
    demo: Annotated[bool, typer.Option("--demo", help="Use the shipped sample trace.")] = False,
    step: StepOpt = None,
    skip: SkipOpt = None,
    depth: DepthOpt = 1,
    kind: KindOpt = None,
    domain: DomainOpt = None,
    process: ProcessOpt = None,
    collective: CollectiveOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many candidates to rank.")] = 10,
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
    with user_errors():
        from trace_gaps.analysis.pipeline import AnalysisOptions
        from trace_gaps.bundle import (
            BUNDLE_FILES,
            BUNDLE_VIEWS,
            build_provenance,
            check_bundle_folder,
            write_bundle,
        )

        bundle_files = [output, *(output / name for name in BUNDLE_FILES)]
        paths = expand_exports(exports)
        if demo and paths:
            raise TraceGapsError("--demo reports the shipped trace: give no export with it.")
        refuse_inputs_as_outputs(bundle_files, paths)
        check_bundle_folder(output, force=force)
        options = AnalysisOptions(
            step_name=step,
            skip=skip,
            depth=depth,
            process=process,
            kind=kind,
            domain=domain,
            collective_patterns=tuple(collective or ()),
        )
        if len(paths) > 1:
            from trace_gaps.duplicates import refuse_duplicate_exports
            from trace_gaps.multi import analyse_exports

            resolved = [resolve_export(path, False) for path in paths]
            refuse_inputs_as_outputs(bundle_files, resolved)
            refuse_duplicate_exports(resolved)
            result = analyse_exports(resolved, options, top=top, timelines=BUNDLE_VIEWS)
            for failed, message in result.failed:
                typer.echo(f"error: {failed}: not analysed: {message}", err=True)
            report, infos = result.report, result.infos
        else:
            path = resolve_export(paths[0] if paths else None, demo)
            refuse_inputs_as_outputs(bundle_files, [path])
            trace, report = load_and_report(path, options, top=top, timelines=BUNDLE_VIEWS)
            infos = [trace.info]
        provenances = [build_provenance(i, include_command=include_command) for i in infos]
        for written in write_bundle(report, provenances, output, force=force):
            if not quiet:
                say(f"wrote {written}")
        if len(paths) > 1 and result.failed:
            raise typer.Exit(1)  # the others reported; the failed ones named above


export_app = typer.Typer(
    help="The analysis in another tool's format.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)
app.add_typer(export_app, name="export")


@export_app.command("perfetto")
def export_perfetto_command(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="JSON file to write (opens in ui.perfetto.dev).")
    ],
    exports: ExportsArg = None,
    demo: DrawDemoOpt = False,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps", metavar="A:B", help="Steps A to B-1 of each process (default: 0:20)."
        ),
    ] = None,
    step: StepOpt = None,
    skip: SkipOpt = None,
    depth: DepthOpt = 1,
    kind: KindOpt = None,
    domain: DomainOpt = None,
    process: ProcessOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many candidates to rank.")] = 10,
    quiet: QuietOpt = False,
) -> None:
    """Write a Chrome trace (JSON) of the analysis for ui.perfetto.dev.

    Steps, stages, CUDA calls, GPU ops, idle, top candidates; exports on one clock.
    """
    with user_errors():
        from trace_gaps.analysis.pipeline import AnalysisOptions
        from trace_gaps.perfetto import clocked_reports, render_perfetto, steps_request

        paths = expand_exports(exports)
        if demo and paths:
            raise TraceGapsError("--demo exports the shipped trace: give no export with it.")
        refuse_inputs_as_outputs([output], paths)
        paths = [resolve_export(path, False) for path in paths] or [resolve_export(None, demo)]
        refuse_inputs_as_outputs([output], paths)
        options = AnalysisOptions(step, skip, depth, process, kind, domain)
        sources = clocked_reports(paths, options, steps_request(steps), top=top)
        write_output(render_perfetto(sources), output, quiet=quiet)


@app.command("mcp")
def mcp_command(quiet: QuietOpt = False) -> None:
    """Serve info, analyze, diff and their Schemas as MCP tools on stdio, for coding agents.

    Needs pip install 'trace-gaps\\[mcp]'; see docs/mcp.md.
    """
    with user_errors():
        from trace_gaps.server import serve

        serve(quiet=quiet)
