"""Runs that could wait forever (issue 45): a Dask scheduler with no workers, an input that
is no regular file (/proc/kmsg, a character device). Each ends with one line of error."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_TRACES
from tests.test_errors import invoke

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"


@pytest.fixture
def two_exports(tmp_path: Path) -> list[Path]:
    return [
        Path(shutil.copy(SAMPLE, tmp_path / "r.sqlite")),
        Path(shutil.copy(SAMPLE_TRACES / "spec_sync.sqlite", tmp_path / "s.sqlite")),
    ]


@pytest.fixture
def scheduler_without_workers() -> Iterator[str]:
    """A real Dask scheduler (in this process, on its own thread) that no worker joins."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(
        n_workers=0, processes=False, protocol="tcp", dashboard_address=None, host="127.0.0.1"
    ) as cluster:
        yield cluster.scheduler_address


def one_error_line(args: list[object]) -> str:
    result = invoke([str(a) for a in args])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_scheduler_with_no_workers_is_an_error_within_the_deadline(
    two_exports, scheduler_without_workers, monkeypatch
):
    monkeypatch.setenv("TRACE_GAPS_WORKERS_TIMEOUT_S", "2")
    started = time.monotonic()
    line = one_error_line(["analyze", *two_exports, "--scheduler", scheduler_without_workers])
    assert time.monotonic() - started < 20
    assert line == (
        f"error: the Dask scheduler at {scheduler_without_workers} has no workers: none joined "
        f"within 2 s. Start one (dask worker {scheduler_without_workers}), or set "
        "TRACE_GAPS_WORKERS_TIMEOUT_S to wait longer."
    )


@pytest.mark.parametrize("given", ["soon", "0", "-1", "nan", "inf"])
def test_a_workers_timeout_that_is_no_positive_number_is_an_error(
    given, two_exports, scheduler_without_workers, monkeypatch
):
    monkeypatch.setenv("TRACE_GAPS_WORKERS_TIMEOUT_S", given)
    line = one_error_line(["analyze", *two_exports, "--scheduler", scheduler_without_workers])
    assert line.startswith(f"error: TRACE_GAPS_WORKERS_TIMEOUT_S={given!r} is not a number")


def run_cli(*args: object, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process of this checkout (a read that blocks cannot hang the test)."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "trace_gaps", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.skipif(
    not (os.path.exists("/proc/kmsg") and os.access("/proc/kmsg", os.R_OK)),
    reason="/proc/kmsg is readable only by root",
)
@pytest.mark.parametrize("command", [["info"], ["analyze"], ["report"]])
def test_proc_kmsg_is_refused_before_a_byte_is_read(command, tmp_path):
    extra = ["-o", tmp_path / "b.zip"] if command == ["report"] else []
    done = run_cli(*command, "/proc/kmsg", *extra)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "error: /proc/kmsg: is a file of the kernel's proc interface, not a file on a disk; "
        "pass the .sqlite file that `nsys export --type sqlite` wrote\n"
    )


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no procfs")
@pytest.mark.parametrize(
    ("path", "kind"), [("/proc/self/status", "proc"), ("/sys/kernel/uevent_seqnum", "sysfs")]
)
def test_procfs_and_sysfs_files_are_refused(path, kind):
    if not Path(path).exists():
        pytest.skip(f"no {path}")
    line = one_error_line(["info", path])
    assert line == (
        f"error: {path}: is a file of the kernel's {kind} interface, not a file on a disk; "
        "pass the .sqlite file that `nsys export --type sqlite` wrote"
    )


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no procfs")
def test_a_procfs_file_beside_an_export_is_refused_without_reading_it_for_duplicates(tmp_path):
    # Several exports are first compared for duplicates, which reads them: not this one.
    export = shutil.copy(SAMPLE, tmp_path / "r.sqlite")
    done = run_cli("analyze", export, "/proc/self/status", timeout_s=60)
    assert done.returncode == 1
    assert "/proc/self/status: is a file of the kernel's proc interface" in done.stderr


def test_a_fifo_put_in_place_after_the_check_is_not_waited_on(tmp_path, monkeypatch):
    from trace_gaps.nsys import export as export_module

    fifo = tmp_path / "x.sqlite"
    os.mkfifo(fifo)
    monkeypatch.setattr(export_module, "not_a_plain_file", lambda path: None)  # the race
    line = one_error_line(["info", fifo])
    assert line.startswith(f"error: {fifo}: is not a regular file (a FIFO, socket or device)")


# An nsys that records its pid and writes its export slowly.
SLOW_NSYS = """
import contextlib
import os
open(out + '.pid', 'w').write(str(os.getpid()))
with open(out, 'wb') as handle:
    for _ in range(600):
        handle.write(b'x' * 1000)
        handle.flush()
        time.sleep(0.1)
"""


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_nsys_dies_with_a_trace_gaps_killed_outright(tmp_path, monkeypatch):
    from tests.test_errors import fake_report
    from tests.test_hostile import fake_nsys

    fake_nsys(tmp_path, monkeypatch, SLOW_NSYS)
    report = fake_report(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-P", "-m", "trace_gaps", "analyze", str(report)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".run.partial-*.pid")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (pid_file,) = tmp_path.glob(".run.partial-*.pid")
    time.sleep(0.3)
    nsys = int(pid_file.read_text())
    child.kill()  # SIGKILL: no clean-up of trace-gaps runs
    child.wait(timeout=30)
    deadline = time.monotonic() + 10
    while is_running(nsys) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not is_running(nsys)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(nsys, signal.SIGKILL)


def test_jobs_on_several_exports_leave_nothing_in_tmpdir(two_exports, tmp_path):
    pytest.importorskip("dask.distributed")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-P", "-m", "trace_gaps", "analyze", *map(str, two_exports)]
        + ["--jobs", "2", "-q"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in scratch.rglob("*")) == []  # no dask-scratch-space/*.lock


@pytest.mark.parametrize("delay_s", [1.5, 3.0, 4.5])
def test_ctrl_c_of_jobs_on_several_exports_says_only_interrupted(delay_s, two_exports):
    """A Ctrl-C at the terminal reaches the whole process group: the Dask workers printed
    their KeyboardInterrupt tracebacks, and Dask its teardown errors, around the one line."""
    pytest.importorskip("dask.distributed")
    child = subprocess.Popen(
        [sys.executable, "-P", "-m", "trace_gaps", "analyze", *map(str, two_exports)]
        + ["--jobs", "2", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    time.sleep(delay_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGINT)  # as the terminal does
    _, stderr = child.communicate(timeout=120)
    assert stderr.decode().splitlines() in ([], ["error: interrupted"]), stderr.decode()
    assert child.returncode in (0, 130, -signal.SIGINT)
