"""What a plot command is asked to draw, checked before any work: the image to write, the
exports it is drawn from, and the part of the step (--from/--to)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer

from trace_gaps.errors import UsageError
from trace_gaps.inputs import given_exports, resolve_export
from trace_gaps.output import refuse_inputs_as_outputs
from trace_gaps.units import NS_PER_MS


def check_image_path(output: Path) -> None:
    """Refuse an image name matplotlib would not write as PNG or SVG, before any work."""
    if output.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"cannot write {output}: name a .png or .svg file with -o.")


def image_sources(output: Path, exports: list[Path] | None, demo: bool) -> list[Path]:
    """The exports to draw (the shipped one with --demo), none the image's own path, none
    given twice."""
    from trace_gaps.duplicates import refuse_duplicate_exports

    paths = given_exports(exports, demo, verb="draws")
    refuse_inputs_as_outputs([output], paths)
    paths = [resolve_export(path, False) for path in paths] or [resolve_export(None, demo)]
    refuse_inputs_as_outputs([output], paths)
    refuse_duplicate_exports(paths)
    return paths


def zoom_window(from_ms: float | None, to_ms: float | None) -> tuple[int, int] | None:
    """--from/--to as a window in ns from the step start; None draws the whole step."""
    if from_ms is None and to_ms is None:
        return None
    for name, value in (("--from", from_ms), ("--to", to_ms)):
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(
                f"{name} {value:g} is not a time: give ms from the step start."
            )
    # Past int64, a time is later than any step: the window is empty, said once drawn.
    low_ns = min(_ms_to_ns(from_ms or 0.0), sys.maxsize - 1)
    high_ns = sys.maxsize if to_ms is None else _ms_to_ns(to_ms)
    if high_ns <= low_ns:
        raise typer.BadParameter(f"--to {to_ms or 0:g} must be after --from {from_ms or 0:g}.")
    return low_ns, high_ns


def _ms_to_ns(ms: float) -> int:
    """ms as int ns, at most sys.maxsize (1e308 ms is inf ns as a float: no int)."""
    ns = ms * NS_PER_MS
    return sys.maxsize if ns >= sys.maxsize else round(ns)
