"""The options of the analysis, each declared once; they become one AnalysisOptions in one
place (analysis_options), and the MCP tools' parameters (mcp/parameters.py) from the same
declarations."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:  # the analysis imports pandas: not for --help
    from trace_gaps.analysis.step_range import StepRange

TopOpt = Annotated[int, typer.Option("--top", min=1, help="How many candidates to rank.")]


# A --collective is searched in every kernel name: a pattern that backtracks without end
# (`(.*a){25}`: 117 s on a sample; `.*e.*e.*e.*e.*Q`: 516 s) is refused before any work.
PATTERN_CHARACTERS = 200
PATTERN_REPEATS = 2  # unbounded repeats (*, +, {n,} or over PATTERN_SMALL_REPEAT)
PATTERN_SMALL_REPEAT = 16


def check_patterns(patterns: list[str] | None) -> list[str] | None:
    """Refuse a --collective that is not a regular expression, or one whose search could
    backtrack without end (pattern_trouble), before any work."""
    import re

    for pattern in patterns or []:
        try:
            re.compile(pattern)
        except re.error as error:
            raise typer.BadParameter(f"{pattern!r} is not a regular expression: {error}.") from None
        trouble = pattern_trouble(pattern)
        if trouble:
            raise typer.BadParameter(
                f"{pattern[:60]!r}{'...' if len(pattern) > 60 else ''} {trouble}, which can "
                f"take hours to search each kernel name; give a simpler pattern (at most "
                f"{PATTERN_CHARACTERS} characters, {PATTERN_REPEATS} unbounded repeats such as "
                ".* or +, none inside another repeat)."
            )
    return patterns


def pattern_trouble(pattern: str) -> str:
    """What makes a (valid) regular expression slow to search, '' when nothing does."""
    from re import _constants, _parser  # type: ignore[attr-defined]

    if len(pattern) > PATTERN_CHARACTERS:
        return f"has {len(pattern):,} characters"
    repeats = (_constants.MAX_REPEAT, _constants.MIN_REPEAT)

    def walk(items: object, inside: bool) -> int:
        """Unbounded repeats in the parsed items; ValueError at a repeat inside a repeat."""
        found = 0
        for op, value in items:  # type: ignore[attr-defined]
            if op in repeats and value[1] > 1:
                if inside:
                    raise ValueError("has a repeat inside a repeat")
                found += value[1] > PATTERN_SMALL_REPEAT
                found += walk(value[2], True)
                continue
            for part in value if isinstance(value, (list, tuple)) else ():
                if isinstance(part, _parser.SubPattern):
                    found += walk(part, inside)
                elif isinstance(part, list):  # a branch's alternatives
                    found += sum(walk(a, inside) for a in part if isinstance(a, _parser.SubPattern))
        return found

    try:
        unbounded = walk(_parser.parse(pattern), False)
    except ValueError as error:
        return str(error)
    return f"has {unbounded} unbounded repeats" if unbounded > PATTERN_REPEATS else ""


@dataclass(frozen=True, slots=True)
class CommandOption:
    """One option of a command, declared once for both surfaces: its parameter (typer names
    the option after it, the MCP tool's parameter is named for it) and its default."""

    name: str
    annotation: Any  # Annotated[type, typer.Option(...)]
    default: Any


@dataclass(frozen=True, slots=True)
class AnalysisOption(CommandOption):
    """An option of the analysis: a command option that sets a field of AnalysisOptions,
    through convert."""

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


def offered_options(*, offer: tuple[str, ...] = (), **own: Any) -> tuple[AnalysisOption, ...]:
    """The analysis options a command takes: the shared ones, and those of offer (the options
    not shared that it takes too, by name); own: an option's annotation for this command (its
    help worded for it), by name."""
    return tuple(
        replace(o, annotation=own.get(o.name, o.annotation))
        for o in ANALYSIS_OPTIONS
        if o.shared or o.name in offer
    )


def analysis_options(*, offer: tuple[str, ...] = (), **own: Any) -> Callable[[Command], Command]:
    """Give a command the analysis options where its keyword `options` stands; the command
    gets them as one AnalysisOptions (offer and own: as offered_options)."""
    return with_options(offered_options(offer=offer, **own))


def with_options(declared: Sequence[CommandOption]) -> Callable[[Command], Command]:
    """Give a command the declared options where its keyword `options` stands: the analysis
    options become one AnalysisOptions, each other option reaches the command's keyword of
    its name (which the command declares without a default)."""
    by_name = {o.name for o in declared}
    analysed = [o for o in declared if isinstance(o, AnalysisOption)]

    def parameter_of(option: CommandOption) -> inspect.Parameter:
        return inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=option.default,
            annotation=option.annotation,
        )

    def decorate(command: Command) -> Command:
        # `options` is typed for mypy only (the analysis imports pandas): not evaluated here.
        signature = inspect.signature(command, eval_str=True, locals={"AnalysisOptions": None})
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name == "options":
                parameters.extend(parameter_of(option) for option in declared)
            elif parameter.name not in by_name:
                parameters.append(parameter)

        @functools.wraps(command)
        def run(**given: Any) -> Any:
            from trace_gaps.analysis.engine.pipeline import AnalysisOptions

            chosen = {o.field: o.convert(given.pop(o.name)) for o in analysed}
            return command(**given, options=AnalysisOptions(**chosen))

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate
