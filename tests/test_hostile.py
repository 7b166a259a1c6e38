"""Hostile exports (issue 19): copies of real samples edited with SQL to hold corrupt string
tables, impossible times, odd step ranges and names meant to break a renderer. Each gives a
clean one-line error, or a report whose integrity notes say what was left out."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from matplotlib import rc_context
from typer.testing import Result

from tests.builders import note_facts
from tests.conftest import SAMPLE_TRACES, shipped_json, shipped_report
from tests.test_csv_cells import csv_header
from tests.test_errors import error_line, fake_report, invoke
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.analysis.integrity import integrity_notes
from trace_gaps.parallel import usable_cores
from trace_gaps.plot import plot_steps, plot_timeline
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, Severity
from trace_gaps.report.build import Report, build_report
from trace_gaps.report.timeline import StepPick, TimelineRequest
from trace_gaps.run.one import analyse_export

SAMPLE = SAMPLE_TRACES / "plain_decode.sqlite"
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@pytest.fixture(autouse=True)
def ctrl_c_reaches_the_children() -> Iterator[None]:
    """pytest-xdist's workers ignore SIGINT, and an ignored signal stays ignored in every
    program they start: such a child never sees the Ctrl-C these tests send. A handler (not
    SIG_IGN) is reset to the default in the child, as a terminal starts a program."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A copy of a real sample export (19 decode_step ranges, each with forward and sample)."""
    return Path(shutil.copy(SAMPLE, tmp_path / "r.sqlite"))


def edit(path: Path, *statements: str, params: tuple[object, ...] = ()) -> Path:
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement, params if "?" in statement else ())
    connection.close()
    return path


def through_both_readers(values: list[str]) -> list[object]:
    """(reader, value) parameters: every value through the Arrow reader, the first also through
    sqlite3 (TRACE_GAPS_NO_ARROW=1); the other values through sqlite3 in the thorough run."""
    return [("arrow", v) for v in values] + [
        ("sqlite3", v) if i == 0 else pytest.param("sqlite3", v, marks=pytest.mark.thorough)
        for i, v in enumerate(values)
    ]


def pairwise(firsts: list[Any], seconds: list[Any]) -> list[Any]:
    """Every (first, second) parameter pair: the i-th of each together in every run, so that
    each value is seen once; the other pairs, the same checks again, in the thorough run."""
    return [
        (a, b) if i == j else pytest.param(a, b, marks=pytest.mark.thorough)
        for i, a in enumerate(firsts)
        for j, b in enumerate(seconds)
    ]


