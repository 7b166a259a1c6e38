"""Runs that could wait forever (issue 45): a Dask scheduler with no workers, an input that
is no regular file (/proc/kmsg, a character device). Each ends with one line of error."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
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
