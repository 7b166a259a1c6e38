"""The options several commands share, each declared once; the analysis options become one
AnalysisOptions in one place (analysis_options)."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trace_gaps.streams import say

if TYPE_CHECKING:  # the analysis imports pandas: not for --help
    from trace_gaps.analysis.step_range import StepRange
    from trace_gaps.render.console import Terminal

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

ExportArg = Annotated[
    Path | None,
    typer.Argument(help="File from `nsys export --type sqlite`.", show_default=False),
]
ExportsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="File(s) from `nsys export --type sqlite`. Several (or a quoted glob): the "
        "exports of one run, one per rank or node, analysed as one.",
        show_default=False,
    ),
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar and no 'wrote FILE' lines on stderr.")
]
NoColorOpt = Annotated[
    bool,
    typer.Option(
        "--no-color",
        help="No colour in text output, even on a terminal (as NO_COLOR=1 in the environment).",
    ),
]
TopOpt = Annotated[int, typer.Option("--top", min=1, help="How many candidates to rank.")]
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


def check_patterns(patterns: list[str] | None) -> list[str] | None:
    """Refuse a --collective that is not a regular expression, before any work."""
    import re

    for pattern in patterns or []:
        try:
            re.compile(pattern)
        except re.error as error:
            raise typer.BadParameter(f"{pattern!r} is not a regular expression: {error}.") from None
    return patterns


@dataclass(frozen=True, slots=True)
class AnalysisOption:
    """One option of the analysis: its parameter (typer names the option after it), its
    default, and the AnalysisOptions field it sets, through convert."""

    name: str
    annotation: Any  # Annotated[type, typer.Option(...)]
    default: Any
    field: str
    convert: Callable[[Any], Any] = lambda value: value
    # Offered to every command with an `options` parameter; the others only where a command
    # asks for them by name (analysis_options(offer=...)).
    shared: bool = True


def _step_range(text: str | None) -> StepRange | None:
    from trace_gaps.analysis.step_range import parse_step_range

    return None if text is None else parse_step_range(text)


# In this order in each command's help, where the command has its `options` parameter.
ANALYSIS_OPTIONS = (
    AnalysisOption(
        "step",
        Annotated[
            str | None,
            typer.Option(
                "--step",
                help="NVTX range that marks one step: a name, a family "
                "(`step[DECODE bs=* tokens=*]`) or a glob (`'step[DECODE*'`) (default: found).",
            ),
        ],
        None,
        "step_name",
    ),
    AnalysisOption(
        "skip",
        Annotated[
            int | None,
            typer.Option(
                "--skip",
                min=0,
                help="Drop exactly the first N steps of each thread (default: auto).",
            ),
        ],
        None,
        "skip",
    ),
    # Not shared: plot timeline and export perfetto have a --steps of their own (the steps to
    # draw), with the same indices.
    AnalysisOption(
        "steps",
        Annotated[
            str | None,
            typer.Option(
                "--steps",
                metavar="A:B",
                help="Analyse only the steps with index A to B-1 on each thread (from 0, "
                "warm-up included, as plot's --step-index; 'A:' from A on, ':B' up to B-1); "
                "warm-up steps in the range stay skipped.",
                show_default=False,
            ),
        ],
        None,
        "step_range",
        _step_range,
        shared=False,
    ),
    AnalysisOption(
        "depth",
        Annotated[int, typer.Option("--depth", min=1, max=4, help="Stage depth inside the step.")],
        1,
        "depth",
    ),
    AnalysisOption(
        "kind",
        Annotated[
            str | None,
            typer.Option(
                "--kind",
                help="Only steps of this kind (DECODE, PREFILL, EXTEND, MIXED: the phase word in "
                "a step's name or in a range inside it; default: every kind, each on its own).",
            ),
        ],
        None,
        "kind",
    ),
    AnalysisOption(
        "domain",
        Annotated[
            str | None,
            typer.Option(
                "--domain",
                help="Steps and stages from this NVTX domain only ('default' for the default "
                "domain; default: every domain but the libraries').",
            ),
        ],
        None,
        "domain",
    ),
    AnalysisOption(
        "process",
        Annotated[int | None, typer.Option("--process", help="Analyse only this pid.")],
        None,
        "process",
    ),
    AnalysisOption(
        "collective",
        Annotated[
            list[str] | None,
            typer.Option(
                "--collective",
                metavar="PATTERN",
                callback=check_patterns,
                help="Kernels whose name contains a match of this regular expression are "
                "collectives too, besides the known ones (NCCL, RCCL, vLLM and TensorRT-LLM "
                "all-reduce, DeepEP dispatch/combine: docs/definitions.md); repeatable.",
            ),
        ],
        None,
        "collective_patterns",
        lambda patterns: tuple(patterns or ()),
    ),
    AnalysisOption(
        "kernels",
        Annotated[
            bool,
            typer.Option(
                "--kernels",
                help="Add the kernel summary: the GPU ops of the analysed steps by name, stage "
                "and kind, with count, total, mean, p50 and p90 (nsys's cuda_gpu_kern_sum for "
                "the analysed steps only).",
            ),
        ],
        False,
        "kernel_summary",
        shared=False,
    ),
)

Command = Callable[..., Any]


def analysis_options(*, offer: tuple[str, ...] = (), **own: Any) -> Callable[[Command], Command]:
    """Give a command the analysis options where its keyword `options` stands; the command
    gets them as one AnalysisOptions. offer: the options not shared that it takes too, by
    name. own: an option's annotation for this command (its help worded for it), by name."""
    offered = tuple(o for o in ANALYSIS_OPTIONS if o.shared or o.name in offer)

    def parameter_of(option: AnalysisOption) -> inspect.Parameter:
        return inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=option.default,
            annotation=own.get(option.name, option.annotation),
        )

    def decorate(command: Command) -> Command:
        # `options` is typed for mypy only (the analysis imports pandas): not evaluated here.
        signature = inspect.signature(command, eval_str=True, locals={"AnalysisOptions": None})
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name == "options":
                parameters.extend(parameter_of(option) for option in offered)
            else:
                parameters.append(parameter)

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            from trace_gaps.analysis.engine.pipeline import AnalysisOptions

            chosen = {o.field: o.convert(given.pop(o.name)) for o in offered}
            return command(**given, options=AnalysisOptions(**chosen))

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate


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


NARROWEST = 40  # columns


def text_terminal(output: Path | None, *, no_color: bool) -> Terminal:
    """What text output is drawn for: COLUMNS when set, else the terminal's width (rich's
    detection) when stdout is one, else a stable width (a pipe or -o file reads the same
    everywhere); colour only on a terminal, and never with --no-color or NO_COLOR."""
    from rich.console import Console

    from trace_gaps.render.console import NOT_A_TERMINAL, Terminal

    stdout = Console(file=sys.stdout)
    on_terminal = output is None and stdout.is_terminal
    if not on_terminal and not os.environ.get("COLUMNS", "").isdigit():
        return NOT_A_TERMINAL
    color = on_terminal and stdout.color_system is not None
    return Terminal(
        # Narrower than a table's key columns draws nothing readable (COLUMNS=0 included).
        width=max(stdout.width, NARROWEST),
        color=color and not no_color and not os.environ.get("NO_COLOR"),
    )
