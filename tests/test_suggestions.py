"""Every command trace-gaps suggests runs as printed (issue 33): the evidence's "see it:
trace-gaps plot timeline …" and a lone rank's "e.g. trace-gaps analyze '…'", copied from
the output and run in the folder the user ran trace-gaps in."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, shipped_trace
from trace_gaps.cli import app

runner = CliRunner()
# A command in the output: "see it: trace-gaps … .png" or "(e.g. trace-gaps analyze '…')";
# any other mention of a command but Markdown's title "# trace-gaps report" is a new one.
SUGGESTION = re.compile(r"see it: (trace-gaps [^\n]*?\.png)|\(e\.g\. (trace-gaps [^)]*)\)")
ANY_COMMAND = re.compile(r"(?<!# )trace-gaps (?:analyze|info|diff|report|plot|export|mcp)\b")


def suggestions(output: str) -> list[str]:
    """The commands the output suggests, each once; every mention of a command is one."""
    flowing = " ".join(output.replace("\\_", "_").split())  # text wraps, Markdown escapes
    found = [a or b for a, b in SUGGESTION.findall(flowing)]
    assert len(found) == len(ANY_COMMAND.findall(flowing)), flowing
    return list(dict.fromkeys(found))


def run_as_printed(command: str) -> None:
    words = shlex.split(command)
    assert words[0] == "trace-gaps"
    result = runner.invoke(app, words[1:])
    assert result.exit_code == 0, (command, result.output)
    for output in words[words.index("-o") + 1 :][:1] if "-o" in words else []:
        assert Path(output).stat().st_size > 0, command


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_the_demos_suggestions_run_as_printed(fmt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anywhere: the demo trace is not in the user's folder
    result = runner.invoke(app, ["analyze", "--demo", "-q", "-f", fmt])
    assert result.exit_code == 0, result.output
    commands = suggestions(result.stdout)
    assert commands and all("--demo" in command for command in commands)
    for command in commands[:2]:
        run_as_printed(command)


def test_an_exports_suggestions_name_it_as_given(tmp_path, monkeypatch):
    # A path with a folder and a space: the command must name that path, quoted.
    (tmp_path / "runs").mkdir()
    shutil.copy(SAMPLE_TRACES / "spec_sync.sqlite", tmp_path / "runs" / "my run.sqlite")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["analyze", "runs/my run.sqlite", "-q"])
    assert result.exit_code == 0, result.output
    commands = suggestions(result.stdout)
    assert commands and all("'runs/my run.sqlite'" in command for command in commands)
    run_as_printed(commands[0])


def test_a_lone_ranks_suggestion_analyses_every_rank(tmp_path, monkeypatch):
    for rank in ("tp_rank0", "tp_rank1"):
        shutil.copy(shipped_trace(rank), tmp_path / f"{rank}.sqlite")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["analyze", "tp_rank0.sqlite", "-q", "-f", "json"])
    assert result.exit_code == 0, result.output
    verdicts = [
        c["verdict"] for p in json.loads(result.stdout)["processes"] for c in p["candidates"]
    ]
    (command,) = suggestions("\n".join(verdicts))
    assert command == "trace-gaps analyze 'tp_rank*.sqlite'"
    run_as_printed(command)
