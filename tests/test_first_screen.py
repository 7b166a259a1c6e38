"""The text report on a terminal (issue 44): the answer is its first screen (the headline, the
verdicts a line each and the step ledger within 40 lines at 80 to 200 columns) and the last
thing on screen after a run, no table cell wraps a number or a header word at 80 columns, and
a kernel's name is whole where the width allows."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import (
    REPRESENTATIVE_SAMPLES,
    SAMPLE_TRACES,
    sample_trace_paths,
    shipped_report,
    sweep,
)
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.figures.declaration import RIGHT
from trace_gaps.inputs import demo_export
from trace_gaps.records.report import Report
from trace_gaps.render.console import Terminal
from trace_gaps.render.text import render_text
from trace_gaps.report.build import build_report
from trace_gaps.report.kernels import kernel_table
from trace_gaps.report.outline import verdict_line
from trace_gaps.report.tables import candidate_table, ledger_table, stage_table
from trace_gaps.run.one import analyse_export

KERNELS = AnalysisOptions(kernel_summary=True)
README = Path(__file__).resolve().parent.parent / "README.md"
FIRST_SCREEN = 40  # lines: `trace-gaps analyze ... | head -40`, a 40-line pane
DEMO = "demo"


@cache
def cli_report(path: Path) -> Report:
    """The Report as `trace-gaps analyze PATH` builds it (streamed: GPU metrics included)."""
    trace, analysis = analyse_export(path, AnalysisOptions(), jobs=1)
    return build_report(trace, analysis)


def first_screen(path: str, columns: int) -> list[str]:
    """The first lines of `trace-gaps analyze PATH` (or --demo) at COLUMNS=columns."""
    arguments = ["--demo"] if path == DEMO else [path]
    result = CliRunner().invoke(app, ["analyze", *arguments], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[:FIRST_SCREEN]


def words(lines: list[str]) -> str:
    """The lines as one run of words: a sentence wrapped at any width is found whole."""
    return " ".join(" ".join(lines).split())


def drawn_rows(lines: list[str], first: str) -> list[list[str]]:
    """The cells of the table rows (a continued table's parts each) whose first cell is first."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")][1:]
        for line in lines
        # A table a column too wide loses the padding at its edges (print_table).
        if re.fullmatch(rf"│ ?{re.escape(first)} +│.*│ *", line)
    ]


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(
    "path",
    [DEMO, *sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES)],
    ids=lambda p: p if p == DEMO else p.stem,
)
def test_the_first_40_lines_hold_the_headline_the_verdicts_and_the_ledger(
    path: str | Path, columns: int
) -> None:
    report = cli_report(demo_export() if path == DEMO else Path(path))
    process = report.processes[0]  # the first process (or kind) drawn
    screen = first_screen(str(path), columns)
    assert words([process.headline]) in words(screen)
    assert process.candidates
    for candidate in process.candidates[:3]:
        assert f"{candidate.rank}. {words([verdict_line(candidate)])}" in words(screen)
    # The ledger whole: its title, every part's total row (a table wider than the terminal
    # continues below), and the bottom border of its last part.
    ledger = ledger_table(process)
    assert any(line.startswith(ledger.title[:30]) for line in screen)
    totals = drawn_rows(screen, "total")
    assert [cell for part in totals for cell in part] == ledger.rows[-1][1:]
    last_total = max(i for i, line in enumerate(screen) if re.match("│ ?total ", line))
    assert screen[last_total + 1].startswith("└")


def test_the_readme_shows_the_demos_first_screen() -> None:
    """README.md's excerpt is the top of what `COLUMNS=100 trace-gaps analyze --demo` prints."""
    readme = README.read_text(encoding="utf-8")
    command = "COLUMNS=100 trace-gaps analyze --demo | head -"
    assert command in readme
    count = int(re.search(rf"{re.escape(command)}(\d+)", readme).group(1))  # type: ignore[union-attr]
    block = readme[readme.index("```\n", readme.index(command)) + 4 :]
    excerpt = block[: block.index("```")].splitlines()
    assert len(excerpt) == count
    assert excerpt == [line.rstrip() for line in first_screen(DEMO, 100)[:count]]


@pytest.mark.parametrize("path", sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES), ids=str)
def test_at_80_columns_no_table_cell_wraps_a_number_or_a_header_word(path: Path):
    report = shipped_report(path, KERNELS)
    text = render_text(report, Terminal(width=80))
    assert max(map(len, text.splitlines())) <= 80
    for process in report.processes:
        tables = [candidate_table(process), ledger_table(process), stage_table(process)]
        for table in [*tables, kernel_table(process)]:
            for word in (w for header in table.columns for w in header.split()):
                assert re.search(rf"[┃ ]{re.escape(word)}[ ┃]", text), (table.title, word)
            for row in table.rows:
                for cell, align in zip(row, table.align, strict=True):
                    if align == RIGHT and cell:
                        assert re.search(rf"│ *{re.escape(cell)} *│", text), (table.title, cell)


def test_the_answer_is_last_the_headline_and_the_first_verdicts():
    report = shipped_report(SAMPLE_TRACES / "spec_eager.sqlite")
    process = report.processes[0]
    lines = render_text(report, Terminal(width=120)).splitlines()
    # What a 120x40 terminal shows after the run: its last 39 lines.
    last = "\n".join(lines[-39:])
    assert "In short" in last
    assert " ".join(process.headline.split()[:6]) in last
    for candidate in process.candidates[:3]:
        assert f"  {candidate.rank}. {candidate.stage} {candidate.bucket}, launch-bound" in last
    assert lines[-1] == "  1 integrity note above"
    assert len([line for line in lines if "In short" in line]) == 1


def test_a_kernel_name_is_whole_where_the_width_allows():
    report = shipped_report(SAMPLE_TRACES / "spec_eager.sqlite", KERNELS)
    longest = max((row.name for row in report.processes[0].kernels.rows[:20]), key=len)
    assert len(longest) > 48  # longer than the shortest width a name is shortened to
    wide = render_text(report, Terminal(width=220))  # the whole table on one line
    assert longest in wide
    narrow = render_text(report, Terminal(width=80))
    assert longest not in narrow and max(map(len, narrow.splitlines())) <= 80
