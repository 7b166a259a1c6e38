"""`trace-gaps diff`: did the fix work? BEFORE → AFTER with the noise, for a person or a CI gate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analysis_options import CommandOption, offered_options, with_options
from trace_gaps.commands.output_options import NoColorOpt, QuietOpt, text_terminal
from trace_gaps.errors import SlowerError
from trace_gaps.formats import DiffFormat, Format
from trace_gaps.inputs import expand_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.progress import Progress, progress
from trace_gaps.streams import write_output

if TYPE_CHECKING:
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.diff.build import Diff

DiffExportArg = Annotated[
    # No exists=True: typer's boxed usage error would replace our one-line message.
    Path,
    typer.Argument(
        help="File from `nsys export --type sqlite`, or a quoted glob ('run_*.sqlite') of one "
        "run's exports, analysed as one."
    ),
]


# Options of the diff besides the analysis's: both surfaces take them (the MCP tool too).
SIDE_OPTIONS = (
    CommandOption(
        "process_before", Annotated[int | None, typer.Option(help="The pid in BEFORE.")], None
    ),
    CommandOption(
        "process_after", Annotated[int | None, typer.Option(help="The pid in AFTER.")], None
    ),
    CommandOption(
        "repeats",
        Annotated[
            bool,
            typer.Option(
                "--repeats",
                help="Each side's exports are repeated captures of one program (not ranks of one "
                "run): compare the step time over the runs, with their run-to-run noise.",
            ),
        ],
        False,
    ),
)
DIFF_OPTIONS = (
    *offered_options(
        process=Annotated[int | None, typer.Option(help="Compare this pid on both sides.")]
    ),
    *SIDE_OPTIONS,
)


@with_options(DIFF_OPTIONS)
def diff(
    *,
    before: DiffExportArg,
    after: DiffExportArg,
    options: AnalysisOptions,
    process_before: int | None,
    process_after: int | None,
    repeats: bool,
    fail_if_slower: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="PCT",
            help="Exit 3 when the step time grew by more "
            "than PCT % beyond the noise (the CI's lower bound); for CI gating. Where each "
            "side's speed is measured, only the code's part counts (the machine's drift "
            "taken out).",
        ),
    ] = None,
    fmt: Annotated[
        DiffFormat, typer.Option("--format", "-f", help="Output format.")
    ] = DiffFormat.TEXT,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here.")] = None,
    quiet: QuietOpt = False,
    no_color: NoColorOpt = False,
) -> None:
    """Did the fix work? Step time with its noise, stage and launch changes, BEFORE → AFTER."""
    from trace_gaps.render import render_diff

    sides = [expand_exports([before]), expand_exports([after])]
    check_sides(sides, output, repeats=repeats)
    with progress(quiet) as shown:
        pids = (process_before, process_after)
        result = compare(sides, options, pids, output, repeats=repeats, shown=shown)
    terminal = text_terminal(output, no_color=no_color)
    text = render_diff(result, Format(fmt.value), terminal)
    write_output(text, output, quiet=quiet, styled=fmt is DiffFormat.TEXT and terminal.color)
    if fail_if_slower is not None:
        gate(result, fail_if_slower, repeats=repeats)


def check_sides(sides: list[list[Path]], output: Path | None, *, repeats: bool) -> None:
    """Refuse an output among the inputs, an export given twice on a side, and a side whose
    exports are not what --repeats (or its absence) says."""
    from trace_gaps.diff.runs import check_side_kind
    from trace_gaps.duplicates import refuse_duplicate_exports

    refuse_inputs_as_outputs([] if output is None else [output], [*sides[0], *sides[1]])
    for side_paths in sides:
        refuse_duplicate_exports(side_paths)
    for side, paths in zip(("before", "after"), sides, strict=True):
        check_side_kind([resolve_export(p, False) for p in paths], repeats=repeats, side=side)


def compare(
    sides: list[list[Path]],
    options: AnalysisOptions,
    pids: tuple[int | None, int | None],
    output: Path | None,
    *,
    repeats: bool,
    shown: Progress,
) -> Diff:
    """Both sides analysed and compared: as repeated captures, or process by process (pids:
    --process-before and --process-after, --process where None)."""
    from dataclasses import replace

    from trace_gaps.diff.build import diff_sides
    from trace_gaps.diff.runs import diff_repeats
    from trace_gaps.diff.side_runner import run_sides

    if repeats:
        shown("analysing every capture")
        resolved = [[resolve_export(p, False) for p in side] for side in sides]
        return diff_repeats(resolved[0], resolved[1], options)
    shown("analysing both sides")
    chosen = [options.process if pid is None else pid for pid in pids]
    side_options = (replace(options, process=chosen[0]), replace(options, process=chosen[1]))
    return diff_sides(*run_sides(sides, side_options, output))


def gate(result: Diff, pct: float, *, repeats: bool) -> None:
    """--fail-if-slower: raise SlowerError when the step time grew more than pct % beyond the
    noise (over the runs with --repeats)."""
    from trace_gaps.diff.build import is_slower_than, slower_than

    if repeats:
        if is_slower_than(result, pct):
            what = "the code's part of the step time" if result.code_runs else "step time"
            raise SlowerError(f"{what} grew more than {pct:g} % beyond the run-to-run noise")
        return
    grown = slower_than(result, pct)
    if grown is not None:
        raise SlowerError(f"{grown} grew more than {pct:g} % beyond noise")
