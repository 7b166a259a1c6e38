"""Hostile exports (issue 19): copies of real samples edited with SQL to hold corrupt string
tables, impossible times, odd step ranges and names meant to break a renderer. Each gives a
clean one-line error, or a report whose integrity notes say what was left out."""

from __future__ import annotations

import io
import shutil
import sqlite3
from pathlib import Path

import pytest
from matplotlib import rc_context
from typer.testing import Result

from tests.conftest import SAMPLE_TRACES
from tests.test_errors import error_line, invoke
from trace_gaps.plot import plot_steps, plot_timeline
from trace_gaps.run import analyse_export
from trace_gaps.analysis.pipeline import AnalysisOptions
from trace_gaps.report import build_report
from trace_gaps.timeline import StepPick, TimelineRequest

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A copy of a real sample export (19 decode_step ranges, each with forward and sample)."""
    return Path(shutil.copy(SAMPLE, tmp_path / "r.sqlite"))


def edit(path: Path, *statements: str, params: tuple[object, ...] = ()) -> Path:
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement, params if "?" in statement else ())
    connection.close()
    return path


def ok(args: list[str]) -> Result:
    result = invoke([str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


# --- names drawn literally ------------------------------------------------------------------

MATH_NAMES = ("Main$$anonfun$main$1", "$x^2$")


def rename_stages(path: Path) -> Path:
    return edit(
        path,
        f"UPDATE NVTX_EVENTS SET text = '{MATH_NAMES[0]}' WHERE text = 'forward'",
        f"UPDATE NVTX_EVENTS SET text = '{MATH_NAMES[1]}' WHERE text = 'sample'",
    )


@pytest.mark.parametrize("command", [["plot", "steps"], ["plot", "timeline"]])
def test_dollar_signs_in_names_do_not_break_the_plots(command, export, tmp_path):
    rename_stages(export)
    ok([*command, export, "--depth", "2", "-o", tmp_path / "p.png"])


def test_dollar_signs_in_names_do_not_break_the_report_bundle(export, tmp_path):
    rename_stages(export)
    ok(["report", export, "--depth", "2", "-o", tmp_path / "bundle"])


@pytest.mark.parametrize("draw", [plot_steps, plot_timeline])
def test_names_with_dollar_signs_are_drawn_as_written(draw, export):
    rename_stages(export)
    views = (TimelineRequest(StepPick.MEDIAN),)
    trace, analysis = analyse_export(export, AnalysisOptions(depth=2), timelines=views)
    figure = draw(build_report(trace, analysis))
    svg = io.BytesIO()
    with rc_context({"svg.fonttype": "none"}):  # text stays text in the SVG
        figure.savefig(svg, format="svg")
    drawn = svg.getvalue().decode()
    for name in MATH_NAMES:
        assert name in drawn
