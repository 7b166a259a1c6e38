"""The command line a tool runs: `python -P -m trace_gaps <command> -f json` in a child
process, its arguments checked first, its JSON kept for the drill-downs that follow
(ResultCache), its error made one line."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trace_gaps.errors import TraceGapsError
from trace_gaps.interrupts import dying_with_parent

COMMAND_TIMEOUT_S = 3600
# Commands run at once; a call beyond waits for one to end. Each analysis holds up to ~1 GB
# (12 concurrent calls used 6.3 GB), and two already share a two-core machine.
CONCURRENT_COMMANDS = 2
_RUNNING = threading.BoundedSemaphore(CONCURRENT_COMMANDS)


def run_command(command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
    """Run `python -P -m trace_gaps COMMAND OPTIONS -- PATHS` and return the JSON it prints.

    The paths follow `--`, so a path such as `-o x` is a (missing) file, never an option.
    Raises TraceGapsError with the command's message when it fails.
    """
    refuse_uncarriable(options, paths)
    refuse_reports(paths)
    try:
        with _RUNNING:
            finished = subprocess.run(
                # -P: the working folder (an agent's, often a repository it did not write) is not put
                # first on sys.path, so a folder named trace_gaps there is never imported and run.
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "trace_gaps",
                    command,
                    *options,
                    "--quiet",
                    "--",
                    *paths,
                ],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                env=child_environment(os.environ),
                # Killed with the server: a server killed mid-call left its command running on.
                preexec_fn=dying_with_parent(),
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
    except OSError as error:  # the command line itself could not be started
        raise TraceGapsError(f"trace-gaps {command} could not run: {error.strerror}") from None
    if finished.returncode != 0:
        message = one_line(finished.stderr)
        raise TraceGapsError(f"trace-gaps {command} failed: {message}")
    result: dict[str, Any] = json.loads(finished.stdout)
    return result


def child_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment of a command's child: PYTHONSAFEPATH set, so that the Python processes
    it starts in turn (the fork server of the window workers) leave the working folder off
    sys.path as -P does, and PYTHONPATH without its empty or relative entries (each is the
    working folder, or a folder inside it)."""
    child = {**environment, "PYTHONSAFEPATH": "1"}
    kept = [p for p in child.pop("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)]
    if kept:
        child["PYTHONPATH"] = os.pathsep.join(kept)
    return child


# Linux's bound on one argument of a command line (MAX_ARG_STRLEN), and on a file's name.
ARGUMENT_BYTES = 128 * 1024
NAME_BYTES = 255


def refuse_uncarriable(options: list[str], paths: list[str]) -> None:
    """Refuse, in one line and before any file is looked at, an argument no command line can
    carry: one holding a NUL, or over 128 KiB; and a path with a name over 255 bytes."""
    for given in [*options, *paths]:
        shown = repr(given[:60]) + ("..." if len(given) > 60 else "")
        if "\x00" in given:
            raise TraceGapsError(f"{shown} holds a NUL character, which no path or option can")
        if len(given.encode(errors="surrogateescape")) > ARGUMENT_BYTES:
            raise TraceGapsError(
                f"{shown} is longer than 128 KiB, more than a command line can carry in one "
                "argument; give a shorter one"
            )
    for given in paths:
        if any(
            len(part.encode(errors="surrogateescape")) > NAME_BYTES for part in Path(given).parts
        ):
            shown = repr(given[:60]) + ("..." if len(given) > 60 else "")
            raise TraceGapsError(
                f"{shown}: a name in this path is too long (over {NAME_BYTES} bytes); pass a "
                "shorter path"
            )


def refuse_reports(paths: list[str]) -> None:
    """Refuse native reports (.nsys-rep), and globs matching one: the command line would
    export them to SQLite beside the report, and the server writes nothing.

    Each argument is checked as a file and as a glob both: the command line takes the file
    when it exists (`y[1].bin`) and the glob's matches when not (inputs.expand_exports), so
    whichever it takes has been checked."""
    from trace_gaps.nsys.convert import is_report

    for given in paths:
        for path in [Path(given), *(Path(p) for p in glob.glob(given))]:
            if path.is_file() and is_report(path):
                raise TraceGapsError(
                    f"{path} is an Nsight Systems report; the server reads SQLite exports "
                    f"only (it writes nothing). Export it first: nsys export --type sqlite "
                    f"-o {path.with_suffix('.sqlite')} {path}"
                )


CACHED_RESULTS = 4  # the commands' JSON the server keeps, for drill-downs that follow


class ResultCache:
    """The JSON of the last few command lines run, keyed by the command line and each export's
    path, size and modification time: an overview's drill-downs do not analyse the export again,
    and the server's memory stays bounded (CACHED_RESULTS results)."""

    def __init__(self, size: int = CACHED_RESULTS) -> None:
        self.size = size
        self.results: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, command: str, options: list[str], paths: list[str]) -> dict[str, Any]:
        refuse_uncarriable(options, paths)  # before stamp() looks the paths up
        key = (command, tuple(options), tuple(stamp(p) for p in paths))
        with self.lock:
            if key in self.results:
                self.results.move_to_end(key)
                return self.results[key]
        result = run_command(command, options, paths)
        with self.lock:
            self.results[key] = result
            while len(self.results) > self.size:
                self.results.popitem(last=False)
        return result


def stamp(given: str) -> tuple[Any, ...]:
    """A path (or glob) as the cache knows it: each file it names, with its size and mtime."""
    paths = sorted(glob.glob(given)) or [given]
    return tuple(
        (os.path.abspath(p), *((s.st_size, s.st_mtime_ns) if (s := _stat(p)) else ()))
        for p in paths
    )


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def one_line(stderr: str) -> str:
    """A command's error as one line: typer's usage box (exit 2) unboxed, without its usage,
    'Try --help' and box title lines."""
    kept = []
    for line in stderr.splitlines():
        text = line.strip().strip("│╭╮╰╯─ ").strip()
        if text and not text.startswith(("Usage:", "Try '", "Error")):
            kept.append(text)
    return " ".join(" ".join(kept).split()).removeprefix("error: ") or "failed"
