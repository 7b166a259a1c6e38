"""What a command writes: its output to -o or stdout, messages to stderr, whatever the streams.

A stream may be closed (2>&-), full, a pipe closed early (| head), or unable to encode a
name (latin-1): none of that turns into a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from trace_gaps.errors import TraceGapsError
from trace_gaps.output import (
    escape_control_characters,
    write_figure_atomically,
    write_text_atomically,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


def write_output(
    text: str | list[str], output: Path | None, *, quiet: bool = False, styled: bool = False
) -> None:
    """Write to the file given with -o, else to stdout (text: a string, or its pieces, written
    one after the other). Control characters in names are escaped (terminal escapes, NUL),
    in every format; styled text (colour drawn by the text renderer, which escaped the names
    itself) is written as it is."""
    pieces = [text] if isinstance(text, str) else text
    if not styled:
        pieces = [escape_control_characters(piece) for piece in pieces]
    if output is None:
        write_stdout(pieces)
        return
    with writing(output, quiet=quiet):
        write_text_atomically(output, pieces)


def save_figure(figure: Figure, output: Path, *, quiet: bool = False) -> None:
    """Write the figure, its format chosen by the file's suffix."""
    with writing(output, quiet=quiet):
        write_figure_atomically(output, figure)


@contextmanager
def writing(output: Path, *, quiet: bool) -> Iterator[None]:
    """Around the writing of output: an OSError becomes a one-line error naming it, and
    `wrote OUTPUT` is said once it is written (unless quiet). A pipe closed by its reader
    (`-o /dev/stdout | head`) ends quietly, as it does for stdout."""
    try:
        yield
    except BrokenPipeError:
        _discard_stdout()
        raise typer.Exit(0) from None
    except OSError as error:
        raise TraceGapsError(
            f"cannot write {output}: {error.strerror}. Choose another -o path."
        ) from error
    if not quiet:
        say(f"wrote {output}")


def write_stdout(pieces: list[str]) -> None:
    """Write the pieces of a text to stdout, one after the other; a closed or full stdout is
    a one-line error, a closed pipe (| head) ends quietly."""
    stdout = sys.stdout
    if stdout is None:
        raise TraceGapsError("standard output is closed; pass -o FILE, or redirect it.")
    try:
        for piece in pieces:
            stdout.write(piece)
        stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        raise typer.Exit(0) from None
    except OSError as error:
        _discard_stdout()
        raise TraceGapsError(
            f"cannot write to standard output: {error.strerror}. Pass -o FILE instead."
        ) from error


@contextmanager
def stdout_outside_commands() -> Iterator[None]:
    """Around what is printed before any command runs (--help, --version): a full or failing
    stdout is one line on stderr and exit 1, a pipe closed early (| head) ends quietly."""
    try:
        yield
    except BrokenPipeError:
        _discard_stdout()
        raise typer.Exit(0) from None
    except OSError as error:
        _discard_stdout()
        say(f"error: cannot write to standard output: {error.strerror}.")
        raise typer.Exit(1) from None


def silence_stderr() -> None:
    """Point descriptor 2 at /dev/null: nothing more reaches stderr (once an interrupt has
    been said, while libraries tear themselves down)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)


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


def say_not_analysed(failed: list[tuple[Path, str]]) -> None:
    """Name each export of a run that could not be analysed, and why, on stderr."""
    for path, message in failed:
        say(f"error: {path}: not analysed: {message}")
