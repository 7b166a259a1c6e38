"""`trace-gaps diff`: did the fix work? BEFORE → AFTER with the noise, for a person or a CI gate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trace_gaps.commands.analysis_options import analysis_options
from trace_gaps.commands.output_options import NoColorOpt, QuietOpt, text_terminal
from trace_gaps.errors import SlowerError
from trace_gaps.formats import DiffFormat, Format
from trace_gaps.inputs import expand_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.progress import progress
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


@analysis_options(
    process=Annotated[int | None, typer.Option(help="Compare this pid on both sides.")]
)
def diff(
    *,
    before: DiffExportArg,
    after: DiffExportArg,
    options: AnalysisOptions,
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
    from dataclasses import replace

    from trace_gaps.diff.build import diff_sides
    from trace_gaps.diff.runs import check_side_kind, diff_repeats
    from trace_gaps.diff.side_runner import run_sides
    from trace_gaps.duplicates import refuse_duplicate_exports
    from trace_gaps.render import render_diff

    sides = [expand_exports([before]), expand_exports([after])]
    refuse_inputs_as_outputs([] if output is None else [output], [*sides[0], *sides[1]])
    for side_paths in sides:
        refuse_duplicate_exports(side_paths)
    for side, paths in zip(("before", "after"), sides, strict=True):
        check_side_kind([resolve_export(p, False) for p in paths], repeats=repeats, side=side)
    with progress(quiet) as shown:
        if repeats:
            shown("analysing every capture")
            resolved = [[resolve_export(p, False) for p in side] for side in sides]
            result = diff_repeats(resolved[0], resolved[1], options)
        else:
            shown("analysing both sides")
            pids = [
                options.process if pid is None else pid for pid in (process_before, process_after)
            ]
            side_options = (replace(options, process=pids[0]), replace(options, process=pids[1]))
            result = diff_sides(*run_sides(sides, side_options, output))
    terminal = text_terminal(output, no_color=no_color)
    text = render_diff(result, Format(fmt.value), terminal)
    write_output(text, output, quiet=quiet, styled=fmt is DiffFormat.TEXT and terminal.color)
    if fail_if_slower is not None:
        gate(result, fail_if_slower, repeats=repeats)


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
