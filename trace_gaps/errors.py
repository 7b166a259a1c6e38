"""Problems the user can fix: each message names the file, what is wrong and what to do."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class TraceGapsError(Exception):
    """A problem with the user's input or options; the CLI prints it as one line.

    The message says what is wrong and what to do ("has no X; re-run with Y"); `path` is the
    file it concerns, printed first: "<file>: <message>".
    """

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message if self.path is None else f"{self.path}: {self.message}"

    def __reduce__(self) -> tuple[object, ...]:
        # Raised in a worker process (parallel.py), it crosses back whole: path included.
        return (_rebuilt, (type(self), self.message, self.path))


def _rebuilt(kind: type[TraceGapsError], message: str, path: Path | None) -> TraceGapsError:
    return kind(message, path=path)


class UsageError(TraceGapsError):
    """Options that do not go together, a missing one, or a value an option cannot take."""


class SlowerError(TraceGapsError):
    """diff --fail-if-slower: the step time grew beyond the gate (the CI's verdict)."""


class NotAnalysedError(TraceGapsError):
    """Some exports of a run could not be analysed: each was named on stderr with its reason
    (streams.say_not_analysed), so the CLI says nothing more, and exits 1."""


class NotAnExportError(TraceGapsError):
    """The file is not a readable Nsight Systems SQLite export."""


class MissingTableError(TraceGapsError):
    """The export lacks a table the analysis cannot do without."""


class NoKernelsError(TraceGapsError):
    """The export holds no GPU work to analyse."""


class StepNotFoundError(TraceGapsError):
    """The requested step range does not exist in the export."""


class NoAnalysedStepsError(TraceGapsError):
    """Every step is skipped as warm-up: there is nothing to analyse."""


class ProcessNotFoundError(TraceGapsError):
    """The process asked for with --process has no CUDA activity in the export."""


@contextmanager
def about_file(path: Path) -> Iterator[None]:
    """Name `path` in every TraceGapsError raised inside that names no file yet."""
    try:
        yield
    except TraceGapsError as error:
        if error.path is None:
            error.path = path
        raise


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable `name`, `default` where
    it is unset or blank; anything else is an error naming the variable."""
    given = os.environ.get(name) or ""
    if not given.strip():
        return default
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise TraceGapsError(
            f"{name}={given!r} is not a number of seconds; set it to a positive "
            f"number (the default is {default:g}), or unset it."
        )
    return seconds
