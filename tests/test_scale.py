"""Speed work must not change a single output byte: the JSON report of real traces is pinned.

The golden files in tests/golden/scale/ are gzipped JSON reports of the peer traces (and of
one of them inflated 3x by benchmarks/inflate.py). When an output change is intended,
regenerate them with `pytest tests/test_scale.py --update-golden` and review the diff.
"""

from __future__ import annotations

import difflib
import gzip
import importlib.util
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.builders import projected_frames
from tests.conftest import (
    REPRESENTATIVE_PEERS,
    ROOT,
    SAMPLE_TRACES,
    assert_matches_schema,
    peer_trace_paths,
    shipped_report,
    sweep,
)
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.errors import NotAnExportError
from trace_gaps.nsys import read
from trace_gaps.nsys.load import load_trace
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report

GOLDEN = Path(__file__).parent / "golden" / "scale"
# Two peer captures by default; every one in the thorough run.
PEERS = sweep(peer_trace_paths(), REPRESENTATIVE_PEERS)


def _report_json(path: Path) -> str:
    trace = load_trace(path)
    return render_json(build_report(trace, analyse_trace(trace, AnalysisOptions())))


def _check(name: str, text: str, update_golden: bool) -> None:
    golden = GOLDEN / f"{name}.json.gz"
    if update_golden:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(gzip.compress(text.encode(), mtime=0))
        return
    if not golden.exists():
        pytest.fail(f"no golden file {golden.name}: write it with --update-golden and review it")
    expected = gzip.decompress(golden.read_bytes()).decode()
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), text.splitlines(), "golden", "now", lineterm="", n=2
        )
        pytest.fail("report JSON changed:\n" + "\n".join(list(diff)[:60]))


@pytest.mark.parametrize("path", PEERS, ids=lambda p: p.name)
def test_report_json_of_peer_traces_is_unchanged(path: Path, update_golden: bool) -> None:
    text = render_json(shipped_report(path))
    assert_matches_schema(text)
    _check(path.stem, text, update_golden)


MFU = [p for p in peer_trace_paths() if p.name == "mfu_2gpu_before.sqlite"]


