"""Every command ends with the README's exit codes: 0 ok; 1 bad input or an empty analysis;
2 usage error; 3 the diff --fail-if-slower gate. Ours are one line on stderr."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.test_diff import decode_loop, eager_verify
from trace_gaps.cli import app

runner = CliRunner()

USAGE_ERRORS = {
    "no export": ["analyze"],
    "--demo and an export": ["analyze", "--demo", "run.sqlite"],
    "--demo and exports of one run": ["analyze", "--demo", "a.sqlite", "b.sqlite"],
    "two steps to draw": [
        "plot",
        "timeline",
        "--demo",
        "--worst",
        "--step-index",
        "3",
        "-o",
        "t.png",
    ],
    "steps not a range": ["plot", "timeline", "--demo", "--steps", "5:3", "-o", "t.png"],
    "an image that is not png or svg": ["plot", "steps", "--demo", "-o", "t.jpg"],
    "--ranks with --process": [
        "plot",
        "timeline",
        "--demo",
        "--ranks",
        "--process",
        "1",
        "-o",
        "t.png",
    ],
    "a lever that is not STAGE=LEVER": ["analyze", "--demo", "--what-if", "graph"],
    "--scheduler with --demo": ["analyze", "--demo", "--scheduler", "tcp://localhost:1"],
    "--jobs with --scheduler": [
        "analyze",
        "a.sqlite",
        "b.sqlite",
        "-j",
        "2",
        "--scheduler",
        "tcp://h:1",
    ],
    "--what-if on several exports": ["analyze", "a.sqlite", "b.sqlite", "--what-if", "s=graph"],
    "perfetto steps not a range": ["export", "perfetto", "--demo", "--steps", "x", "-o", "p.json"],
    "info without an export": ["info"],
    "report without an export": ["report", "-o", "bundle"],
}


@pytest.mark.parametrize("args", USAGE_ERRORS.values(), ids=USAGE_ERRORS.keys())
def test_options_that_cannot_go_together_are_usage_errors_in_one_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("run.sqlite", "a.sqlite", "b.sqlite"):
        (tmp_path / name).write_bytes(b"")
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite", "b.sqlite", "run.sqlite"]


def test_typer_s_own_usage_errors_exit_2_too():
    assert runner.invoke(app, ["analyze", "--no-such-option"]).exit_code == 2
    assert runner.invoke(app, ["analyze", "--demo", "-f", "html"]).exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "no-such.sqlite"],
        ["analyze", "no-such-*.sqlite"],  # a glob that matches nothing
        ["plot", "timeline", "--demo", "--step-index", "9999", "-o", "t.png"],
    ],
)
def test_bad_input_exits_1_in_one_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_the_diff_gate_exits_3_after_writing_the_diff(export_builder):
    before = decode_loop(export_builder(), eager_verify(5)).write("before.sqlite")
    after = decode_loop(export_builder(), eager_verify(5), draft_kernel_ns=6_500).write(
        "after.sqlite"
    )
    result = runner.invoke(
        app, ["diff", str(before), str(after), "--skip", "0", "-f", "md", "--fail-if-slower", "10"]
    )
    assert result.exit_code == 3, result.output
    assert result.stdout.startswith("#")  # the diff is written before the gate
    assert result.stderr.splitlines() == [
        f"error: the code's part of the step time of process 100 in {after.name} (the "
        "machine's drift taken out) grew more than 10 % beyond noise"
    ]
