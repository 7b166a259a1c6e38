"""Several exports of one run: clock alignment, cross-export waits, Dask, failures."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import PEER_TRACES, shipped_trace
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.run.alignment import align, read_side
from trace_gaps.run.multi import analyse_exports

runner = CliRunner()


def another_session(export: Path) -> Path:
    """Make the export another capture session's: its session start 1 ns later (two
    sessions never start at the same nanosecond; one session twice is refused)."""
    with sqlite3.connect(export) as connection:
        connection.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 1")
    return export


def split_process(source: Path, target: Path, pid: int, shift_ns: int) -> Path:
    """A copy of an export holding one process's rows, its clock shifted by shift_ns (as if
    its own nsys session had recorded it). Its session start moves by `pid` ns only: the split
    files are two sessions (one session twice is refused), whose clocks the collectives align."""
    shutil.copyfile(source, target)
    with sqlite3.connect(target) as connection:
        connection.execute(
            "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (pid,)
        )
        tables = [
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        for table in tables:
            columns = {r[1] for r in connection.execute(f"PRAGMA table_info({table})")}
            key = (
                "globalPid"
                if "globalPid" in columns
                else "globalTid"
                if "globalTid" in columns
                else None
            )
            if key:
                connection.execute(
                    f"DELETE FROM {table} WHERE (({key} >> 24) & 16777215) != ?", (pid,)
                )
            if {"start", "end"} <= columns:
                connection.execute(
                    f'UPDATE {table} SET start = start + ?, "end" = "end" + ? '
                    'WHERE NOT (start = 0 AND "end" = 0) AND "end" IS NOT NULL',
                    (shift_ns, shift_ns),
                )
    return target


SHIFT_NS = 123_456_789  # a known clock offset between the two "sessions"


@pytest.fixture(scope="module")
def split_tp_eager(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """tp_eager split into one export per rank, once for the module (no test changes them)."""
    source = shipped_trace("tp_eager")
    folder = tmp_path_factory.mktemp("split")
    return (
        split_process(source, folder / "rank0.sqlite", 2604, 0),
        split_process(source, folder / "rank1.sqlite", 2605, SHIFT_NS),
    )


def test_alignment_recovers_a_known_offset_from_collective_ends(split_tp_eager):
    alignment = align([read_side(path) for path in split_tp_eager])
    # rank 1's clock runs SHIFT_NS ahead: the correction that puts it on rank 0's is -SHIFT_NS.
    assert abs(alignment.offsets_ns[1] + SHIFT_NS) <= 1_000  # within 1 µs
    assert alignment.residual_p99_ns is not None and alignment.residual_p99_ns <= 1_000
    assert "collective ends" in alignment.method


def test_split_exports_give_the_single_export_waits(split_tp_eager):
    options = AnalysisOptions()
    split = analyse_exports(list(split_tp_eager), options).report
    source = shipped_trace("tp_eager")
    assert source is not None
    whole = analyse_exports([source], options).report
    assert split.ranks.pace_setter_pid == whole.ranks.pace_setter_pid == 2604
    by_pid = {r.pid: r for r in whole.ranks.processes}
    for rank in split.ranks.processes:
        # The same waits, to within the residual of the alignment per collective.
        assert abs(rank.wait_ns_per_step - by_pid[rank.pid].wait_ns_per_step) <= 16 * 1_000
        assert [w.pid for w in rank.waits_for] == [w.pid for w in by_pid[rank.pid].waits_for]


@pytest.mark.skipif(not PEER_TRACES.is_dir(), reason="../shared/peer_traces is absent")
def test_alignment_on_a_peer_two_gpu_export_split_per_process(tmp_path):
    source = PEER_TRACES / "nsys-ai" / "mfu_2gpu_before.sqlite"
    parts = [
        split_process(source, tmp_path / "a.sqlite", 144, 0),
        split_process(source, tmp_path / "b.sqlite", 145, -SHIFT_NS),
    ]
    alignment = align([read_side(path) for path in parts])
    # Only SendRecv pairs here, whose ends differ by 20-30 µs: recovered within 30 µs.
    assert abs(alignment.offsets_ns[1] - SHIFT_NS) <= 30_000


def test_the_real_per_rank_sessions_are_aligned_by_session_start_and_collectives():
    paths = [shipped_trace("tp_rank0"), shipped_trace("tp_rank1")]
    alignment = align([read_side(p) for p in paths])  # type: ignore[arg-type]
    assert alignment.method == "session start + collective ends"
    assert alignment.residual_p99_ns is not None and alignment.residual_p99_ns < 5_000
    report = analyse_exports(paths, AnalysisOptions()).report  # type: ignore[arg-type]
    assert {p.pid for p in report.processes} == {2947, 2950}
    assert report.ranks.unmatched_instances == 0
    assert all(r.waits_for for r in report.ranks.processes)


def test_dask_local_cluster_gives_the_serial_report(split_tp_eager):
    pytest.importorskip("dask.distributed")
    args = ["analyze", *map(str, split_tp_eager), "-f", "json", "--skip", "1"]
    serial = runner.invoke(app, args)
    parallel = runner.invoke(app, [*args, "--jobs", "2"])
    assert serial.exit_code == 0, serial.output
    assert parallel.exit_code == 0, parallel.output
    assert parallel.stdout == serial.stdout
    data = json.loads(serial.stdout)
    assert {p["pid"] for p in data["processes"]} == {2604, 2605}


def test_a_repeated_pid_is_labelled_with_its_file(tmp_path):
    source = shipped_trace("tp_rank0")
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copyfile(source, a)
    another_session(Path(shutil.copyfile(source, b)))  # another node's process of the same pid
    report = analyse_exports([a, b], AnalysisOptions()).report
    assert [p.label for p in report.processes] == ["a.sqlite:2947", "b.sqlite:2947"]


def test_a_failed_export_is_named_and_the_others_still_reported(split_tp_eager, tmp_path):
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database at all" * 100)
    result = runner.invoke(app, ["analyze", str(split_tp_eager[0]), str(broken), "-f", "json"])
    assert result.exit_code == 1
    assert "broken.sqlite" in result.stderr
    assert json.loads(result.stdout)["processes"][0]["pid"] == 2604


def test_a_quoted_glob_is_expanded(split_tp_eager):
    pattern = str(split_tp_eager[0].parent / "rank*.sqlite")
    result = runner.invoke(app, ["analyze", pattern, "-f", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["processes"]) == 2


def test_jobs_without_dask_names_the_extra(split_tp_eager, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    result = runner.invoke(app, ["analyze", *map(str, split_tp_eager), "--jobs", "2"])
    assert result.exit_code == 1
    assert "trace-gaps[dask]" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_report_and_diff_take_several_exports_of_one_run(split_tp_eager, tmp_path):
    pattern = str(split_tp_eager[0].parent / "rank*.sqlite")
    bundle = tmp_path / "bundle"
    result = runner.invoke(app, ["report", pattern, "-o", str(bundle)])
    assert result.exit_code == 0, result.output
    data = json.loads((bundle / "report.json").read_text())
    assert {p["pid"] for p in data["processes"]} == {2604, 2605}
    assert data["ranks"]["pace_setter_pid"] == 2604
    assert [e["file"] for e in data["other_exports"]] == ["rank1.sqlite"]
    source = shipped_trace("tp_eager")
    assert source is not None
    result = runner.invoke(app, ["diff", pattern, str(source), "-f", "json"])
    assert result.exit_code == 0, result.output
    # The same run split or whole: no change beyond noise in any process's step time.
    for process in json.loads(result.stdout)["processes"]:
        assert abs(process["wall"]["change_ns"]) < 100_000, process["wall"]
