"""Captures whose GPU records were lost are named as such, never "no kernel ran"."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from tests.test_errors import error_line
from tests.test_hostile import SAMPLE


def _without_kernel_tables(tmp_path: Path, *, diagnostic: str | None) -> Path:
    path = Path(shutil.copy(SAMPLE, tmp_path / "lost.sqlite"))
    with sqlite3.connect(path) as connection:
        for table in ("KERNEL", "MEMCPY", "MEMSET"):
            connection.execute(f"DROP TABLE IF EXISTS CUPTI_ACTIVITY_KIND_{table}")
        if diagnostic is not None:
            connection.execute(
                "INSERT INTO DIAGNOSTIC_EVENT VALUES (5, 1, 1, 2, ?, NULL)", (diagnostic,)
            )
    connection.close()
    return path


def test_launch_calls_without_op_tables_are_lost_records_with_nsys_words(tmp_path: Path) -> None:
    path = _without_kernel_tables(
        tmp_path, diagnostic="Not all CUDA events might have been collected."
    )
    line = error_line(["analyze", str(path)], path)
    assert "no GPU activity records" in line and "the records were lost" in line
    assert "launch calls" in line
    assert "'Not all CUDA events might have been collected.'" in line
    assert "no kernel ran" not in line


def test_launch_calls_alone_still_say_records_were_lost(tmp_path: Path) -> None:
    path = _without_kernel_tables(tmp_path, diagnostic=None)
    line = error_line(["analyze", str(path)], path)
    assert "the records were lost" in line and "no kernel ran" not in line