def ok(args: list[str]) -> Result:
    result = invoke([str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


# --- names drawn literally ------------------------------------------------------------------

MATH_NAMES = ("Main$$anonfun$main$1", "$x^2$")


def rename_stages(path: Path) -> Path:
    return edit(
        path,
        f"UPDATE NVTX_EVENTS SET text = '{MATH_NAMES[0]}' WHERE text = 'forward'",
        f"UPDATE NVTX_EVENTS SET text = '{MATH_NAMES[1]}' WHERE text = 'sample'",
    )


@pytest.mark.parametrize("command", [["plot", "steps"], ["plot", "timeline"]])
def test_dollar_signs_in_names_do_not_break_the_plots(command, export, tmp_path):
    rename_stages(export)
    ok([*command, export, "--depth", "2", "-o", tmp_path / "p.png"])


def test_dollar_signs_in_names_do_not_break_the_report_bundle(export, tmp_path):
    rename_stages(export)
    ok(["report", export, "--depth", "2", "-o", tmp_path / "bundle"])


@pytest.mark.parametrize("draw", [plot_steps, plot_timeline])
def test_names_with_dollar_signs_are_drawn_as_written(draw, export):
    rename_stages(export)
    views = (TimelineRequest(StepPick.MEDIAN),)
    trace, analysis = analyse_export(export, AnalysisOptions(depth=2), timelines=views)
    figure = draw(build_report(trace, analysis))
    svg = io.BytesIO()
    with rc_context({"svg.fonttype": "none"}):  # text stays text in the SVG
        figure.savefig(svg, format="svg")
    drawn = svg.getvalue().decode()
    for name in MATH_NAMES:
        assert name in drawn


# --- corrupt string tables ------------------------------------------------------------------

COMMANDS = [["analyze"], ["analyze", "-f", "json"], ["info"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_string_table_gives_a_report_with_unknown_names(command, export):
    edit(export, "DELETE FROM StringIds")
    ok([*command, export])


def duplicate_string_ids(path: Path) -> Path:
    """StringIds without its primary key, 50 ids written twice with another value."""
    return edit(
        path,
        "ALTER TABLE StringIds RENAME TO Original",
        "CREATE TABLE StringIds (id INTEGER, value TEXT)",
        "INSERT INTO StringIds SELECT id, value FROM Original",
        "INSERT INTO StringIds SELECT id, value || ' (dup)' FROM Original LIMIT 50",
        "DROP TABLE Original",
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_duplicated_string_ids_keep_their_first_value(command, export):
    duplicate_string_ids(export)
    depth = ["--depth", "2"] if command[0] == "analyze" else []
    assert "(dup)" not in ok([*command, export, *depth]).stdout


# --- impossible times -----------------------------------------------------------------------

KERNEL_ROW = "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1 OFFSET 3000)"


@pytest.mark.parametrize(
    ("reader", "change"),
    through_both_readers(
        [
            f"start = {INT64_MIN}",
            "start = 9.3e18",
            f'"end" = {INT64_MAX}',
            '"end" = start + 100000000000',  # 100 s, in a 7 s capture
            "start = -5",
            '"end" = start - 10',
            "start = 0",  # issue 28: took GPU busy from 9.3 % to 42.5 %
            'start = start + 8000000000, "end" = "end" + 8000000000',  # past the capture's end
        ]
    ),
)
def test_an_op_with_impossible_times_is_left_out_with_a_note(change, reader, export, monkeypatch):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    clean = shipped_report(SAMPLE)
    edit(export, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {change} WHERE rowid = {KERNEL_ROW}")
    report, notes = report_and_notes(export)
    note = notes[NoteCode.IMPOSSIBLE_OP_TIMES]
    assert note.numbers == {"ops": 1, "op_rows": 6632}
    assert (note.severity, note.figures) == (Severity.PARTIAL, (Figures.GPU_TIME,))
    # One op of 6,612 left out: the busy time moves by at most that op, never by multiples.
    busy, clean_busy = (
        sum(s.busy_ns_per_step for s in r.processes[0].stages) for r in (report, clean)
    )
    assert abs(busy - clean_busy) <= 0.01 * clean_busy


@pytest.mark.parametrize(
    ("reader", "change"),
    through_both_readers([f"start = {INT64_MIN}", '"end" = 9.4e18', "start = -1"]),
)
def test_a_call_with_impossible_times_is_left_out_with_a_note(change, reader, export, monkeypatch):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    edit(export, f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET {change} WHERE rowid = 500")
    assert note_facts(export)[NoteCode.IMPOSSIBLE_CALL_TIMES].numbers["calls"] == 1


def json_report(path: Path, *args: str) -> dict:
    return json.loads(ok(["analyze", path, "-f", "json", *args]).stdout)


def report_and_notes(path: Path) -> tuple[Report, dict[NoteCode, NoteFacts]]:
    """The report of an export, and the integrity notes its analysis found, by code."""
    trace, analysis = analyse_export(path, AnalysisOptions())
    notes = {note.code: note for note in integrity_notes(trace, analysis)}
    return build_report(trace, analysis), notes


# --- odd step ranges ------------------------------------------------------------------------

NINTH_STEP = "(SELECT rowid FROM NVTX_EVENTS WHERE text = 'decode_step' LIMIT 1 OFFSET 8)"


@pytest.mark.parametrize("change", [f"start = {INT64_MIN}", '"end" = start - 1000', "start = -1"])
def test_a_step_with_impossible_times_is_left_out_with_a_note(change, export):
    edit(export, f"UPDATE NVTX_EVENTS SET {change} WHERE rowid = {NINTH_STEP}")
    report, notes = report_and_notes(export)
    assert notes[NoteCode.IMPOSSIBLE_RANGE_TIMES].numbers == {"ranges": 1}
    steps = report.processes[0].step_rows
    assert len(steps) == 18 and all(s.wall_ns > 0 for s in steps)


def test_a_timeline_of_steps_after_an_int64_min_step_draws(export, tmp_path):
    edit(export, f"UPDATE NVTX_EVENTS SET start = {INT64_MIN} WHERE rowid = {NINTH_STEP}")
    ok(["plot", "timeline", export, "--steps", "0:3", "-o", tmp_path / "t.png"])


def test_overlapping_steps_are_counted_in_a_note(export):
    edit(
        export,
        'UPDATE NVTX_EVENTS SET "end" = "end" + 10000000000 '
        "WHERE rowid = (SELECT rowid FROM NVTX_EVENTS WHERE text = 'decode_step' LIMIT 1 OFFSET 5)",
    )
    assert note_facts(export)[NoteCode.OVERLAPPING_STEP_RANGES].numbers == {
        "overlapping": 13,
        "instances": 19,
        "step": "decode_step",
    }


# --- stdout problems ------------------------------------------------------------------------


def run_cli(args: list[object], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    """The installed CLI in a child process: real stdout and stderr, real signals."""
    command = [sys.executable, "-m", "trace_gaps", *map(str, args)]
    done = subprocess.run(command, stderr=subprocess.PIPE, check=False, timeout=120, **kwargs)  # type: ignore[call-overload]
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_stdout_is_a_one_line_error(export):
    with open("/dev/full", "wb") as full:
        done = run_cli(["analyze", export], stdout=full)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "error: cannot write to standard output: No space left on device. Pass -o FILE instead."
    ]


def test_a_closed_stdout_is_a_one_line_error(export):
    command = shlex.join([sys.executable, "-m", "trace_gaps", "analyze", str(export)])
    done = subprocess.run(f"{command} >&-", shell=True, stderr=subprocess.PIPE, check=False)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "error: standard output is closed; pass -o FILE, or redirect it."
    ]


def test_a_closed_pipe_ends_quietly(export):
    command = shlex.join([sys.executable, "-m", "trace_gaps", "analyze", str(export)])
    done = subprocess.run(f"{command} | head -c 10", shell=True, capture_output=True, check=False)
    assert done.stdout == b"Export: r." and done.stderr == b""


def test_names_a_latin1_stdout_cannot_encode_are_written_as_escapes(export):
    edit(export, "UPDATE NVTX_EVENTS SET text = 'вперёд→' WHERE text = 'forward'")
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    done = run_cli(["analyze", export, "--depth", "2"], stdout=subprocess.PIPE, env=env)
    assert done.returncode == 0
    assert "\\u0432\\u043f\\u0435\\u0440\\u0451\\u0434\\u2192" in done.stdout.decode("latin-1")


# The child interrupts itself (SIGINT, as Ctrl-C sends) when the command first imports the
# named module: the moment is the same on every run, however loaded the machine.
INTERRUPT_AT_IMPORT = """
import builtins, os, signal, sys
target = sys.argv.pop(1)
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == target:
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
from trace_gaps.__main__ import main
main()
"""


@pytest.mark.parametrize(
    "module",
    ["trace_gaps.cli", "numpy", "pandas", "sqlite3", "trace_gaps.analysis.engine.pipeline"],
)
def test_ctrl_c_while_the_libraries_load_is_one_line(module, export):
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT_AT_IMPORT, module, "analyze", str(export)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
    )
    assert done.stderr == b"error: interrupted\n"
    assert done.returncode == 130


# --- lost kernel records --------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
def test_launch_calls_whose_kernels_were_lost_are_counted_in_a_note(reader, export, monkeypatch):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    assert not any(n["code"] == "lost_launch_records" for n in shipped_json(SAMPLE)["notes"])
    edit(export, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
    numbers = note_facts(export)[NoteCode.LOST_LAUNCH_RECORDS].numbers
    assert (numbers["missing"], numbers["launches"]) == (3069, 6155)
    assert numbers["stages"][:2] == ("forward", "sample")  # type: ignore[index]


def test_an_export_whose_kernel_records_were_all_lost_says_so(export):
    edit(export, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    line = error_line(["analyze", str(export)], export)
    assert "has 6612 launch calls but no GPU activity records" in line
    assert "GPU tracing was off, or the records were lost" in line
    assert "a process that exits abnormally can lose them" in line
    assert "--trace=cuda" in line and "exit normally" in line and "no kernel" not in line


def test_nsys_diagnostics_about_lost_events_are_quoted(export):
    edit(
        export,
        "INSERT INTO DIAGNOSTIC_EVENT VALUES "
        "(5, 1, 1, 2, 'CUPTI: 1234 events were lost.\tIncrease the buffer size.', NULL)",
    )
    assert note_facts(export)[NoteCode.NSYS_LOST_EVENTS].numbers == {
        "messages": ("CUPTI: 1234 events were lost.\tIncrease the buffer size.",)
    }
    # The sample's own diagnostics (injection loaded, buffers flushed on stop) are not quoted.
    assert not any(n["code"] == "nsys_lost_events" for n in shipped_json(SAMPLE)["notes"])


# --- duplicated rows ------------------------------------------------------------------------


def doubled(table: str) -> list[str]:
    """SQL statements writing every row of the table twice, each copy next to it by start."""
    return [
        f"ALTER TABLE {table} RENAME TO Original",
        f"CREATE TABLE {table} AS SELECT * FROM "
        "(SELECT * FROM Original UNION ALL SELECT * FROM Original) ORDER BY start",
        "DROP TABLE Original",
    ]


@pytest.mark.parametrize("where", ["next to each other", "appended"])
def test_duplicated_rows_are_left_out_with_a_note(where, export):
    clean = shipped_json(SAMPLE)
    if where == "appended":  # out of start order: read whole
        edit(
            export,
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        )
    else:  # in start order: streamed
        edit(
            export,
            *doubled("CUPTI_ACTIVITY_KIND_KERNEL"),
            *doubled("CUPTI_ACTIVITY_KIND_RUNTIME"),
        )
    report = json_report(export)
    assert report["notes"][-1]["code"] == NoteCode.DUPLICATE_ROWS
    assert note_facts(export)[NoteCode.DUPLICATE_ROWS].numbers == {"ops": 6612, "calls": 14927}
    assert report["processes"] == clean["processes"]


# --- names that collide or are not text -----------------------------------------------------


def test_a_range_named_like_a_special_stage_stays_apart_from_it(export):
    edit(export, "UPDATE NVTX_EVENTS SET text = '(no stage)' WHERE text = 'forward'")
    report = json_report(export)
    stages = {s["name"]: s for s in report["processes"][0]["stages"]}
    clean = {s["name"]: s for s in shipped_json(SAMPLE)["processes"][0]["stages"]}
    assert (
        stages["(no stage) (NVTX range)"]["busy_ns_per_step"]
        == (clean["forward"]["busy_ns_per_step"])
    )
    assert stages["(no stage)"] == clean["(no stage)"]


@pytest.mark.parametrize(("reader", "which"), through_both_readers(["first", "a later"]))
def test_a_range_name_stored_as_a_blob_reads_as_text(which, reader, export, monkeypatch):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    row = "(SELECT min(rowid) FROM NVTX_EVENTS)" if which == "first" else NINTH_STEP
    edit(export, f"UPDATE NVTX_EVENTS SET text = CAST(text AS BLOB) WHERE rowid = {row}")
    args = ["--step", "decode_step", "--depth", "2"]
    result = ok(["analyze", export, "-f", "json", *args])
    assert "b'" not in result.stdout
    assert json.loads(result.stdout)["processes"] == shipped_json(SAMPLE, *args)["processes"]


# --- side files, locks and odd files --------------------------------------------------------


def test_a_wal_mode_export_is_read_without_creating_files_beside_it(export):
    edit(export, "PRAGMA journal_mode=WAL")
    assert sorted(p.name for p in export.parent.iterdir()) == ["r.sqlite"]
    before = export.read_bytes()
    for command in (["analyze"], ["info"]):
        ok([*command, export])
    assert sorted(p.name for p in export.parent.iterdir()) == ["r.sqlite"]
    assert export.read_bytes() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only folder")
def test_a_wal_mode_export_in_a_read_only_folder_is_read(export):
    edit(export, "PRAGMA journal_mode=WAL")
    export.parent.chmod(0o555)
    try:
        ok(["analyze", export])
    finally:
        export.parent.chmod(0o755)


def test_an_export_locked_by_another_program_says_so(export):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(export)!r}, isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "c.execute('DELETE FROM StringIds WHERE id < 0')\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        line = error_line(["analyze", str(export)], export)
    finally:
        holder.kill()
        holder.wait()
    assert "is locked by another program" in line
    assert "damaged" not in line and "--force-overwrite" not in line


@pytest.mark.parametrize("suffix", ["-journal", "-wal"])
def test_pending_writes_beside_the_export_are_named(suffix, export):
    side = export.with_name("r.sqlite" + suffix)
    side.write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(100))
    line = error_line(["analyze", str(export)], export)
    assert f"beside it (r.sqlite{suffix}) with changes not yet in the file" in line
    assert side.read_bytes().startswith(b"\xd9\xd5")


def cut_wal_export(export: Path) -> Path:
    """A WAL-mode export cut in half, as a checkpoint that is still writing it leaves it."""
    data = edit(export, "PRAGMA journal_mode=WAL").read_bytes()
    export.write_bytes(data[: len(data) // 2])
    return export


def test_a_wal_export_still_being_written_is_called_incomplete_not_damaged(export):
    cut_wal_export(export)
    for suffix in ("-wal", "-shm"):  # a writer's files: its log emptied by a checkpoint
        export.with_name(export.name + suffix).write_bytes(b"")
    line = error_line(["analyze", str(export)], export)
    assert "is being written by another program (r.sqlite-wal and r.sqlite-shm beside it;" in line
    assert "wait until that program is done" in line
    assert "damaged" not in line and "--force-overwrite" not in line


def test_a_cut_wal_export_without_a_writer_is_damaged(export):
    line = error_line(["analyze", str(cut_wal_export(export))], export)
    assert "is damaged or truncated" in line and "being written" not in line


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "r.sqlite"
    os.mkfifo(fifo)
    assert "is not a regular file (a FIFO" in error_line(["analyze", str(fifo)], fifo)


@pytest.mark.parametrize(
    ("suffix", "magic", "command"),
    [
        (".gz", b"\x1f\x8b\x08\x00", "gunzip -k"),
        (".xz", b"\xfd7zXZ\x00\x00\x04", "unxz -k"),
        (".zst", b"\x28\xb5\x2f\xfd\x00", "unzstd"),
    ],
)
def test_a_compressed_export_says_to_decompress_it(suffix, magic, command, tmp_path):
    path = tmp_path / f"r.sqlite{suffix}"
    path.write_bytes(magic + SAMPLE.read_bytes()[:1000])
    line = error_line(["analyze", str(path)], path)
    assert line.endswith(f"decompress it first: {command} {path}")


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
def test_a_null_in_a_numeric_column_names_table_column_and_rows(reader, export, monkeypatch):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    edit(
        export,
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO Original",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM Original",
        "DROP TABLE Original",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = NULL WHERE rowid < 4",
    )
    line = error_line(["analyze", str(export)], export)
    assert f"error: {export}: has NULL in 3 rows of CUPTI_ACTIVITY_KIND_KERNEL.streamId," in line
    assert "pandas" not in line and "non-finite" not in line


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
def test_nulls_in_several_chunks_are_counted_in_the_whole_table(reader, export, monkeypatch):
    from trace_gaps.nsys import read

    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    monkeypatch.setattr(read, "CHUNK_ROWS", 4)
    edit(
        export,
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO Original",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM Original",
        "DROP TABLE Original",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = NULL WHERE rowid IN (2, 9, 3000)",
    )
    line = error_line(["analyze", str(export)], export)
    assert f"error: {export}: has NULL in 3 rows of CUPTI_ACTIVITY_KIND_KERNEL.streamId," in line


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = x'0102' WHERE rowid < 4",
            "has a BLOB in 3 rows of CUPTI_ACTIVITY_KIND_KERNEL.start,",
        ),
        (  # the query reads pid as (globalTid >> 24) & 16777215: the export's column is named
            "UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid < 4",
            "has NULL in 3 rows of NVTX_EVENTS.globalTid,",
        ),
        (
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid % 1000 = 7",
            "has NULL in 7 rows of CUPTI_ACTIVITY_KIND_KERNEL.globalPid,",
        ),
        (  # "end" is an SQL word, and a column where the query quotes it
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = 'soon' WHERE rowid < 3",
            "has text in 2 rows of CUPTI_ACTIVITY_KIND_KERNEL.end,",
        ),
    ],
)
def test_a_bad_value_names_the_exports_own_column_and_kind(change, said, export):
    edit(export, change)
    assert f"error: {export}: {said}" in error_line(["analyze", str(export)], export)


# --- control characters in names ------------------------------------------------------------

ESCAPES = "fw\x1b[2J\x1b]0;owned\x07\x00\r\x9bX"


@pytest.mark.parametrize(
    "command", [["analyze"], ["analyze", "-f", "md"], ["analyze", "-f", "json"], ["info"]]
)
def test_control_characters_in_names_are_escaped(command, export):
    edit(export, "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", params=(ESCAPES,))
    depth = ["--depth", "2"] if command[0] == "analyze" else []
    shown = ok([*command, export, *depth]).stdout
    assert not any(c in shown for c in "\x1b\x07\x00\r\x9b")
    assert "fw\\u001b" in shown and "owned" in shown and "\\u009bX" in shown
    if "json" in command:  # the same escape as JSON's: the name is kept exactly
        names = [s["name"] for s in json.loads(shown)["processes"][0]["stages"]]
        assert ESCAPES in names


@pytest.mark.parametrize("to_file", [False, True])
def test_csv_escapes_control_characters_as_the_text_does(to_file, export, tmp_path):
    edit(export, "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", params=(ESCAPES,))
    out = tmp_path / "r.csv"
    shown = ok(["analyze", export, "--depth", "2", "-f", "csv", *(["-o", out] if to_file else [])])
    written = out.read_text() if to_file else shown.stdout
    assert not any(c in written for c in "\x1b\x07\x00\r\x9b")
    assert "fw\\u001b[2J\\u001b]0;owned\\u0007\\u0000\\u000d\\u009bX" in written


def test_control_characters_in_an_error_line_are_escaped(export):
    edit(export, "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", params=(ESCAPES,))
    line = error_line(["analyze", str(export), "--step", "nope"], export)
    assert "\x1b" not in line and "\\u001b[2J" in line


# --- the bundle's report.md -----------------------------------------------------------------


def secret_arguments(path: Path) -> Path:
    return edit(
        path,
        "UPDATE META_DATA_CAPTURE SET value = '--token=SECRET123' "
        "WHERE name = 'PROCESS_0:ARGUMENT_2'",
    )


def test_the_bundle_leaves_the_programs_arguments_out(export, tmp_path):
    secret_arguments(export)
    ok(["report", export, "-o", tmp_path / "b"])
    text = (tmp_path / "b" / "report.md").read_text()
    assert "SECRET123" not in text and "ARGUMENT\\_" not in text
    assert "`--include-command` keeps them" in text
    assert "PROCESS\\_0:COMMAND" in text  # the program's name stays


def test_the_bundle_keeps_the_arguments_when_asked(export, tmp_path):
    secret_arguments(export)
    ok(["report", export, "-o", tmp_path / "b", "--include-command"])
    assert "SECRET123" in (tmp_path / "b" / "report.md").read_text()


# --- .nsys-rep conversion -------------------------------------------------------------------


def fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """An `nsys` on PATH running this Python body (`out` is its -o path); return its log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / "runs.txt"
    script = bin_dir / "nsys"
    script.write_text(
        f"#!{sys.executable}\nimport shutil, sys, time\n"
        f"open({str(log)!r}, 'a').write('run\\n')\n"
        "out = sys.argv[sys.argv.index('-o') + 1]\n" + body
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_an_interrupted_conversion_leaves_no_partial_export(tmp_path, monkeypatch):
    # nsys writes half an export, then dies.
    fake_nsys(
        tmp_path,
        monkeypatch,
        f"open(out, 'wb').write(open({str(SAMPLE)!r}, 'rb').read()[:100000])\nsys.exit(1)\n",
    )
    report = fake_report(tmp_path)
    line = error_line(["analyze", str(report)], report)
    assert "`nsys export` failed (exit 1" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep"]


def test_a_partial_export_left_by_a_killed_run_is_removed_by_the_next(tmp_path, monkeypatch):
    # SIGKILL during the conversion: no clean-up ran, the partial export stayed beside the
    # report. Its name holds the pid of the run that wrote it, which no longer runs.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(dead.stdout)
    fake_nsys(tmp_path, monkeypatch, f"open(out, 'wb').write(open({str(SAMPLE)!r}, 'rb').read())\n")
    report = fake_report(tmp_path)
    stale = [tmp_path / f".run.partial-{pid}-0123abcd.sqlite{side}" for side in ("", "-wal")]
    alive = tmp_path / f".run.partial-{os.getpid()}-0123abcd.sqlite"  # a run still converting
    for path in (*stale, alive):
        path.write_bytes(b"half")
    ok(["analyze", str(report), "-q"])
    assert not any(path.exists() for path in stale)
    assert alive.exists()


def test_an_older_export_beside_the_report_is_exported_once_to_one_folder(tmp_path, monkeypatch):
    log = fake_nsys(tmp_path, monkeypatch, f"shutil.copy({str(SAMPLE)!r}, out)\n")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    stale = tmp_path / "run.sqlite"
    stale.write_bytes(b"old")
    os.utime(stale, (1_000, 1_000))
    report = fake_report(tmp_path)
    first = ok(["info", str(report)]).stderr
    second = ok(["info", str(report)]).stderr
    written = Path(first.split("exported it with nsys to ")[1].strip())
    assert second.strip().endswith(f"reusing its export {written}")
    assert log.read_text() == "run\n"
    assert stale.read_bytes() == b"old"
    assert sorted(p.name for p in written.parent.iterdir()) == ["run.sqlite"]


def test_a_hung_nsys_is_stopped_and_reported(tmp_path, monkeypatch):
    fake_nsys(tmp_path, monkeypatch, "time.sleep(600)\n")
    monkeypatch.setenv("TRACE_GAPS_NSYS_TIMEOUT_S", "1")
    report = fake_report(tmp_path)
    started = time.monotonic()
    line = error_line(["analyze", str(report)], report)
    assert time.monotonic() - started < 30
    assert "`nsys export` did not finish in 1 s (stopped; set TRACE_GAPS_NSYS_TIMEOUT_S" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep"]


def test_control_characters_are_escaped_in_an_output_file_and_its_path(export, tmp_path):
    edit(export, "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", params=(ESCAPES,))
    output = tmp_path / "out\x1b[2J.md"
    result = ok(["analyze", export, "-f", "md", "-o", output])
    assert result.stderr == f"wrote {tmp_path}/out\\u001b[2J.md\n"
    written = output.read_text()
    assert "\x1b" not in written and "fw\\u001b" in written


# --- a Dask scheduler that is not one (issue 28) --------------------------------------------


@pytest.fixture
def two_exports(export: Path) -> list[Path]:
    # Two different captures: one export given twice is refused before any scheduler is tried.
    other = SAMPLE.with_name("spec_sync.sqlite")
    return [export, Path(shutil.copy(other, export.with_name("s.sqlite")))]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never sends a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for connection in accepted:
        connection.close()


def another_session(path: Path) -> Path:
    """The copy of an export made a capture of its own (another session start, a row more):
    one export given twice is refused before anything else is tried."""
    return edit(
        path,
        "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 1000000000",
        "INSERT INTO StringIds (id, value) VALUES (999999991, 'another capture')",
    )


def scheduler_error(args: list[object]) -> str:
    result = invoke([str(a) for a in args])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_scheduler_that_accepts_but_stays_silent_is_an_error_within_the_deadline(
    two_exports, silent_server, monkeypatch
):
    pytest.importorskip("dask.distributed")
    monkeypatch.setattr("trace_gaps.run.cluster.SCHEDULER_TIMEOUT_S", 1.0)
    started = time.monotonic()
    line = scheduler_error(["analyze", *two_exports, "--scheduler", silent_server])
    assert time.monotonic() - started < 10
    assert f"the Dask scheduler at {silent_server} did not answer within 1 s" in line


@pytest.mark.parametrize(
    ("address", "shown"),
    [("", "''"), ("garbage", "garbage"), ("http://127.0.0.1:1", "http://127.0.0.1:1")],
)
def test_a_scheduler_address_dask_cannot_parse_is_a_one_line_error(address, shown, two_exports):
    pytest.importorskip("dask.distributed")
    line = scheduler_error(["analyze", *two_exports, "--scheduler", address])
    assert line.startswith(f"error: --scheduler {shown} is not a Dask scheduler address (")


def test_a_server_answering_other_bytes_is_not_taken_for_a_scheduler(two_exports):
    pytest.importorskip("dask.distributed")
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            connection = listener.accept()[0]
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(range(256)) * 4)
            time.sleep(5)
            connection.close()

    threading.Thread(target=answer, daemon=True).start()
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    try:
        line = scheduler_error(["analyze", *two_exports, "--scheduler", address])
    finally:
        listener.close()
    assert f"the server at {address} does not answer as a Dask scheduler" in line


# --- outputs onto an input's side files, through symlinks (issue 28) ------------------------


@pytest.mark.parametrize(
    ("command", "suffix"),
    pairwise([["analyze"], ["analyze", "-f", "json"], ["diff"]], ["-journal", "-wal", "-shm"]),
)
def test_an_output_onto_the_side_file_of_a_symlinked_inputs_target_is_refused(
    command, suffix, export, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "rel.sqlite"
    link.symlink_to(export)
    side = export.with_name(export.name + suffix)
    inputs = [link, link] if command == ["diff"] else [link]
    result = invoke([*command[:1], *map(str, inputs), *command[1:], "-o", str(side)])
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"error: {side}: is the input {link}; writing there would destroy it. "
        "Choose another -o path.\n"
    )
    assert not side.exists()
    ok(["analyze", export])  # the export still opens: no hot journal beside it


@pytest.mark.parametrize("side", ["before", "after"])
def test_a_symlink_loop_given_to_diff_is_named_as_one(side, export, tmp_path):
    loop = tmp_path / "loop.sqlite"
    loop.symlink_to(loop)
    args = [loop, export] if side == "before" else [export, loop]
    line = error_line(["diff", *map(str, args)], loop)
    assert line.endswith(
        "is a symbolic link that leads back to itself (a loop); point it at "
        "the .sqlite file that `nsys export --type sqlite` wrote"
    )


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["analyze"], "out.md"),
        (["diff", "{export}"], "out.md"),
        (["plot", "steps"], "out.png"),
        (["plot", "timeline"], "out.png"),
        (["report"], "bundle"),
    ],
)
def test_an_output_that_is_a_symlink_loop_is_a_one_line_error(command, name, export, tmp_path):
    output = tmp_path / name
    other = tmp_path / ("other" + output.suffix)
    output.symlink_to(other)
    other.symlink_to(output)
    args = [part.format(export=export) for part in command]
    result = invoke([*args, str(export), "-o", str(output)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot write "), result.stderr
    assert output.is_symlink() and other.is_symlink()  # neither link replaced


def test_pending_writes_beside_a_symlinked_inputs_target_are_named(export, tmp_path):
    link = tmp_path / "links" / "rel.sqlite"
    link.parent.mkdir()
    link.symlink_to(export)
    export.with_name("r.sqlite-journal").write_bytes(
        b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(100)
    )
    line = error_line(["analyze", str(link)], link)
    assert f"has a hot journal beside it ({export}-journal) with changes not yet in" in line


# --- nsys stopped with trace-gaps, and no bad export kept (issue 28) ------------------------

# A fake nsys that starts a helper of its own, records both pids, writes its export slowly.
SLOW_NSYS = """
import os, subprocess
helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
open(out + '.pids', 'w').write(f'{os.getpid()} {helper.pid}')
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


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_nsys_is_stopped_with_trace_gaps_and_leaves_no_partial_export(sent, tmp_path, monkeypatch):
    fake_nsys(tmp_path, monkeypatch, SLOW_NSYS)
    report = fake_report(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "trace_gaps", "analyze", str(report)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".run.partial-*.pids")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (pids_file,) = tmp_path.glob(".run.partial-*.pids")
    time.sleep(0.3)
    pids = [int(p) for p in pids_file.read_text().split()]
    pids_file.unlink()
    child.send_signal(sent)
    _, stderr = child.communicate(timeout=60)
    assert b"Traceback" not in stderr, stderr.decode()
    assert child.returncode == 128 + sent, stderr.decode()
    time.sleep(0.5)
    assert not [pid for pid in pids if is_running(pid)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep"]


def test_an_export_nsys_cut_short_is_neither_kept_nor_reused(tmp_path, monkeypatch):
    # nsys says it succeeded but wrote half an export.
    log = fake_nsys(
        tmp_path,
        monkeypatch,
        f"open(out, 'wb').write(open({str(SAMPLE)!r}, 'rb').read()[:100000])\n",
    )
    report = fake_report(tmp_path)
    for _ in range(2):
        line = error_line(["analyze", str(report)], report)
        assert "`nsys export` wrote a damaged or truncated export" in line
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep"]
    assert log.read_text() == "run\nrun\n"


def test_a_cut_export_beside_the_report_is_not_reused(tmp_path, monkeypatch):
    fake_nsys(tmp_path, monkeypatch, f"shutil.copy({str(SAMPLE)!r}, out)\n")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    report = fake_report(tmp_path)
    cut = tmp_path / "run.sqlite"  # an earlier export, interrupted: newer than the report
    cut.write_bytes(SAMPLE.read_bytes()[:100000])
    stderr = ok(["info", str(report)]).stderr
    assert "exported it with nsys to" in stderr and str(tmp_path / "tmp") in stderr
    assert cut.read_bytes() == SAMPLE.read_bytes()[:100000]  # never overwritten


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-5", "0"])
def test_a_bad_nsys_timeout_is_a_one_line_error(value, tmp_path, monkeypatch):
    fake_nsys(tmp_path, monkeypatch, f"shutil.copy({str(SAMPLE)!r}, out)\n")
    monkeypatch.setenv("TRACE_GAPS_NSYS_TIMEOUT_S", value)
    report = fake_report(tmp_path)
    result = invoke(["analyze", str(report)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: TRACE_GAPS_NSYS_TIMEOUT_S={value!r} is not a number of seconds; set it to a "
        "positive number (the default is 1800), or unset it.\n"
    )


# --- damaged rows beyond a small share: figures flagged in every format (issue 28) ----------

DAMAGES = {
    "zeroed starts": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0 WHERE rowid % 10 = 0",
    "unknown call names": "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 99999999 "
    "WHERE rowid % 2 = 0",
    "empty StringIds": "DELETE FROM StringIds",
}
FLAGS = {
    "zeroed starts": ("gpu_time", "gpu_ops", "impossible_times", 661, 6632),
    "unknown call names": ("launches", "api_calls", "unresolved_names", 7463, 14927),
    "empty StringIds": ("launches", "api_calls", "unresolved_names", 14927, 14927),
}


@pytest.mark.parametrize(("reader", "damage"), through_both_readers(list(DAMAGES)))
def test_damaged_rows_beyond_a_small_share_flag_the_figures_they_feed(
    damage, reader, export, monkeypatch
):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    assert shipped_json(SAMPLE)["unreliable"] == []
    edit(export, DAMAGES[damage])
    figures, table, problem, rows, of_rows = FLAGS[damage]
    assert json_report(export)["unreliable"] == [
        {"figures": figures, "table": table, "problem": problem, "rows": rows, "of_rows": of_rows}
    ]
    shown = f"{100 * rows / of_rows:.1f} % of"
    for fmt in ("text", "md"):
        output = ok(["analyze", export, "-f", fmt]).stdout
        assert "Unreliable: " in output
        assert shown in output
    header, *rows_csv = ok(["analyze", export, "-f", "csv"]).stdout.splitlines()
    assert header.endswith(",unreliable") and any(r.endswith(",1") for r in rows_csv)


def test_unknown_call_names_are_counted_in_a_note(export):
    edit(export, DAMAGES["unknown call names"])
    assert note_facts(export)[NoteCode.UNRESOLVED_CALL_NAMES].numbers == {
        "calls": 7463,
        "call_rows": 14927,
    }


def test_a_sound_exports_csv_has_no_unreliable_column():
    assert ok(["analyze", SAMPLE, "-f", "csv"]).stdout.startswith(csv_header() + "\n")


def test_report_exits_1_naming_an_export_that_failed_and_reports_the_others(export, tmp_path):
    bad = edit(
        another_session(Path(shutil.copy(export, tmp_path / "bad.sqlite"))),
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    )
    result = invoke(["report", str(export), str(bad), "-o", str(tmp_path / "b"), "-q"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {bad}: not analysed: ")
    assert "bad.sqlite: not analysed" in (tmp_path / "b" / "report.md").read_text()


# --- stderr closed or full (issue 28) -------------------------------------------------------


@pytest.mark.parametrize(("to_file", "stderr"), pairwise([True, False], ["2>&-", "2>/dev/full"]))
def test_a_closed_or_full_stderr_does_not_fail_the_command(stderr, to_file, export, tmp_path):
    if stderr.endswith("full") and not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    output = tmp_path / "out.md"
    args = [sys.executable, "-m", "trace_gaps", "analyze", str(export)]
    args += ["-o", str(output)] if to_file else []
    done = subprocess.run(
        f"{shlex.join(args)} {stderr}", shell=True, stdout=subprocess.PIPE, check=False
    )
    assert done.returncode == 0
    written = output.read_bytes() if to_file else done.stdout
    assert written.startswith(b"Export: r.sqlite")


@pytest.mark.parametrize("stderr", ["2>&-", "2>/dev/full"])
def test_an_error_with_a_closed_or_full_stderr_still_exits_1(stderr, tmp_path):
    if stderr.endswith("full") and not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    args = [sys.executable, "-m", "trace_gaps", "analyze", str(tmp_path / "missing.sqlite")]
    done = subprocess.run(f"{shlex.join(args)} {stderr}", shell=True, check=False)
    assert done.returncode == 1


@pytest.mark.parametrize("command", [["plot", "steps"], ["plot", "timeline"]])
def test_a_step_named_with_a_megabyte_is_drawn_with_its_name_cut(command, export, tmp_path):
    edit(
        export,
        "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'decode_step'",
        params=("d" * 1_000_000,),
    )
    started = time.monotonic()
    ok([*command, export, "-o", tmp_path / "p.png", "-q"])
    assert time.monotonic() - started < 120


def no_step_and_no_possible_op(path: Path) -> Path:
    return edit(
        path,
        "DELETE FROM NVTX_EVENTS",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -5",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = -5",
    )


@pytest.mark.parametrize("jobs", [[], ["--jobs", "2"]])
def test_an_export_whose_ops_all_have_impossible_times_is_reported_beside_a_good_one(
    jobs, export, tmp_path
):
    if jobs:
        pytest.importorskip("dask.distributed")
    bad = no_step_and_no_possible_op(
        another_session(Path(shutil.copy(export, tmp_path / "bad.sqlite")))
    )
    assert json_report(bad)["notes"][-1]["code"] == NoteCode.IMPOSSIBLE_OP_TIMES
    assert note_facts(bad)[NoteCode.IMPOSSIBLE_OP_TIMES].numbers == {"ops": 6632, "op_rows": 6632}
    report = json.loads(ok(["analyze", export, bad, "-f", "json", *jobs]).stdout)
    assert report["unreliable"][0]["figures"] == "gpu_time"


def test_a_diff_against_an_export_whose_ops_all_have_impossible_times_is_one_line(export, tmp_path):
    bad = no_step_and_no_possible_op(Path(shutil.copy(export, tmp_path / "bad.sqlite")))
    result = invoke(["diff", str(bad), str(export)])
    assert result.exit_code == 1
    assert result.stderr == "error: bad.sqlite (before) has no process with steps to compare.\n"


@pytest.mark.parametrize("option", ["--from", "--to"])
@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_a_zoom_past_any_time_is_a_usage_error_or_an_empty_window(option, value, export, tmp_path):
    result = invoke(["plot", "timeline", str(export), option, value, "-o", str(tmp_path / "t.png")])
    assert result.exit_code in ((0, 1) if value == "1e300" else (2,)), result.output


# --- --jobs capped at the cores (issue 28) --------------------------------------------------


@pytest.mark.parametrize("several", [False, True])
def test_jobs_beyond_the_cores_are_capped_and_said(several, export, tmp_path, monkeypatch):
    if several:
        pytest.importorskip("dask.distributed")
    monkeypatch.setattr("trace_gaps.parallel.usable_cores", lambda: 2)
    exports = (
        [export, another_session(Path(shutil.copy(export, tmp_path / "s.sqlite")))]
        if several
        else [export]
    )
    result = ok(["analyze", *exports, "--jobs", "64", "-f", "json"])
    assert result.stderr == "note: --jobs 64 capped at 2, the cores this machine gives trace-gaps\n"
    quiet = ok(["analyze", *exports, "--jobs", "64", "-f", "json", "-q"])
    assert quiet.stderr == "" and quiet.stdout == result.stdout


# --- privacy: a keep-list of capture settings (issue 28) ------------------------------------


def private_settings(path: Path) -> Path:
    return edit(
        path,
        "UPDATE META_DATA_CAPTURE SET value = 'secret-host' WHERE name = 'DEVICE_DISPLAY_NAME'",
        "UPDATE META_DATA_CAPTURE SET value = '/home/alice/venv/bin/python3' "
        "WHERE name = 'PROCESS_0:COMMAND'",
        "UPDATE META_DATA_CAPTURE SET value = '--token=SECRET123' WHERE name = 'PROCESS_0:ARGUMENT_2'",
        "INSERT INTO META_DATA_CAPTURE (name, value) "
        "VALUES ('PROCESS_0:WORKING_DIR', '/home/alice/private-project')",
        "INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('SOME_NEW_SETTING', 'alice-laptop')",
    )


PRIVATE = ("secret-host", "alice", "SECRET123", "private-project")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_info_leaves_the_host_folder_and_arguments_out_unless_asked(fmt, export):
    private_settings(export)
    shown = ok(["info", export, "-f", fmt]).stdout
    assert not [word for word in PRIVATE if word in shown]
    assert "python3" in shown  # the program's name, without its folder
    kept = ok(["info", export, "-f", fmt, "--include-command"]).stdout
    assert all(word in kept for word in PRIVATE[:3])
    if fmt == "json":  # text lists the first settings only
        assert "private-project" in kept
    assert "alice-laptop" not in kept  # a setting nobody listed never appears


def test_the_bundle_leaves_the_host_folder_and_program_path_out(export, tmp_path):
    private_settings(export)
    ok(["report", export, "-o", tmp_path / "b", "-q"])
    for name in ("report.md", "report.json"):
        text = (tmp_path / "b" / name).read_text()
        assert not [word for word in PRIVATE if word in text], name


# --- side files and children after a signal (issue 28, item 7) ------------------------------


def start_cli(args: list[object]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "trace_gaps", *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(found: object, timeout_s: float = 120) -> object:
    """found() polled every 10 ms until it is truthy (its value) or the time is up (falsy)."""
    deadline = time.monotonic() + timeout_s
    while not (value := found()) and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)
    return value


def stopped(child: subprocess.Popen[bytes], sent: signal.Signals) -> None:
    """Send the signal; the command ends with its exit code, without a traceback."""
    child.send_signal(sent)
    _, stderr = child.communicate(timeout=60)
    assert b"Traceback" not in stderr, stderr.decode()
    assert child.returncode == (130 if sent == signal.SIGINT else 128 + sent), stderr.decode()


def child_pids(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if int(stat.read_text().rsplit(") ", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def folder_state(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under the folder, hidden ones too, with its inode, size and mtime."""
    state = {}
    for path in folder.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # renamed meanwhile
            found = path.stat()
            state[str(path.relative_to(folder))] = (found.st_ino, found.st_size, found.st_mtime_ns)
    return state


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_a_picture_is_written_leaves_no_temporary_file(sent, export, tmp_path):
    # The PNG is written in a few ms: a signal sent once its temporary file is seen may land
    # after the rename. Then the picture is whole and the exit 0; the signal is sent again
    # (at most 5 runs) until one lands while the file is written.
    for _ in range(5):
        child = start_cli(["plot", "timeline", export, "-o", tmp_path / "t.png"])
        assert wait_for(lambda: list(tmp_path.glob(".t.png.*.tmp"))), "never wrote"
        child.send_signal(sent)
        _, stderr = child.communicate(timeout=60)
        assert b"Traceback" not in stderr, stderr.decode()
        if child.returncode == 0:  # written whole before the signal came
            assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite", "t.png"]
            (tmp_path / "t.png").unlink()
            continue
        assert child.returncode == (130 if sent == signal.SIGINT else 128 + sent), stderr.decode()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]
        return
    pytest.fail("every signal came after the picture was written")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc")
@pytest.mark.skipif(usable_cores() < 2, reason="the pictures are drawn in this process")
@pytest.mark.parametrize("waiting", [False, True])  # for the pictures, its texts written
def test_a_report_stopped_by_sigterm_leaves_no_picture_process_nor_folder(
    waiting, export, tmp_path
):
    out = tmp_path / "bundle"
    child = start_cli(["report", export, "-o", out])
    if waiting:
        assert wait_for(lambda: list(out.glob(".trace-gaps-*.tmp/report.md"))), "never wrote"
    drawing = wait_for(lambda: child_pids(child.pid))
    assert drawing, "never forked"
    stopped(child, signal.SIGTERM)
    assert wait_for(lambda: not [pid for pid in drawing if is_running(pid)], timeout_s=10)
    time.sleep(3)  # a picture child left running wrote its files ~2 s later
    assert not out.exists()


def test_a_report_interrupted_over_an_earlier_bundle_leaves_that_bundle_whole(export, tmp_path):
    out = tmp_path / "bundle"
    ok(["report", export, "-o", out, "-q"])
    before = folder_state(out)
    child = start_cli(["report", export, "-o", out, "--force"])
    assert wait_for(lambda: folder_state(out) != before), "never wrote"
    stopped(child, signal.SIGINT)
    assert folder_state(out) == before


# --- names at the file system's limit (issue 28, item 10) -----------------------------------

LONGEST = 255  # bytes in a file name (ext4, xfs, tmpfs, APFS)


@pytest.mark.parametrize("letter", ["a", "é"])  # one byte, two bytes in UTF-8
def test_an_output_named_at_the_limit_is_written(letter, export, tmp_path):
    name = letter * ((LONGEST - 3) // len(letter.encode())) + ".md"
    ok(["analyze", export, "-o", tmp_path / name, "-q"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "r.sqlite"])


def test_a_report_named_at_the_limit_is_exported(tmp_path, monkeypatch):
    fake_nsys(tmp_path, monkeypatch, f"shutil.copy({str(SAMPLE)!r}, out)\n")
    report = fake_report(tmp_path, "a" * (LONGEST - len(".nsys-rep")) + ".nsys-rep")
    assert "exported it with nsys to" in ok(["info", report]).stderr
    assert report.with_suffix(".sqlite").is_file()


# --- kernel names not in StringIds (issue 28) -----------------------------------------------


@pytest.mark.parametrize("reader", ["arrow", "sqlite3"])
def test_kernels_whose_names_are_not_in_the_string_table_are_counted_in_a_note(
    reader, export, monkeypatch
):
    if reader == "sqlite3":
        monkeypatch.setenv("TRACE_GAPS_NO_ARROW", "1")
    edit(
        export,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 99999999, demangledName = 99999999 "
        "WHERE rowid % 3 = 0",
    )
    report = json_report(export)
    assert any(
        k["name"] == "?" for k in report["processes"][0]["candidates"][0]["evidence"]["top_kernels"]
    )
    assert NoteCode.UNRESOLVED_KERNEL_NAMES in [n["code"] for n in report["notes"]]
    numbers = note_facts(export)[NoteCode.UNRESOLVED_KERNEL_NAMES].numbers
    assert numbers == {"kernels": 2204, "op_rows": 6632}  # of every GPU op row
    assert report["processes"][0]["steps"] == shipped_json(SAMPLE)["processes"][0]["steps"]


def test_held_signals_wait_while_another_thread_runs() -> None:
    """The kernel hands a process's signal to a thread that does not block it, and Python
    then runs the handler in the main thread at once: held signals must wait all the same."""
    from trace_gaps.interrupts import signals_held

    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _: got.append(signum))
    done = threading.Event()
    other = threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(done.is_set, True)])
    other.start()
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:  # bytecodes, where a handler would run
                pass
            assert got == []
        assert got == [signal.SIGTERM]  # on the way out
    finally:
        done.set()
        other.join()
        signal.signal(signal.SIGTERM, previous)


# --- patterns that backtrack without end (issue 45) -----------------------------------------


@pytest.mark.parametrize(
    ("pattern", "trouble"),
    [
        ("(.*a){25}", "has a repeat inside a repeat"),  # 117 s on the sample before
        (".*e.*e.*e.*e.*Q", "has 5 unbounded repeats"),  # 516 s on the sample's names
        pytest.param("x" * 201, "has 201 characters", id="201-characters"),
    ],
)
def test_a_collective_pattern_that_could_backtrack_for_hours_is_refused(pattern, trouble, tmp_path):
    # The export need not exist: the pattern is refused before any work.
    result = invoke(["analyze", str(tmp_path / "r.sqlite"), "--collective", pattern])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.replace("│", " ").split())
    assert trouble in said and "give a simpler pattern" in said


@pytest.mark.parametrize("pattern", ["nccl.*AllReduce", "ncclDevKernel_.*_Sum_.*", "(ab){2}c"])
def test_a_plain_collective_pattern_is_taken(pattern, export):
    ok(["analyze", str(export), "-q", "--collective", pattern])


# --- a name longer than any CUDA API's (issue 45) -------------------------------------------


def test_a_megabyte_cuda_api_name_is_cut_when_read(export):
    # Each search of the calls' names went through the whole name: analyze took 44 s, not 2.4 s.
    from trace_gaps.nsys import queries
    from trace_gaps.nsys.export import open_export
    from trace_gaps.nsys.names import CALL_NAME_CHARACTERS, Names

    edit(
        export,
        "UPDATE StringIds SET value = ? WHERE value = 'cuKernelGetName'",
        params=("x" * 1_000_000,),
    )
    with open_export(export) as connection:
        names = Names(connection, export, (queries.RUNTIME_TABLE,)).call_names()
    assert max(names.map(len)) == CALL_NAME_CHARACTERS
    assert "x" * (CALL_NAME_CHARACTERS - 1) + "…" in set(names)
    assert "cudaLaunchKernel" in set(names)  # the version suffix still dropped
    ok(["analyze", str(export), "-q"])