@pytest.mark.skipif(not MFU, reason="peer trace mfu_2gpu_before.sqlite not present")
def test_report_json_of_an_inflated_trace_is_unchanged(tmp_path: Path, update_golden: bool) -> None:
    spec = importlib.util.spec_from_file_location("inflate", ROOT / "benchmarks" / "inflate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    big = tmp_path / "mfu_2gpu_before_x3.sqlite"
    module.inflate(MFU[0], big, 3)
    _check("mfu_2gpu_before_x3", _report_json(big), update_golden)


# The Arrow reader's own tests: run where the `fast` extra is installed, whatever the env.
needs_arrow = pytest.mark.skipif(
    not read.arrow_driver_present(),
    reason="the `fast` extra (adbc-driver-sqlite, pyarrow) is absent",
)


TRACE_FRAMES = ("gpu_ops", "api_calls", "nvtx_ranges", "threads", "overhead")


@needs_arrow
@pytest.mark.parametrize("path", PEERS, ids=lambda p: p.name)
def test_the_arrow_reader_loads_the_same_trace_as_sqlite3(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trace_gaps.nsys import read

    monkeypatch.delenv(read.ARROW_READER_ENV, raising=False)  # this test is about Arrow
    calls: list[str] = []
    arrow_frames = read._arrow_frames
    monkeypatch.setattr(
        read,
        "_arrow_frames",
        lambda p, sql, params: calls.append(sql) or arrow_frames(p, sql, params),
    )
    fast = load_trace(path)
    assert calls, "the Arrow reader was not asked"
    monkeypatch.setenv(read.ARROW_READER_ENV, "1")
    plain = load_trace(path)
    for name in TRACE_FRAMES:
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(plain, name), obj=name)
    assert fast.info == plain.info


def test_the_sqlite3_reader_is_used_when_arrow_is_switched_off(
    export_builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trace_gaps.nsys import read

    # Two launches, each a call and its kernel: the frames come out the same either way.
    builder = export_builder()
    builder.launch("k1", 100, 200, 300, 400).launch("k2", 500, 600, 700, 900)
    builder.range("decode_step", 0, 1_000)
    path = builder.write()
    monkeypatch.setenv(read.ARROW_READER_ENV, "1")
    assert not read.arrow_installed()
    monkeypatch.setattr(
        read, "_arrow_frames", lambda p, sql, params: pytest.fail("Arrow was asked")
    )
    trace = load_trace(path)
    assert list(trace.gpu_ops["start_ns"]) == [300, 700]
    assert list(trace.nvtx_ranges["name"]) == ["decode_step"]


def _copy_of_sample(tmp_path: Path, *statements: str) -> Path:
    path = tmp_path / "r.sqlite"
    path.write_bytes((SAMPLE_TRACES / "plain_decode.sqlite").read_bytes())
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()
    return path


def _arrow_frames_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch the Arrow reader to count the frames it hands over, per query."""
    from trace_gaps.nsys import read

    counts: list[int] = []
    arrow_frames = read._arrow_frames

    def counted(path: Path, sql: str, params: tuple[int, ...]) -> Iterator[pd.DataFrame]:
        counts.append(0)
        for frame in arrow_frames(path, sql, params):
            counts[-1] += 1
            yield frame

    monkeypatch.setattr(read, "_arrow_frames", counted)
    return counts


NVTX_INTS = {"start_ns": "int64", "end_ns": "int64", "global_tid": "int64"}
KERNEL_INTS = {"start_ns": "int64", "stream_id": "int64", "name_id": "int64"}


@needs_arrow
def test_sqlite3_reads_on_where_arrow_meets_invalid_utf8_in_a_later_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trace_gaps.nsys import queries, read

    monkeypatch.delenv(read.ARROW_READER_ENV, raising=False)  # this test is about Arrow
    path = _copy_of_sample(
        tmp_path,
        "UPDATE NVTX_EVENTS SET text = X'666FFF72' WHERE rowid = "
        "(SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL ORDER BY rowid LIMIT 1 OFFSET 30)",
    )
    monkeypatch.setattr(read, "CHUNK_ROWS", 4)
    counts = _arrow_frames_counted(monkeypatch)
    fast = read.read_frame(path, queries.NVTX_RANGES, NVTX_INTS)
    assert counts[0] > 0, "Arrow read no chunk before the bad text"
    monkeypatch.setenv(read.ARROW_READER_ENV, "1")
    plain = read.read_frame(path, queries.NVTX_RANGES, NVTX_INTS)
    assert len(counts) == 1, "Arrow was asked with TRACE_GAPS_NO_ARROW set"
    assert counts[0] * 4 < len(plain), "Arrow read past the bad text"
    pd.testing.assert_frame_equal(fast, plain)


@needs_arrow
def test_a_null_in_a_later_chunk_is_named_the_same_by_either_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trace_gaps.nsys import queries, read

    monkeypatch.delenv(read.ARROW_READER_ENV, raising=False)  # this test is about Arrow
    path = _copy_of_sample(
        tmp_path,
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO Original",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM Original",  # no NOT NULL
        "DROP TABLE Original",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = NULL WHERE rowid IN (9, 10)",
    )
    monkeypatch.setattr(read, "CHUNK_ROWS", 4)
    counts = _arrow_frames_counted(monkeypatch)
    with pytest.raises(NotAnExportError) as fast:
        read.read_frame(path, queries.KERNELS, KERNEL_INTS)
    assert counts == [2], "Arrow did not read the two chunks before the NULL"
    monkeypatch.setenv(read.ARROW_READER_ENV, "1")
    with pytest.raises(NotAnExportError) as plain:
        read.read_frame(path, queries.KERNELS, KERNEL_INTS)
    assert str(fast.value) == str(plain.value)
    assert str(fast.value).startswith(
        "has NULL in 2 rows of CUPTI_ACTIVITY_KIND_KERNEL.streamId, where nsys always writes"
    )


def _chunked_ledgers(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[pd.DataFrame]:
    from trace_gaps.analysis import ledger

    trace = load_trace(path)
    analysis = analyse_trace(trace, AnalysisOptions(skip=0))
    frames = []
    for chunk in (10**12, 7, 1):
        monkeypatch.setattr(ledger, "CHUNK_INTERVALS", chunk)
        staged, projected = projected_frames(trace, analysis)
        args = (projected, staged, analysis.steps, analysis.stage_map)
        frames.extend([*ledger.build_ledger(*args), ledger.find_idle_runs_by_cause(*args)])
    return frames


def test_cutting_a_thread_into_chunks_leaves_the_ledger_unchanged(export_builder, monkeypatch):
    #   thread  [decode_step][decode_step] ... 6 steps of 10_000 ns, each:
    #           [draft 0..4000][verify 4000..10000]   calls and kernels as in test_inflate
    #   a long sync crosses from step 2 into step 3, a kernel runs across a step boundary
    builder = export_builder()
    for o in range(0, 60_000, 10_000):
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
        builder.launch("k1", o + 100, o + 600, o + 1_000, o + 3_000)
        builder.launch("k2", o + 5_000, o + 5_400, o + 6_000, o + 9_000)
    builder.call("cudaDeviceSynchronize", 29_500, 31_000)
    builder.launch("long", 39_000, 39_200, 39_500, 41_500)
    frames = _chunked_ledgers(builder.write(), monkeypatch)
    # Per chunk size: ledger, gaps and idle runs of build_ledger, then find_idle_runs_by_cause.
    per_run = len(frames) // 3
    whole, parts = frames[:per_run], frames[per_run:]
    assert len(whole[0]) > 0
    pd.testing.assert_frame_equal(whole[2], whole[3])  # one pass or two, the same runs
    for i, frame in enumerate(parts):
        pd.testing.assert_frame_equal(whole[i % per_run], frame)


@pytest.mark.parametrize("path", PEERS, ids=lambda p: p.name)
def test_cutting_real_threads_into_chunks_leaves_the_ledger_unchanged(path: Path, monkeypatch):
    frames = _chunked_ledgers(path, monkeypatch)
    per_run = len(frames) // 3
    for i, frame in enumerate(frames[per_run:]):
        pd.testing.assert_frame_equal(frames[i % per_run], frame)


def test_progress_is_off_when_quiet_or_when_stderr_is_not_a_terminal(monkeypatch):
    import io
    import sys

    from trace_gaps import progress

    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    with progress.progress(quiet=False) as shown:
        shown("analysing", 1, 4)
        assert not shown.enabled and shown.bar is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with progress.progress(quiet=True) as shown:
        shown("analysing", 1, 4)
        assert not shown.enabled and shown.bar is None
    with progress.progress(quiet=False) as shown:
        assert shown.enabled and shown.bar is None  # nothing shown before there is work
        shown("reading")
        shown("analysing", 3, 7)  # the real total: windows, or exports
        task = shown.bar.tasks[0]
        assert (task.completed, task.total, task.description) == (3, 7, "analysing")
    assert not shown.enabled and not shown.bar.live.is_started
