"""The exports a command reads: quoted globs expanded, the shipped demo trace, native reports
exported to SQLite first."""

from __future__ import annotations

import glob
from importlib import resources
from pathlib import Path

from trace_gaps.errors import TraceGapsError, UsageError
from trace_gaps.nsys.convert import convert_report, find_nsys, is_report
from trace_gaps.streams import say


def expand_exports(exports: list[Path] | None) -> list[Path]:
    """The export arguments, with quoted globs (`'run_*.sqlite'`) expanded, sorted."""
    paths: list[Path] = []
    for export in exports or []:
        text = str(export)
        if not export.exists() and any(c in text for c in "*?["):
            found = sorted(Path(p) for p in glob.glob(text))
            if not found:
                raise TraceGapsError(f"{text}: no file matches this pattern.")
            paths.extend(found)
        else:
            paths.append(export)
    return paths


def given_exports(exports: list[Path] | None, demo: bool, *, verb: str) -> list[Path]:
    """The export arguments expanded (expand_exports); none may come with --demo, which
    `verb`s the shipped trace."""
    paths = expand_exports(exports)
    if demo and paths:
        raise UsageError(f"--demo {verb} the shipped trace: give no export with it.")
    return paths


def demo_export() -> Path:
    """The real sample export that ships inside the package."""
    return Path(str(resources.files("trace_gaps") / "data" / "demo.sqlite"))


def resolve_export(export: Path | None, demo: bool) -> Path:
    """The export to read: the argument, or the packaged demo trace.

    A native report (.nsys-rep) is exported to SQLite first when nsys is on PATH; without
    nsys, loading it fails with the export command to run.
    """
    if demo and export is not None:
        raise UsageError("--demo uses the shipped trace: give no export with it.")
    if demo:
        return demo_export()
    if export is None:
        raise UsageError(
            "no export given. Pass RUN.sqlite (from nsys export --type sqlite) or --demo."
        )
    nsys = find_nsys()
    if nsys is None or not export.is_file() or not is_report(export):
        return export
    converted = convert_report(export, nsys)
    done = "reusing its export" if converted.reused else "exported it with nsys to"
    say(f"note: {export} is an Nsight Systems report; {done} {converted.sqlite}")
    return converted.sqlite
