"""The command line presents itself plainly (issue 33): help names values without typer's
type placeholders, on every command, and a wrong choice is answered in one line."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from trace_gaps.cli import app

runner = CliRunner()
# typer's placeholders: <bool>, <list[Path]>, <int range>, <text|md|json|csv>; {before}.
PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\n]*>|\{[a-z_]+\}")


def command_paths(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command of the app, as the words that name it (() is the app itself)."""
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        found += command_paths(sub, (*path, name))
    return found


COMMANDS = command_paths(typer.main.get_command(app))


def test_every_command_is_walked() -> None:
    assert {("analyze",), ("diff",), ("plot", "timeline"), ("export", "perfetto")} <= set(COMMANDS)


@pytest.mark.parametrize("words", COMMANDS, ids=lambda words: " ".join(words) or "trace-gaps")
def test_help_names_values_without_type_placeholders(words: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert not PLACEHOLDER.findall(result.stdout), result.stdout


def test_help_names_values_plainly() -> None:
    analyze = runner.invoke(app, ["analyze", "--help"], env={"COLUMNS": "200"}).stdout
    assert "[EXPORTS]..." in analyze and "[text|md|json|csv]" in analyze
    assert re.search(r"--top\s+INTEGER", analyze) and re.search(r"--output\s+-o\s+PATH", analyze)
    diff = runner.invoke(app, ["diff", "--help"], env={"COLUMNS": "200"}).stdout
    assert re.search(r"Usage: \S+ diff \[OPTIONS\] BEFORE AFTER", diff), diff


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["analyze", "--demo", "-f", "html"],
            "--format/-f 'html': choose one of: text, md, json, csv.",
        ),
        (
            ["diff", "a.sqlite", "b.sqlite", "-f", "csv"],
            "--format/-f 'csv': choose one of: text, md, json.",
        ),
        (["info", "--demo", "--format", "md"], "--format/-f 'md': choose one of: text, json."),
    ],
)
def test_a_wrong_choice_is_answered_in_one_line(args: list[str], line: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {line}\n"
    assert result.stdout == ""


def test_a_typer_without_the_internals_the_help_reads_still_runs(monkeypatch) -> None:
    """usage.py reads typer 0.29's internals; where they are missing (another typer: one on a
    GPU host's image lacked Option.display_type, and every command crashed), commands run
    and the help is typer's own."""
    import trace_gaps.commands.usage as usage

    def missing(option: object) -> str:
        raise AttributeError("'TyperOption' object has no attribute 'display_type'")

    monkeypatch.setattr(usage, "_value_name", missing)
    assert runner.invoke(app, ["analyze", "--help"]).exit_code == 0
    analysed = runner.invoke(app, ["analyze", "--demo", "-q", "-f", "json"])
    assert analysed.exit_code == 0, analysed.output
