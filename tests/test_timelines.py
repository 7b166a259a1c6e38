"""GPU timelines no GPU can have run (issue 45, fourth HIGH item): an op that holds the next
op of its stream whole, and copies of ops shifted in time or moved to another stream, in
real exports edited with SQL; and no such note on any real export."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import (
    SAMPLE_TRACES,
    corpus_trace_paths,
    peer_trace_paths,
    sample_trace_paths,
    shipped_report,
    sweep,
)
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.analysis.integrity import integrity_notes
from trace_gaps.nsys.load import load_trace
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, Severity
from trace_gaps.report.build import Report, build_report
from trace_gaps.run.one import analyse_export

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"  # 6612 kernels, 20 copies; a 7 s capture
KERNELS = 6612
KERNEL_ROW = "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1 OFFSET 3000)"
HALF_A_SECOND = 500_000_000


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return Path(shutil.copy(SAMPLE, tmp_path / "r.sqlite"))


def edit(path: Path, *statements: str) -> Path:
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()
    return path


def report_and_notes(path: Path, **options: object) -> tuple[Report, dict[NoteCode, NoteFacts]]:
    trace, analysis = analyse_export(path, AnalysisOptions(), **options)  # type: ignore[arg-type]
    notes = {note.code: note for note in integrity_notes(trace, analysis)}
    return build_report(trace, analysis), notes


def busy_ns(report: Report) -> int:
    return sum(s.busy_ns_per_step for s in report.processes[0].stages)


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
@pytest.mark.parametrize(
    "change",
    [
        "start = 1",  # issue 45: busy 9.32 -> 42.51 %, a top op of 328 ms in an 8.45 ms step
        f'"end" = "end" + {HALF_A_SECOND}',  # issue 45: a predicted step of -179 ms
        "start = start - 50000000",  # 50 ms early: holds the ops before it
    ],
)
def test_an_op_that_holds_the_next_op_of_its_stream_is_left_out_with_a_note(
    change, reader, export, monkeypatch
):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    clean = shipped_report(SAMPLE)
    edit(export, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {change} WHERE rowid = {KERNEL_ROW}")
    report, notes = report_and_notes(export)
    note = notes[NoteCode.IMPOSSIBLE_OP_TIMES]
    assert note.numbers == {"ops": 1, "op_rows": KERNELS + 20}
    assert (note.severity, note.figures) == (Severity.PARTIAL, (Figures.GPU_TIME,))
    # One kernel of 6,612 left out: busy time moves by that kernel at most.
    assert abs(busy_ns(report) - busy_ns(clean)) <= 0.01 * busy_ns(clean)
    for candidate in report.processes[0].candidates:
        assert candidate.saving_ns is None or candidate.saving_ns >= 0
        assert candidate.predicted_step_ns is None or candidate.predicted_step_ns > 0


NULL_STOP = (
    # The table is declared NOT NULL: written again without that constraint.
    "CREATE TABLE details AS SELECT * FROM ANALYSIS_DETAILS",
    "DROP TABLE ANALYSIS_DETAILS",
    "ALTER TABLE details RENAME TO ANALYSIS_DETAILS",
    "UPDATE ANALYSIS_DETAILS SET stopTime = NULL",
)


@pytest.mark.parametrize(
    "analysis_details",
    [
        ("DROP TABLE ANALYSIS_DETAILS",),
        ("UPDATE ANALYSIS_DETAILS SET stopTime = 0",),
        NULL_STOP,
    ],
    ids=["missing", "stop 0", "stop NULL"],
)
def test_a_start_at_zero_is_left_out_where_the_export_does_not_say_when_the_capture_stopped(
    analysis_details, export
):
    edit(
        export,
        *analysis_details,
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0 WHERE rowid = {KERNEL_ROW}",
    )
    report, notes = report_and_notes(export)
    assert notes[NoteCode.IMPOSSIBLE_OP_TIMES].numbers["ops"] == 1
    clean = shipped_report(SAMPLE)
    assert abs(busy_ns(report) - busy_ns(clean)) <= 0.01 * busy_ns(clean)


COPIES = {
    "shifted by 1 ns": 'start + 1, "end" + 1, streamId',
    "on another stream": 'start, "end", streamId + 1000',
    "shifted and on another stream": 'start + 3, "end" + 3, streamId + 1',
}


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
@pytest.mark.parametrize("how", list(COPIES))
def test_every_kernel_copied_is_left_out_with_a_note(how, reader, export, monkeypatch):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    columns = [
        row[1]
        for row in sqlite3.connect(export).execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")
    ]
    moved = COPIES[how].split(", ")
    values = [
        {"start": moved[0], "end": moved[1], "streamId": moved[2]}.get(c, f'"{c}"') for c in columns
    ]
    quoted = ", ".join(f'"{c}"' for c in columns)
    edit(
        export,
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({quoted}) "
        f"SELECT {', '.join(values)} FROM CUPTI_ACTIVITY_KIND_KERNEL",
    )
    report, notes = report_and_notes(export)
    assert notes[NoteCode.DUPLICATE_ROWS].numbers == {"ops": KERNELS, "calls": 0}
    assert NoteCode.IMPOSSIBLE_OP_TIMES not in notes
    # The copies left out, the report is the clean export's: counts not doubled.
    clean = shipped_report(SAMPLE)
    assert report.processes[0].stages == clean.processes[0].stages
    assert report.processes[0].ledger == clean.processes[0].ledger


@pytest.mark.parametrize("chunk_rows", [100_000, 997])
def test_copies_are_found_across_windows_and_chunks(chunk_rows, export, monkeypatch):
    monkeypatch.setattr("trace_gaps.nsys.read.CHUNK_ROWS", chunk_rows)
    # One kernel pushed 0.5 s later, then every kernel copied 1 ns later: the copies are
    # left out, and the pushed kernel, which holds the next kernel of its stream.
    edit(
        export,
        f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + {HALF_A_SECOND} '
        f"WHERE rowid = {KERNEL_ROW}",
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 1, "end" = "end" + 1 '
        f"WHERE rowid > {KERNELS}",
    )
    report, notes = report_and_notes(export, window_rows=2_000)
    assert notes[NoteCode.DUPLICATE_ROWS].numbers["ops"] == KERNELS
    assert notes[NoteCode.IMPOSSIBLE_OP_TIMES].numbers["ops"] == 1
    clean = shipped_report(SAMPLE)
    assert abs(busy_ns(report) - busy_ns(clean)) <= 0.01 * busy_ns(clean)


def test_the_words_say_what_was_left_out(export):
    edit(export, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 1 WHERE rowid = {KERNEL_ROW}")
    report, _ = report_and_notes(export)
    (text,) = [n.text for n in report.notes if n.code == NoteCode.IMPOSSIBLE_OP_TIMES.value]
    assert "holds the next op of its stream" in text


@pytest.mark.parametrize(
    "path",
    # the peer traces are absent in CI: their representative is swept only where present
    sweep(
        [*sample_trace_paths(), *corpus_trace_paths()],
        {"plain_decode", "spec_two_ranks", "tp_graph"},
    )
    + sweep(peer_trace_paths(), {"mfu_2gpu_before"}),
    ids=lambda p: p.stem,
)
def test_no_real_export_has_an_impossible_op_or_a_copy(path):
    """Measured on every sample, corpus and peer capture: consecutive ops
    of a stream overlap by up to 12.4 µs (mfu_2gpu_before: a programmatic dependent launch;
    tp_graph: 1.1 µs, a graph's first kernel after an eager one), but none holds the next
    whole, and no two ops share a correlation id and graph node."""
    info = load_trace(path).info
    assert (info.impossible_ops, info.duplicated_ops, info.unresolved_calls) == (0, 0, 0)
