"""Outputs never overwrite an input, and are written whole or not at all (issue 19)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

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


# --- -o naming a descriptor this process holds (issue 45) -----------------------------------


def run_cli(args: list[object], **streams: Any) -> subprocess.CompletedProcess[bytes]:
    """The command line in a process of its own, its streams as given (stderr captured)."""
    command = [sys.executable, "-m", "trace_gaps", *map(str, args)]
    return subprocess.run(command, stderr=subprocess.PIPE, check=False, **streams)


@pytest.fixture
def printed(export: Path) -> bytes:
    """What `analyze EXPORT -q` prints on stdout."""
    done = run_cli(["analyze", export, "-q"], stdout=subprocess.PIPE)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "build.log"])
def test_an_output_that_is_stdout_appends_to_the_file_behind_it(name, export, printed, tmp_path):
    # printf 'keep\n' > build.log; trace-gaps analyze x.sqlite -o /dev/stdout -q >> build.log
    log = tmp_path / "build.log"
    log.write_bytes(b"keep\n")
    inode = log.stat().st_ino
    with log.open("ab") as appended:
        done = run_cli(["analyze", export, "-o", name, "-q"], stdout=appended, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert log.stat().st_ino == inode
    assert log.read_bytes() == b"keep\n" + printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.log", "runs"]


def test_an_output_to_dev_stdout_reaches_a_pipe(export, printed):
    done = run_cli(["analyze", export, "-o", "/dev/stdout", "-q"], stdout=subprocess.PIPE)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == printed


@pytest.mark.parametrize("name", ["/dev/stdin", "/dev/fd/0", "notes.txt"])
def test_an_output_that_is_stdin_is_refused(name, export, tmp_path):
    # trace-gaps analyze x.sqlite -o /dev/stdin < notes.txt must not replace notes.txt.
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"notes\n")
    inode = notes.stat().st_ino
    with notes.open("rb") as read:
        done = run_cli(
            ["analyze", export, "-o", name], stdin=read, stdout=subprocess.PIPE, cwd=tmp_path
        )
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"error: {name}: is standard input; writing there would destroy what it reads from. "
        "Choose another -o path.\n"
    )
    assert done.stdout == b""
    assert (notes.stat().st_ino, notes.read_bytes()) == (inode, b"notes\n")


def test_write_atomically_writes_through_a_descriptor_it_is_named_by(tmp_path):
    appended, read_only = tmp_path / "appended.txt", tmp_path / "read.txt"
    for path in (appended, read_only):
        path.write_bytes(b"before\n")
    fd = os.open(appended, os.O_WRONLY | os.O_APPEND)
    read_fd = os.open(read_only, os.O_RDONLY)

    def write(handle: BinaryIO) -> None:
        handle.write(b"after\n")

    try:
        write_atomically(Path(f"/dev/fd/{fd}"), write)
        with pytest.raises(OSError):  # opened for reading: never replaced instead
            write_atomically(Path(f"/dev/fd/{read_fd}"), write)
    finally:
        os.close(fd)
        os.close(read_fd)
    assert appended.read_bytes() == b"before\nafter\n"
    assert read_only.read_bytes() == b"before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["appended.txt", "read.txt"]
