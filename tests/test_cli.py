"""The command line: exit codes, stdout and stderr for happy paths and user errors; help."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.test_report import eager_and_graph_export
from trace_gaps.cli import app

runner = CliRunner()


def test_analyze_prints_the_ledger_and_verdicts(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--skip", "0"])
    assert result.exit_code == 0, result.output
    assert "Step ledger" in result.stdout
    assert "Verdict" in result.stdout
    assert "draft" in result.stdout and "verify" in result.stdout


@pytest.mark.parametrize("fmt", ["text", "md", "json", "csv"])
def test_analyze_writes_each_format_to_a_file(export_builder, tmp_path, fmt):
    path = eager_and_graph_export(export_builder())
    out = tmp_path / f"out.{fmt}"
    result = runner.invoke(app, ["analyze", str(path), "-f", fmt, "-o", str(out), "--top", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = out.read_text()
    if fmt == "json":
        assert len(json.loads(text)["processes"][0]["candidates"]) == 3
    elif fmt == "csv":
        assert text.splitlines()[0] == "pid,stage,bucket,cause,ns_per_step,steps_analyzed"
    elif fmt == "md":
        assert text.startswith("# trace-gaps report")


def test_analyze_an_unknown_step_name_is_a_one_line_error(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--step", "nope"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {path}: no NVTX range named 'nope'")
    assert "decode_step, draft, verify" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_analyze_an_unknown_process_is_a_one_line_error(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "--process", "4242"])
    assert result.exit_code == 1
    assert "has no process 4242" in result.stderr


def test_info_lists_ranges_threads_and_row_counts(export_builder):
    path = eager_and_graph_export(export_builder())
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0, result.output
    assert "decode_step" in result.stdout
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in result.stdout
    data = json.loads(runner.invoke(app, ["info", str(path), "--json"]).stdout)
    assert data["row_counts"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 4 * 30 + 4 * 3
    assert data["ranges"][0]["name"] == "decode_step"


def test_every_command_and_option_has_help():
    import typer.main

    root = typer.main.get_command(app)
    stack = [((), root)]
    seen = 0
    while stack:
        path, command = stack.pop()
        for name, sub in getattr(command, "commands", {}).items():
            stack.append(((*path, name), sub))
        if getattr(command, "commands", None):
            continue
        seen += 1
        assert command.help, f"{path} has no help"
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"{path} option {param.name} has no help"
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0
    assert seen >= 2
