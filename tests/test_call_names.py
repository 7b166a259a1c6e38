"""Launch calls whose names resolve to '', NULL or text no CUDA call has (issue 45): noted and
flagged like a name id missing from StringIds, on a real export edited with SQL."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.builders import note_facts
from tests.conftest import SAMPLE_TRACES
from trace_gaps.nsys.calls import is_cuda_call_name
from trace_gaps.records.notes import Figures, NoteCode

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"
CALLS = 14927  # CUDA API rows of the sample
LAUNCHES = 5833  # of them named cudaLaunchKernel_v7000
LAUNCH_NAME = "(SELECT id FROM StringIds WHERE value = 'cudaLaunchKernel_v7000')"

# StringIds is declared NOT NULL: written again without that constraint for a NULL value.
UNCONSTRAINED = (
    "CREATE TABLE strings AS SELECT * FROM StringIds",
    "DROP TABLE StringIds",
    "ALTER TABLE strings RENAME TO StringIds",
)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return Path(shutil.copy(SAMPLE, tmp_path / "r.sqlite"))


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
@pytest.mark.parametrize("value", ["''", "NULL", "'launch the forward pass'", "'cupcake'", "'?'"])
def test_launch_calls_named_by_no_cuda_call_are_noted_and_flagged(
    value, reader, export, monkeypatch
):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    with sqlite3.connect(export) as connection:
        for statement in (
            *UNCONSTRAINED,
            f"INSERT INTO StringIds (id, value) VALUES (999999, {value})",
            f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 999999 WHERE nameId = {LAUNCH_NAME}",
        ):
            connection.execute(statement)
    connection.close()
    note = note_facts(export)[NoteCode.UNRESOLVED_CALL_NAMES]
    assert note.numbers == {"calls": LAUNCHES, "call_rows": CALLS}
    assert note.figures == (Figures.LAUNCHES,)


@pytest.mark.parametrize(
    ("name", "is_call"),
    [
        ("cudaLaunchKernel", True),
        ("cuLaunchKernelEx", True),
        ("nvrtcCompileProgram", True),
        ("cudaStreamSynchronize", True),
        ("", False),
        ("?", False),
        ("cupcake", False),
        ("launch", False),
        ("cudaLaunchKernel\n", False),
    ],
)
def test_cuda_call_names_are_told_from_other_text(name, is_call):
    assert is_cuda_call_name(name) is is_call
