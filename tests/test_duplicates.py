"""The same export given twice is refused by every command that takes several exports."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import shipped_trace
from trace_gaps.cli import app
from trace_gaps.duplicates import refuse_duplicate_exports
from trace_gaps.errors import TraceGapsError

runner = CliRunner()


@pytest.fixture
def rank0(tmp_path: Path) -> Path:
    source = shipped_trace("tp_rank0")
    return Path(shutil.copyfile(source, tmp_path / "rank0.sqlite"))


@pytest.fixture
def rank1() -> Path:
    source = shipped_trace("tp_rank1")
    return source


def reexported(source: Path, target: Path) -> Path:
    """The same capture session exported again: other bytes, the same session start."""
    shutil.copyfile(source, target)
    with sqlite3.connect(target) as connection:
        connection.execute("UPDATE META_DATA_EXPORT SET value = 'again' WHERE name = 'EXPORT_TIME'")
    return target


def twins(rank0: Path, how: str) -> Path:
    """A second name for rank0's export, made the given way."""
    twin = rank0.with_name(f"{how}.sqlite")
    if how == "symlink":
        twin.symlink_to(rank0)
    elif how == "hardlink":
        os.link(rank0, twin)
    elif how == "copy":
        shutil.copyfile(rank0, twin)
    else:
        reexported(rank0, twin)
    return twin


HOW = {
    "same": "the same file",
    "symlink": "the same file",
    "hardlink": "the same file",
    "copy": "the same content",
    "session": "the same capture session",
}


@pytest.mark.parametrize("how", HOW)
def test_a_second_name_for_one_export_is_found(rank0, rank1, how):
    twin = rank0 if how == "same" else twins(rank0, how)
    with pytest.raises(TraceGapsError, match=HOW[how]) as raised:
        refuse_duplicate_exports([rank0, rank1, twin])
    assert rank0.name in str(raised.value) and twin.name in str(raised.value)


def test_the_ranks_of_one_run_are_not_duplicates(rank0, rank1):
    refuse_duplicate_exports([rank0, rank1])  # two sessions 4.046 ms apart


def _one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "one export" in lines[0]
    return lines[0]


@pytest.mark.parametrize("how", ["same", "copy"])
def test_analyze_refuses_one_export_twice(rank0, how):
    # Before: exit 0 with every figure doubled (busy + idle above the step's wall time).
    twin = rank0 if how == "same" else twins(rank0, how)
    _one_line_error(runner.invoke(app, ["analyze", str(rank0), str(twin), "-f", "json"]))


def test_analyze_refuses_a_glob_that_repeats_a_named_export(rank0):
    twins(rank0, "hardlink")
    pattern = str(rank0.parent / "*.sqlite")
    _one_line_error(runner.invoke(app, ["analyze", pattern, "-q"]))


def test_report_refuses_a_symlinked_export(rank0, tmp_path):
    twin = twins(rank0, "symlink")
    bundle = tmp_path / "bundle"
    _one_line_error(runner.invoke(app, ["report", str(rank0), str(twin), "-o", str(bundle)]))
    assert not bundle.exists()


def test_diff_refuses_a_side_that_repeats_an_export(rank0, rank1):
    twin = twins(rank0, "session")
    side = str(rank0.parent / "*.sqlite")
    _one_line_error(runner.invoke(app, ["diff", side, str(rank1)]))
    _one_line_error(runner.invoke(app, ["diff", str(rank1), side]))
    assert twin.exists()


def test_files_alike_in_size_and_first_mib_are_told_apart_by_their_whole_content(tmp_path):
    head = bytes(range(256)) * 4096 * 2  # 2 MiB
    a, b, c = (tmp_path / name for name in ("a.sqlite", "b.sqlite", "c.sqlite"))
    a.write_bytes(head + b"tail-a")
    b.write_bytes(head + b"tail-b")
    c.write_bytes(head + b"tail-a")
    refuse_duplicate_exports([a, b])
    with pytest.raises(TraceGapsError, match="the same content"):
        refuse_duplicate_exports([a, b, c])
