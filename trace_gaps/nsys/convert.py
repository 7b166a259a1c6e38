"""Turn an Nsight Systems report (.nsys-rep) into its SQLite export, with nsys if installed."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trace_gaps.errors import NotAnExportError, env_seconds
from trace_gaps.interrupts import dying_with_parent, last_resort
from trace_gaps.nsys.files import NotAPlainFile, read_head
from trace_gaps.output import SQLITE_SIDE_FILES, hidden_sibling

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
# A native report starts with this text; an export starts with "SQLite format 3".
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"


@dataclass(frozen=True, slots=True)
class ConvertedReport:
    """Where the export of a report is, and whether it was already there."""

    report: Path
    sqlite: Path
    reused: bool


def is_report(path: Path) -> bool:
    """Is this file a native Nsight Systems report (by its suffix or its first bytes)?"""
    if path.suffix in REPORT_SUFFIXES:
        return True
    try:
        return read_head(path, len(REPORT_MAGIC)) == REPORT_MAGIC
    except (OSError, NotAPlainFile):
        return False


def export_command(report: Path, sqlite: Path | None = None, *, overwrite: bool = False) -> str:
    """The shell command that exports a report to SQLite."""
    target = report.with_suffix(".sqlite") if sqlite is None else sqlite
    force = ["--force-overwrite=true"] if overwrite else []
    return shlex.join(
        ["nsys", "export", "--type", "sqlite", *force, "-o", str(target), str(report)]
    )


def find_nsys() -> str | None:
    """The nsys executable on PATH, or None."""
    return shutil.which("nsys")


# How long `nsys export` may run before trace-gaps stops it (override: the environment).
NSYS_TIMEOUT_ENV = "TRACE_GAPS_NSYS_TIMEOUT_S"
NSYS_TIMEOUT_S = 1800.0


def convert_report(report: Path, nsys: str) -> ConvertedReport:
    """Export a report to SQLite with nsys, beside it when that folder is writable.

    An export already there and newer than the report is reused. An existing file is
    never overwritten: when the folder is read-only or holds an older export, the export
    goes to a temporary folder named for the report (path, size, time), reused by the next
    run. nsys writes to a temporary name that is renamed once it succeeds, so an
    interrupted export is never taken for a whole one.
    """
    beside = report.with_suffix(".sqlite")
    taken = beside.exists() and not _is_usable(beside, report)
    if taken or not os.access(report.parent, os.W_OK):
        beside = _cache_folder(report) / beside.name
    if _is_usable(beside, report):
        return ConvertedReport(report, beside, reused=True)
    _remove_stale_partials(beside)
    partial = hidden_sibling(
        beside.with_name(beside.stem),
        f".partial-{os.getpid()}-{secrets.token_hex(4)}.sqlite",
        room_for=max(SQLITE_SIDE_FILES, key=len),
    )

    def remove_partial() -> None:
        for side in ("", *SQLITE_SIDE_FILES):  # SQLite's files beside the partial
            partial.with_name(partial.name + side).unlink(missing_ok=True)

    try:
        with last_resort(remove_partial):  # a signal's clean-up that never ends
            _run_export(report, nsys, partial)
            if not is_whole_sqlite(partial):
                raise NotAnExportError(
                    "is an Nsight Systems report and `nsys export` wrote a damaged or truncated "
                    f"export (it said it succeeded); export it yourself: {export_command(report)}",
                    path=report,
                )
            os.replace(partial, beside)
    finally:
        remove_partial()
    return ConvertedReport(report, beside, reused=False)


def _remove_stale_partials(beside: Path) -> None:
    """Remove the partial exports (and their SQLite side files) beside `beside` left by a
    trace-gaps that was killed outright (SIGKILL: no clean-up ran): those whose name holds
    the pid of a process that no longer runs. A live one's (another run converting the same
    report) is left alone."""
    pattern = re.compile(r"\.partial-(\d+)-[0-9a-f]{8}\.sqlite(?:-wal|-shm|-journal)?$")
    with contextlib.suppress(OSError):
        for found in beside.parent.glob(".*.partial-*"):
            named = pattern.search(found.name)
            if named and not _is_running(int(named.group(1))):
                with contextlib.suppress(OSError):
                    found.unlink()


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's, or not to be asked: running for all we know
        return True
    return True


def _is_usable(export: Path, report: Path) -> bool:
    """An export to reuse: newer than the report and whole (an export cut short by an
    interrupted `nsys export` of the user's, or a damaged one, is exported again)."""
    return (
        export.is_file()
        and export.stat().st_mtime >= report.stat().st_mtime
        and is_whole_sqlite(export)
    )


SQLITE_MAGIC = b"SQLite format 3\x00"


def is_whole_sqlite(path: Path) -> bool:
    """Does the file hold SQLite's header and every page the header counts?"""
    try:
        size = path.stat().st_size
        header = read_head(path, 100)
    except (OSError, NotAPlainFile):
        return False
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return False
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65_536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is valid when its change counter matches (bytes 24, 92).
    if pages and header[24:28] == header[92:96]:
        return size >= pages * page_size
    return page_size > 0 and size > 0 and size % page_size == 0


def _cache_folder(report: Path) -> Path:
    """A temporary folder for this report's export: the same one while the report is unchanged."""
    stat = report.stat()
    key = f"{report.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()
    folder = Path(tempfile.gettempdir()) / f"trace-gaps-{hashlib.sha256(key).hexdigest()[:16]}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _run_with_timeout(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run the command in a session of its own; kill it with every process it started past
    timeout_s, and when this process stops on the way (Ctrl-C, SIGTERM: interrupts.py, any
    exception): nsys left behind would go on writing its export after trace-gaps ended."""
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=dying_with_parent(),
    ) as child:
        try:
            with last_resort(lambda: os.killpg(child.pid, signal.SIGKILL)):
                stdout, stderr = child.communicate(timeout=timeout_s)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)


def nsys_timeout_s() -> float:
    """How long `nsys export` may run: NSYS_TIMEOUT_ENV, else NSYS_TIMEOUT_S."""
    return env_seconds(NSYS_TIMEOUT_ENV, NSYS_TIMEOUT_S)


def _run_export(report: Path, nsys: str, target: Path) -> None:
    command = [nsys, "export", "--type", "sqlite", "-o", str(target), str(report)]
    timeout_s = nsys_timeout_s()
    try:
        done = _run_with_timeout(command, timeout_s)
    except subprocess.TimeoutExpired as error:
        raise NotAnExportError(
            f"is an Nsight Systems report and `nsys export` did not finish in {timeout_s:g} s "
            f"(stopped; set {NSYS_TIMEOUT_ENV} to wait longer); "
            f"export it yourself: {export_command(report)}",
            path=report,
        ) from error
    except OSError as error:
        raise NotAnExportError(
            f"is an Nsight Systems report and running nsys failed ({error.strerror}); "
            f"export it yourself: {export_command(report)}",
            path=report,
        ) from error
    if done.returncode != 0 or not target.is_file():
        last = (
            done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"]
        )[-1]
        raise NotAnExportError(
            f"is an Nsight Systems report and `nsys export` failed "
            f"(exit {done.returncode}: {last}); "
            f"export it yourself: {export_command(report)}",
            path=report,
        )
