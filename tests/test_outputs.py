"""Outputs never overwrite an input, and are written whole or not at all (issue 19)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from tests.test_errors import invoke
from trace_gaps.output import write_atomically

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A copy of a real sample export, in a folder of its own."""
    folder = tmp_path / "runs"
    folder.mkdir()
    return Path(shutil.copy(SAMPLE, folder / "r.sqlite"))


def refused(args: list[str], output: Path | str, inputs: list[Path]) -> str:
    """Run a command that must refuse its -o; check every input is unchanged; return the line."""
    before = {path: sha256(path) for path in inputs}
    result = invoke(args)
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {output}: is the input "), lines[0]
    assert "Choose another -o path" in lines[0]
    assert {path: sha256(path) for path in inputs} == before
    return lines[0]


def test_analyze_onto_its_own_export_is_refused(export):
    refused(["analyze", str(export), "-o", str(export)], export, [export])


def test_analyze_onto_its_export_by_another_spelling_is_refused(export, monkeypatch):
    monkeypatch.chdir(export.parent)
    other = Path("..") / "runs" / "r.sqlite"
    refused(["analyze", "r.sqlite", "-f", "json", "-o", str(other)], other, [export])


def test_a_symlinked_input_or_output_is_refused(export):
    link = export.with_name("link.sqlite")
    link.symlink_to(export)
    refused(["analyze", str(link), "-o", str(export)], export, [export])
    refused(["analyze", str(export), "-o", str(link)], link, [export])
    assert link.is_symlink()


def test_a_hard_link_to_the_input_is_refused(export):
    hard = export.with_name("hard.sqlite")
    os.link(export, hard)
    refused(["analyze", str(export), "-o", str(hard)], hard, [export])


def test_the_exports_sqlite_side_files_are_refused(export):
    wal = export.with_name("r.sqlite-wal")
    refused(["analyze", str(export), "-o", str(wal)], wal, [export])
    assert not wal.exists()


def test_diff_onto_its_after_export_is_refused(export):
    after = Path(shutil.copy(SAMPLE_TRACES / "spec_eager.sqlite", export.parent / "b.sqlite"))
    line = refused(["diff", str(export), str(after), "-o", str(after)], after, [export, after])
    assert f"is the input {after}" in line


@pytest.mark.parametrize("command", ["steps", "timeline"])
def test_a_plot_onto_its_export_is_refused(command, export):
    picture = Path(shutil.copy(export, export.with_name("r.png")))
    refused(["plot", command, str(picture), "-o", str(picture)], picture, [picture])


@pytest.mark.parametrize("name", ["steps.png", "report.md", "report.json", "timeline-worst.png"])
def test_a_report_folder_holding_the_export_under_a_bundle_name_is_refused(name, export):
    inside = Path(shutil.copy(export, export.parent / name))
    refused(["report", str(inside), "-o", str(export.parent)], export.parent / name, [inside])
    assert sorted(p.name for p in export.parent.iterdir()) == sorted(["r.sqlite", name])


def test_a_report_folder_beside_the_export_is_fine_when_forced(export, tmp_path):
    before = sha256(export)
    result = invoke(["report", str(export), "-o", str(export.parent)])
    assert result.exit_code == 1 and "is not empty" in result.stderr
    result = invoke(["report", str(export), "-o", str(export.parent), "--force"])
    assert result.exit_code == 0, result.output
    assert sha256(export) == before
    assert (export.parent / "report.md").is_file()
    assert not list(export.parent.glob(".*.tmp"))


def test_a_full_disk_leaves_the_old_output_whole_and_no_temporary_file(export, monkeypatch):
    output = export.with_name("out.md")
    output.write_text("the previous report\n")

    def disk_full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("trace_gaps.output.os.fsync", disk_full)
    result = invoke(["analyze", str(export), "-f", "md", "-o", str(output)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: cannot write {output}: No space left on device. Choose another -o path."
    ]
    assert output.read_text() == "the previous report\n"
    assert sorted(p.name for p in export.parent.iterdir()) == ["out.md", "r.sqlite"]


def test_a_failed_picture_leaves_no_partial_file(export, monkeypatch):
    output = export.with_name("steps.svg")

    def disk_full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("trace_gaps.output.os.fsync", disk_full)
    result = invoke(["plot", "steps", str(export), "-o", str(output)])
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr
    assert sorted(p.name for p in export.parent.iterdir()) == ["r.sqlite"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_writing_to_a_full_device_is_a_clean_error(export):
    result = invoke(["analyze", str(export), "-o", "/dev/full"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: cannot write /dev/full: No space left on device. Choose another -o path."
    ]


def test_write_atomically_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    output = tmp_path / "out.txt"
    output.write_text("old")
    output.chmod(0o640)
    write_atomically(output, lambda handle: None)
    assert output.read_text() == "" and (output.stat().st_mode & 0o777) == 0o640


def test_write_atomically_writes_through_a_symlinked_output(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_atomically(link, lambda handle: None)
    assert link.is_symlink() and target.read_text() == ""
