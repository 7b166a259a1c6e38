"""Inputs that ended in a traceback (issue 45): a full stdout under --help and --version,
a zoom window of 1e308 ms, names over 255 bytes. Each is one line of error now."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES
from tests.test_errors import invoke

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"
LONG = "a" * 300  # one name over NAME_MAX (255 bytes)


def run_cli(*args: object, stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-m", "trace_gaps", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["analyze", "--help"], ["plot", "timeline", "--help"]]
)
def test_help_and_version_to_a_full_stdout_are_one_line(args):
    with open("/dev/full", "w") as full:
        done = run_cli(*args, stdout=full)
    assert done.returncode == 1
    assert done.stderr == "error: cannot write to standard output: No space left on device.\n"


def test_help_to_a_pipe_closed_early_ends_quietly():
    child = subprocess.Popen(
        [sys.executable, "-P", "-m", "trace_gaps", "analyze", "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"},
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # | head -0
    stderr = child.stderr.read()
    child.wait(timeout=60)  # rich's own exit on a broken pipe: 1, silently
    assert stderr == b""


@pytest.mark.parametrize(
    "window", [["--from", "1e308"], ["--to", "1e308"], ["--from", "1e300", "--to", "1e308"]]
)
def test_a_zoom_window_past_any_float_ns_is_no_traceback(window, tmp_path):
    result = invoke(["plot", "timeline", str(SAMPLE), *window, "-o", str(tmp_path / "t.png")])
    assert result.exit_code in (0, 1), result.output
    if result.exit_code == 1:
        assert result.stderr.startswith("error: --from/--to: the window "), result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["info", f"{LONG}.sqlite"],
        ["analyze", f"{LONG}.sqlite"],
        ["analyze", "{sample}", f"{LONG}.sqlite"],
        ["diff", "{sample}", f"{LONG}.sqlite"],
        ["report", f"{LONG}.sqlite", "-o", "b.zip"],
        ["report", "{sample}", "-o", f"{LONG}.zip"],
        ["plot", "timeline", f"{LONG}.sqlite", "-o", "t.png"],
        ["plot", "steps", f"{LONG}.sqlite", "-o", "t.png"],
        ["export", "perfetto", f"{LONG}.sqlite", "-o", "t.json"],
        ["info", f"{LONG}/x.sqlite"],
    ],
)
def test_a_name_over_255_bytes_is_a_one_line_error(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sample = shutil.copy(SAMPLE, tmp_path / "p.sqlite")
    result = invoke([arg.format(sample=sample) for arg in args])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert f"{LONG}" in lines[0] and "too long" in lines[0]


def test_a_symlink_loop_is_named_as_one(tmp_path):
    (tmp_path / "a.sqlite").symlink_to(tmp_path / "b.sqlite")
    (tmp_path / "b.sqlite").symlink_to(tmp_path / "a.sqlite")
    result = invoke(["info", str(tmp_path / "a.sqlite")])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {tmp_path}/a.sqlite: is a symbolic link that leads back to itself (a loop); "
        "point it at the .sqlite file that `nsys export --type sqlite` wrote\n"
    )


def test_a_dangling_symlink_names_its_target(tmp_path):
    (tmp_path / "a.sqlite").symlink_to("gone.sqlite")
    result = invoke(["info", str(tmp_path / "a.sqlite")])
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"error: {tmp_path}/a.sqlite: is a symbolic link to gone.sqlite, which does not exist"
    )
