"""Any kernel or range name renders safely: Markdown tables stay tables, text keeps brackets."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.cli import app
from trace_gaps.nsys.load import load_trace
from trace_gaps.output import escape_control_characters
from trace_gaps.render.console import Terminal
from trace_gaps.render.markdown import escape_markdown, render_markdown
from trace_gaps.render.text import render_text
from trace_gaps.report.build import build_report

runner = CliRunner()

TEMPLATE = "void gemm<float, Epilogue<(int)4>, Op<|x|>>(Params<T>, bool operator|(A, B))"
BRACKETS = "kernel[abc] [bold]not bold[/bold] `tick` *star* _under_ \\ back\\"
LINES = "two\nlines\r\tand a tab"
HTML = "<script>alert(1)</script> &amp; | leading pipe"
LONG = "very_long_" * 60
TRAILING = "ends with a backslash\\"
HOSTILE = [TEMPLATE, BRACKETS, LINES, HTML, LONG, TRAILING]
# Stored as raw bytes in StringIds: not valid UTF-8.
BAD_BYTES = b"bad\xff\xfe utf8 \xc3("


def hostile_export(builder: ExportBuilder) -> Path:
    """Three steps; each stage and each kernel carries one hostile name.

    step i: [step<|`[x]`|> ..................................................]
            [stage 0][stage 1] ... [stage 5][bad-bytes stage]
    GPU       [k 0]    [k 1]   ...   [k 5]    [bad-bytes kernel]
    """
    step = "step<|`[x]`|>"
    names = [*HOSTILE, "BAD_BYTES"]
    for s in range(3):
        base = s * 100_000
        builder.range(step, base, base + 90_000)
        for i, name in enumerate(names):
            start = base + i * 10_000
            builder.range(name, start, start + 9_000)
            builder.launch(name, start + 100, start + 600, start + 1_000, start + 8_000)
    path = builder.write()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE StringIds SET value = ? WHERE value = 'BAD_BYTES'", (BAD_BYTES,))
        connection.execute(
            "UPDATE StringIds SET value = CAST(value AS TEXT) WHERE typeof(value) = 'blob'"
        )
    return path


def unescaped_pipes(line: str) -> int:
    """Count `|` not escaped by a backslash (an escaped backslash does not escape what follows)."""
    count, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        count += line[i] == "|"
        i += 1
    return count


def markdown_tables(markdown: str) -> list[list[str]]:
    tables: list[list[str]] = []
    current: list[str] = []
    for line in markdown.split("\n"):
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


@pytest.fixture
def report(export_builder):
    trace = load_trace(hostile_export(export_builder()))
    return build_report(trace, analyse_trace(trace, AnalysisOptions(skip=0)), top=20)


def test_every_markdown_table_row_has_as_many_cells_as_its_header(report):
    markdown = render_markdown(report)
    tables = markdown_tables(markdown)
    assert len(tables) >= 3
    for table in tables:
        header = unescaped_pipes(table[0])
        for row in table:
            assert unescaped_pipes(row) == header, row
            assert row.endswith("|") and "\n" not in row and "\r" not in row


def test_markdown_keeps_every_hostile_name_visible_and_inert(report):
    markdown = render_markdown(report)
    for name in HOSTILE:
        assert escape_markdown(name) in markdown
    assert "<script>" not in markdown
    assert "bad\ufffd\ufffd utf8 \ufffd(" in markdown


def test_escape_markdown_leaves_no_unescaped_pipe_or_line_break():
    for name in [*HOSTILE, "|", "\\|", "\\\\|", "a|b\\", "`|`"]:
        escaped = escape_markdown(name)
        assert unescaped_pipes(escaped) == 0, escaped
        assert "\n" not in escaped and "\r" not in escaped


def test_text_keeps_brackets_and_puts_each_row_on_one_line(report):
    text = render_text(report, Terminal(width=160))
    assert "kernel[abc] [bold]not b…" in text  # elided in the middle, brackets kept
    assert "_under_ \\ back\\ " in text  # one trailing backslash, not two
    assert "operator|(A, B))" in text
    assert "<script>alert(1)</script>" in text
    assert "bad\ufffd\ufffd utf8" in text
    # In a table a long name is elided in the middle, not wrapped over several rows.
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert all(line.rstrip().endswith("│") for line in rows), rows
    assert not any(LONG in row for row in rows) and any("…" in row for row in rows)


def test_a_long_name_is_whole_in_a_table_where_the_width_allows(report):
    # LONG is 600 characters: whole at 1,000 columns, shortened in the middle at 400.
    assert any(LONG in line for line in render_text(report, Terminal(width=1_000)).splitlines())
    narrower = render_text(report, Terminal(width=400)).splitlines()
    assert not any(LONG in line for line in narrower)
    assert all(len(line) <= 400 for line in narrower)


def test_json_keeps_names_exactly_and_csv_escapes_only_control_characters(report, export_builder):
    path = hostile_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--skip", "0", "-f", "json"])
    assert result.exit_code == 0, result.output
    stages = {entry["stage"] for entry in json.loads(result.stdout)["processes"][0]["ledger"]}
    assert set(HOSTILE) <= stages
    result = runner.invoke(app, ["analyze", str(path), "--skip", "0", "-f", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {escape_control_characters(name) for name in HOSTILE} <= {row["stage"] for row in rows}
    assert any(escape_control_characters(name) != name for name in HOSTILE)  # some were escaped


@pytest.mark.parametrize("fmt", ["text", "md", "json", "csv"])
def test_the_cli_renders_hostile_names_in_every_format(export_builder, fmt):
    path = hostile_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--skip", "0", "-f", fmt])
    assert result.exception is None, result.exception
    assert result.exit_code == 0, result.output
    info = runner.invoke(app, ["info", str(path)])
    assert info.exception is None and info.exit_code == 0, info.output
