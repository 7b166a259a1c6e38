"""Text, Markdown and report.html draw one outline (issue 43): each draws report/outline.py,
and each section's first words are found, in the outline's order for its medium, in its
output. Markdown and HTML carry the same sections in the same order; the terminal's order
differs where the outline says so (issue 44: the verdicts a line each and the ledger under
the headline, the verdicts in full above the evidence, the recap last)."""

from __future__ import annotations

import html
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import (
    REPRESENTATIVE_SAMPLES,
    SAMPLE_TRACES,
    sample_trace_paths,
    shipped_report,
    shipped_trace,
    sweep,
)
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.nsys.load import load_trace
from trace_gaps.records.report import Report
from trace_gaps.render.console import UNBOUNDED, Terminal
from trace_gaps.render.html import render_page
from trace_gaps.render.markdown import render_block, render_markdown
from trace_gaps.render.text import render_text
from trace_gaps.report.build import build_report
from trace_gaps.report.notes import unreliable_lines
from trace_gaps.report.outline import Heading, Items, Lines, Medium, Section, outline
from trace_gaps.report.tables import Table
from trace_gaps.run.multi import analyse_exports

SAMPLES = sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES)
PROBE = 30  # a section is found by the first characters of its first block


def build(path: Path, *, what_if: str | None = None, kernels: bool = False) -> Report:
    trace = load_trace(path)
    analysis = analyse_trace(trace, AnalysisOptions(kernel_summary=kernels))
    return build_report(trace, analysis, what_if=what_if)


def outputs(report: Report) -> dict[str, str]:
    """The three documents as plain words: no wrapping, no markup, no escapes."""
    text = render_text(report, Terminal(width=UNBOUNDED))
    markdown = html.unescape(re.sub(r"\\(.)", r"\1", render_markdown(report)))
    page = render_page(report, [], [])
    body = page[page.index("<h2>Report</h2>") :]
    return {
        "text": text,
        "md": markdown,
        "html": html.unescape(re.sub(r"<[^>]+>", "", body)),
    }


def probe(section: Section) -> str:
    block = section.blocks[0]
    if isinstance(block, Table):
        words = block.title
    elif isinstance(block, Heading):
        words = block.text
    elif isinstance(block, Lines):
        words = block.lines[0]
    else:
        assert isinstance(block, Items)
        words = block.items[0]
    return " ".join(words.split())[:PROBE]


def sections_found(document: str, sections: list[Section]) -> list[str]:
    """The sections whose first words stand in the document, each after the one before."""
    found, at = [], 0
    for section in sections:
        where = document.find(probe(section), at)
        if where >= 0:
            found.append(section.name)
            at = where + 1
    return found


MEDIUM = {"text": Medium.TERMINAL, "md": Medium.DOCUMENT, "html": Medium.DOCUMENT}
# Sections only a terminal draws: the rest are drawn by every format, in places of its medium.
TERMINAL_ONLY = {"verdict in full", "recap"}


def assert_same_sections(report: Report) -> None:
    for fmt, document in outputs(report).items():
        sections = outline(report, MEDIUM[fmt])
        assert sections_found(document, sections) == [s.name for s in sections], fmt
    terminal = {s.name for s in outline(report, Medium.TERMINAL)}
    assert terminal - TERMINAL_ONLY == {s.name for s in outline(report, Medium.DOCUMENT)}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_text_markdown_and_html_carry_the_same_sections_in_order(path: Path) -> None:
    assert_same_sections(shipped_report(path))


def test_every_section_of_a_process_is_drawn_by_all_three_with_what_if_and_kernels() -> None:
    report = build(
        SAMPLE_TRACES / "spec_eager.sqlite", what_if="verify_forward=graph", kernels=True
    )
    names = {s.name for s in outline(report)}
    assert {"what-if", "candidates", "replay", "kernels", "evidence", "recap"} <= names
    terminal = [s.name for s in outline(report, Medium.TERMINAL)]
    at = terminal.index("headline")
    assert terminal[at : at + 4] == ["headline", "verdict", "ledger", "steps"]
    assert_same_sections(report)


def test_the_multi_rank_run_has_one_set_of_sections_per_rank_and_the_ranks_table() -> None:
    report = shipped_report(SAMPLE_TRACES / "spec_two_ranks.sqlite")
    names = [s.name for s in outline(report)]
    assert names.count("title") == len(report.processes) == 2
    assert "ranks" in names
    assert_same_sections(report)


def test_two_exports_of_one_run_carry_the_same_sections_in_all_three() -> None:
    """tp_rank0 and tp_rank1, one rank each, analysed as one run."""
    paths = [shipped_trace("tp_rank0"), shipped_trace("tp_rank1")]
    report = analyse_exports(paths, AnalysisOptions()).report
    names = [s.name for s in outline(report)]
    assert report.other_exports and names.count("title") == len(report.processes) == 2
    assert "ranks" in names
    assert_same_sections(report)


def test_a_section_skipped_or_moved_is_caught() -> None:
    """The comparison fails where a renderer leaves a section out or draws it elsewhere."""
    report = build(SAMPLE_TRACES / "spec_eager.sqlite", what_if="verify_forward=graph")
    sections = outline(report, Medium.DOCUMENT)
    names = [s.name for s in sections]

    def drawn(order: list[Section]) -> str:
        blocks = [
            line for section in order for block in section.blocks for line in render_block(block)
        ]
        return html.unescape(re.sub(r"\\(.)", r"\1", "\n".join(blocks)))

    assert sections_found(drawn(sections), sections) == names
    replay = names.index("replay")
    skipped = sections[:replay] + sections[replay + 1 :]
    assert sections_found(drawn(skipped), sections) != names
    moved = [*skipped, sections[replay]]
    assert sections_found(drawn(moved), sections) != names


def test_only_text_has_the_first_screen_and_the_verdicts_in_full_and_ends_with_the_recap() -> None:
    report = shipped_report(SAMPLE_TRACES / "spec_eager.sqlite")
    sections = outline(report)
    assert [s.name for s in sections if s.only is Medium.TERMINAL] == [
        "verdict",
        "ledger",
        "verdict in full",
        "recap",
    ]
    assert sections[-1].name == "recap"
    text = render_text(report, Terminal(width=UNBOUNDED))
    lines = text.rstrip().splitlines()
    recap = max(i for i, line in enumerate(lines) if line.startswith("In short"))
    assert all(line.startswith("  ") for line in lines[recap + 1 :])
    for document in (render_markdown(report), render_page(report, [], [])):
        assert "In short" not in document
        assert "Verdict in full" not in document


@pytest.fixture(scope="module")
def zeroed_starts(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """spec_eager with every tenth kernel's start zeroed (issue 43's damaged export)."""
    path = tmp_path_factory.mktemp("zeroed") / "spec_eager_zeroed.sqlite"
    shutil.copy(SAMPLE_TRACES / "spec_eager.sqlite", path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0 WHERE rowid % 10 = 0")
    db.close()
    return build(path)


def test_the_unreliable_lines_of_a_damaged_export_stand_in_all_three(
    zeroed_starts: Report,
) -> None:
    lines = unreliable_lines(zeroed_starts.unreliable)
    assert lines and all(line.startswith("Unreliable:") for line in lines)
    for fmt, document in outputs(zeroed_starts).items():
        for line in lines:
            assert line in document, fmt


def test_the_damaged_export_carries_the_same_sections_in_all_three(zeroed_starts: Report) -> None:
    assert "unreliable" in [s.name for s in outline(zeroed_starts)]
    assert_same_sections(zeroed_starts)
