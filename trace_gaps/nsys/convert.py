"""Turn an Nsight Systems report (.nsys-rep) into its SQLite export, with nsys if installed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trace_gaps.errors import NotAnExportError

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
        with path.open("rb") as handle:
            return handle.read(len(REPORT_MAGIC)) == REPORT_MAGIC
    except OSError:
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


def convert_report(report: Path, nsys: str) -> ConvertedReport:
    """Export a report to SQLite with nsys, beside it when that folder is writable.

    An export already beside the report and newer than it is reused. An existing file is
    never overwritten: when the folder is read-only or holds an older export, the new one
    goes to a fresh temporary folder.
    """
    beside = report.with_suffix(".sqlite")
    if beside.is_file() and beside.stat().st_mtime >= report.stat().st_mtime:
        return ConvertedReport(report, beside, reused=True)
    if beside.exists() or not os.access(report.parent, os.W_OK):
        beside = Path(tempfile.mkdtemp(prefix="trace-gaps-")) / beside.name
    command = [nsys, "export", "--type", "sqlite", "-o", str(beside), str(report)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", check=False
        )
    except OSError as error:
        raise NotAnExportError(
            f"is an Nsight Systems report and running nsys failed ({error.strerror}); "
            f"export it yourself: {export_command(report)}",
            path=report,
        ) from error
    if done.returncode != 0 or not beside.is_file():
        last = (
            done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"]
        )[-1]
        raise NotAnExportError(
            f"is an Nsight Systems report and `nsys export` failed "
            f"(exit {done.returncode}: {last}); "
            f"export it yourself: {export_command(report)}",
            path=report,
        )
    return ConvertedReport(report, beside, reused=False)
