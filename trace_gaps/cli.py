"""The command line: the commands (commands/) on one Typer app, their errors mapped to the
README's exit codes in one place."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from difflib import get_close_matches
from typing import Annotated, Any

import typer
from typer._click.exceptions import NoSuchOption
from typer.core import TyperGroup

from trace_gaps import __version__
from trace_gaps.commands import analyze, diff, export, info, plot, report
from trace_gaps.commands.arguments import HELP_OPTIONS
from trace_gaps.commands.usage import choice_error, name_values, plain_help
from trace_gaps.errors import NotAnalysedError, SlowerError, TraceGapsError, UsageError
from trace_gaps.mcp.command import mcp
from trace_gaps.streams import (
    keep_descriptor_2_open,
    say,
    stdout_outside_commands,
    tolerate_any_encoding,
)

# 0 ok; 1 bad input or an empty analysis (any other TraceGapsError); 2 usage (typer's own
# usage errors exit 2 too); 3 the diff --fail-if-slower gate; 130 interrupted.
EXIT_CODES: dict[type[TraceGapsError], int] = {UsageError: 2, SlowerError: 3}
INTERRUPTED = 130


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a TraceGapsError into one line, `error: <file>: <message>`, on stderr, and its
    exit code; a Ctrl-C into `error: interrupted`."""
    tolerate_any_encoding()
    keep_descriptor_2_open()
    try:
        yield
    except TraceGapsError as error:
        if not isinstance(error, NotAnalysedError):  # that one named its exports already
            # One line whatever the message quotes (range names may hold newlines).
            say("error: " + " ".join(str(error).split()))
        code = next((c for kind, c in EXIT_CODES.items() if isinstance(error, kind)), 1)
        raise typer.Exit(code) from None
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:
            raise
        # pathlib's exists() and is_file() raise it (they answer False only for a missing file).
        shown = "a path" if error.filename is None else str(error.filename)
        say(f"error: {shown}: the name is too long ({error.strerror}); pass a shorter path")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        # typer would end silently with 130; say it, as a Ctrl-C while loading does.
        say("error: interrupted")
        raise typer.Exit(INTERRUPTED) from None


class Commands(TyperGroup):
    """The app's commands, each run inside user_errors; their help with plain value names,
    a wrong choice answered in one line."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        plain_help(self, HELP_OPTIONS["help_option_names"])

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        name_values(params)  # typer adds --install-completion after __init__
        return params

    def invoke(self, ctx: Any) -> Any:  # typer's own (vendored) click Context
        with user_errors():
            try:
                return super().invoke(ctx)
            except NoSuchOption as error:
                error.possibilities = close_options(error)
                raise
            except typer.BadParameter as error:
                line = choice_error(error)
                if line is None:
                    raise
                say(f"error: {line}")
                raise typer.Exit(2) from None


def close_options(error: NoSuchOption) -> list[str]:
    """The command's options like the unknown one, compared without their dashes and closer
    than click's default (which offered --jobs for --bogus, '--' and 'o' in common)."""
    command = error.ctx.command if error.ctx is not None else None
    names = [o for p in getattr(command, "params", []) for o in p.opts if o.startswith("--")]
    bare = {name.lstrip("-"): name for name in names}
    close = get_close_matches(error.option_name.lstrip("-"), list(bare), n=3, cutoff=0.75)
    return [bare[name] for name in close]


app = typer.Typer(
    cls=Commands,
    help="Where does each decode step's time go? Read an Nsight Systems SQLite export and "
    "charge every nanosecond of every step to a stage: GPU busy, or GPU idle and why.\n\n"
    "Exit codes: 0 ok; 1 bad input or empty analysis; 2 usage error; "
    "3 diff --fail-if-slower gate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)
app.command("analyze")(analyze.analyze)
app.command("info")(info.info)
app.command("diff")(diff.diff)
app.command("report")(report.report)
app.command("mcp")(mcp)
app.add_typer(plot.app, name="plot")
app.add_typer(export.app, name="export")


def show_version(value: bool) -> None:
    if value:
        with stdout_outside_commands():
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
