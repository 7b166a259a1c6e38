"""Text for a terminal: its width (COLUMNS, the terminal's, else a stable one), colour only
on a terminal, tables that fit and evidence that wraps instead of being cut (issue 33)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES
from tests.test_samples import sample_report
from trace_gaps.cli import app
from trace_gaps.commands.output_options import text_terminal
from trace_gaps.render.console import NOT_A_TERMINAL, Terminal, new_console, print_item
from trace_gaps.render.text import render_text
from trace_gaps.report.evidence import evidence_lines

runner = CliRunner()
BOX = "┃│┏┡└"


@pytest.mark.parametrize("name", ["spec_two_ranks", "spec_eager", "spec_sdpa_recompile"])
@pytest.mark.parametrize("width", [100, 80])
def test_text_fits_the_width_and_cuts_no_evidence(name: str, width: int) -> None:
    report = sample_report(SAMPLE_TRACES / f"{name}.sqlite")
    text = render_text(report, Terminal(width=width))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    # Every table row is whole: it opens and closes with the table's border.
    for line in lines:
        if line and line[0] in BOX:
            assert line.rstrip()[-1] in "┃│┓┩┘", line
    # Every evidence line is there word for word, wrapped, never elided.
    flowing = " ".join(text.split())
    several = len(report.processes) > 1
    for process in report.processes:
        for _, evidence in evidence_lines(process, export=report.export, several_processes=several):
            for line in evidence:
                assert " ".join(line.split()) in flowing, line


def test_a_table_too_wide_continues_below_with_its_key_columns() -> None:
    report = sample_report(SAMPLE_TRACES / "spec_eager.sqlite")
    text = render_text(report, Terminal(width=80))
    assert "(continued)" in text
    stage = report.processes[0].candidates[0].stage
    rows = [line for line in text.splitlines() if line.startswith("│") and f" {stage} " in line]
    assert len(rows) >= 2  # the stage named again beside its further columns


def test_a_wide_terminal_changes_nothing_that_fits() -> None:
    report = sample_report(SAMPLE_TRACES / "spec_eager.sqlite")
    assert render_text(report) == render_text(report, Terminal(width=160))
    assert "(continued)" not in render_text(report)


def test_colour_is_drawn_and_names_stay_inert() -> None:
    report = sample_report(SAMPLE_TRACES / "spec_eager.sqlite")
    coloured = render_text(report, Terminal(width=100, color=True))
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == render_text(report, Terminal(width=100))


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """stdout a terminal. Each test patches it again in its body: pytest's capture puts
    its own stdout back between a fixture and the test."""
    for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def test_a_terminal_gets_colour_and_its_width(on_a_terminal: pytest.MonkeyPatch) -> None:
    on_a_terminal.setattr(sys, "stdout", FakeTerminal())
    on_a_terminal.setenv("COLUMNS", "93")
    assert text_terminal(None, no_color=False) == Terminal(width=93, color=True)


def test_no_color_and_NO_COLOR_turn_colour_off(on_a_terminal: pytest.MonkeyPatch) -> None:
    on_a_terminal.setattr(sys, "stdout", FakeTerminal())
    assert text_terminal(None, no_color=False).color
    assert not text_terminal(None, no_color=True).color
    on_a_terminal.setenv("NO_COLOR", "1")
    assert not text_terminal(None, no_color=False).color


def test_a_file_or_pipe_gets_the_stable_width_unless_COLUMNS_is_set(
    on_a_terminal: pytest.MonkeyPatch,
) -> None:
    on_a_terminal.setattr(sys, "stdout", FakeTerminal())
    assert text_terminal(Path("out.txt"), no_color=False) == NOT_A_TERMINAL
    on_a_terminal.setattr(sys, "stdout", io.StringIO())
    assert text_terminal(None, no_color=False) == NOT_A_TERMINAL
    on_a_terminal.setenv("COLUMNS", "100")
    assert text_terminal(None, no_color=False) == Terminal(width=100, color=False)
    on_a_terminal.setenv("COLUMNS", "0")
    assert text_terminal(None, no_color=False) == Terminal(width=40, color=False)


def test_analyze_and_diff_take_no_color_and_COLUMNS() -> None:
    sample = str(SAMPLE_TRACES / "spec_eager.sqlite")
    analyzed = runner.invoke(app, ["analyze", sample, "--no-color"], env={"COLUMNS": "100"})
    assert analyzed.exit_code == 0, analyzed.output
    assert max(len(line) for line in analyzed.stdout.splitlines()) <= 100
    diffed = runner.invoke(app, ["diff", sample, sample, "--no-color"], env={"COLUMNS": "100"})
    assert diffed.exit_code == 0, diffed.output
    assert max(len(line) for line in diffed.stdout.splitlines()) <= 100


def test_in_colour_a_names_control_characters_are_written_out() -> None:
    # Colour is written as drawn (not escaped again): the names must be inert already.
    buffer = io.StringIO()
    console = new_console(buffer, Terminal(width=80, color=True))
    print_item(console, "kernel\x1b]0;retitled\x07\x1b[2J")
    console.print("Verdict:", style="bold")
    drawn = buffer.getvalue()
    assert "kernel\\u001b]0;retitled\\u0007\\u001b[2J" in drawn
    assert "\x1b" not in re.sub(r"\x1b\[[0-9;]*m", "", drawn)
    assert "\x1b[1m" in drawn


def test_info_fits_COLUMNS_and_a_pipe_keeps_its_lines() -> None:
    runner = CliRunner()
    sample = str(SAMPLE_TRACES / "spec_two_ranks.sqlite")
    piped = runner.invoke(app, ["info", sample])
    narrow = runner.invoke(app, ["info", sample], env={"COLUMNS": "80"})
    assert piped.exit_code == narrow.exit_code == 0
    # Unfitted, info has lines over 80 columns; fitted, none, and no word is lost.
    assert max(map(len, piped.stdout.splitlines())) > 120
    assert max(map(len, narrow.stdout.splitlines())) <= 80
    assert narrow.stdout.split() == piped.stdout.split()
