"""The text report on a terminal (issue 44): the answer is the last thing on screen after a
run, no table cell wraps a number or a header word at 80 columns, and a kernel's name is
whole where the width allows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import (
    REPRESENTATIVE_SAMPLES,
    SAMPLE_TRACES,
    sample_trace_paths,
    shipped_report,
    sweep,
)
from trace_gaps.analysis.pipeline import AnalysisOptions
from trace_gaps.figures import RIGHT
from trace_gaps.render.console import Terminal
from trace_gaps.render.kernels import kernel_table
from trace_gaps.render.tables import candidate_table, ledger_table, stage_table
from trace_gaps.render.text import render_text

KERNELS = AnalysisOptions(kernel_summary=True)


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
