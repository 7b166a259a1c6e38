"""Windowed analysis: streamed a window of steps at a time, it gives the whole-trace results.

Real exports (samples, peer traces) are analysed streamed from the file with windows of a
few steps and chunks of a few hundred rows, and the Report (JSON and timelines) must equal
the one of the whole trace loaded at once. Synthetic exports cover the cases the windows
must refuse (rows out of order, an op long after its launch) and those they must survive
(a kernel or a sync across many windows).
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import pytest

import trace_gaps.analysis.engine.streams as streams
import trace_gaps.nsys.read as read
import trace_gaps.nsys.read_ahead as read_ahead
import trace_gaps.parallel as parallel
from tests.builders import ExportBuilder
from tests.conftest import (
    REPRESENTATIVE_PEERS,
    ROOT,
    peer_trace_paths,
    sample_trace_paths,
    shipped_report,
    sweep,
)
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest
from trace_gaps.analysis.engine.pipeline import (
    Analysis,
    AnalysisOptions,
    analyse_rows,
    analyse_trace,
)
from trace_gaps.model import NeedsWholeTrace
from trace_gaps.nsys.load import load_trace
from trace_gaps.nsys.stream import stream_export
from trace_gaps.records.report import Report
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report
from trace_gaps.run.one import analyse_export, analyse_stream

VIEWS = (TimelineRequest(StepPick.MEDIAN), TimelineRequest(StepPick.WORST))


def whole_report(path: Path, options: AnalysisOptions) -> Report:
    trace = load_trace(path)
    return build_report(trace, analyse_trace(trace, options, timelines=VIEWS))


def whole_shipped_report(path: Path, options: AnalysisOptions) -> Report:
    """whole_report of a capture no test edits, shared with the other tests of the process."""
    return shipped_report(path, options, VIEWS)


def streamed(
    path: Path,
    options: AnalysisOptions,
    window_rows: int,
    monkeypatch: pytest.MonkeyPatch,
    chunk_rows: int = 300,
    jobs: int = 1,
    read_ahead: bool = True,
) -> tuple[Report, Analysis]:
    """The Report of the export streamed in small chunks and windows (no fallback), every kind
    of step analysed as analyse_export does."""
    monkeypatch.setattr(read, "CHUNK_ROWS", chunk_rows)
    with stream_export(path, read_ahead=read_ahead) as export:
        analysis = analyse_stream(
            export, options, timelines=VIEWS, window_rows=window_rows, jobs=jobs
        )
        return build_report(export.trace(), analysis), analysis


def assert_same(report: Report, expected: Report) -> None:
    assert render_json(report) == render_json(expected)
    assert report.timelines == expected.timelines


# One sample per capture kind in the quick run (eager, node-level and graph-level graphs,
# syncs, a tensor-parallel rank); every sample in the thorough run (TRACE_GAPS_THOROUGH=1).
QUICK_SAMPLES = {"plain_decode", "spec_graph_node", "spec_graph_graphmode", "spec_sync", "tp_rank0"}
SAMPLES = [
    p if p.stem in QUICK_SAMPLES else pytest.param(p, marks=pytest.mark.thorough)
    for p in sample_trace_paths()
    if p.name != "spec_two_ranks.sqlite"
]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: Path(str(p)).stem)
def test_streamed_sample_equals_the_whole_trace(path, monkeypatch):
    options = AnalysisOptions()
    # About one step per window: 2,000 rows for eager loops, fewer where graphs replay.
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        kernels = connection.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[
            0
        ]
    window_rows = 2_000 if kernels > 10_000 else 200
    report, analysis = streamed(path, options, window_rows=window_rows, monkeypatch=monkeypatch)
    assert analysis.windows >= 8  # about one step per window
    assert_same(report, whole_shipped_report(path, options))


def test_streamed_without_read_ahead_threads_equals_the_whole_trace(monkeypatch):
    path = ROOT / "sample_traces" / "spec_sync.sqlite"
    if not path.exists():
        pytest.skip("sample trace not present")

    def no_thread(*args: object) -> None:
        raise AssertionError("a read-ahead thread was started")

    options = AnalysisOptions()
    expected = whole_shipped_report(path, options)
    monkeypatch.setattr(read_ahead, "ReadAhead", no_thread)
    report, analysis = streamed(
        path, options, window_rows=3_000, monkeypatch=monkeypatch, read_ahead=False
    )
    assert analysis.windows > 1
    assert_same(report, expected)


@pytest.mark.parametrize("skip", [0, 5])
def test_streamed_sample_with_skip_and_depth_equals_the_whole_trace(skip, monkeypatch):
    path = ROOT / "sample_traces" / "spec_sync.sqlite"
    if not path.exists():
        pytest.skip("sample trace not present")
    options = AnalysisOptions(skip=skip, depth=2)
    report, analysis = streamed(path, options, window_rows=3_000, monkeypatch=monkeypatch)
    assert analysis.windows > 1
    assert_same(report, whole_shipped_report(path, options))


def test_two_ranks_stream_per_process_and_together(monkeypatch):
    # Two processes sharing one GPU: windows hold steps of both.
    path = ROOT / "sample_traces" / "spec_two_ranks.sqlite"
    if not path.exists():
        pytest.skip("sample trace not present")
    pids = sorted(load_trace(path).nvtx_ranges["pid"].unique())
    for options in (AnalysisOptions(), AnalysisOptions(process=int(pids[1]))):
        report, analysis = streamed(path, options, window_rows=10_000, monkeypatch=monkeypatch)
        assert analysis.windows > 1
        assert_same(report, whole_shipped_report(path, options))


def test_ops_queued_past_tiny_windows_keep_their_launch_calls(monkeypatch):
    # Half-step windows: rank 0's kernels run a window or more after their launch, and
    # their launch calls are kept while they wait; the result is still the whole-trace one.
    path = ROOT / "sample_traces" / "spec_two_ranks.sqlite"
    if not path.exists():
        pytest.skip("sample trace not present")
    report, analysis = streamed(path, AnalysisOptions(), window_rows=1, monkeypatch=monkeypatch)
    assert analysis.windows > 12
    assert_same(report, whole_shipped_report(path, AnalysisOptions()))


PEERS = {p.name: p for p in peer_trace_paths()}


@pytest.mark.parametrize(
    "path",
    [p for p in sample_trace_paths() if p.stem in {"spec_graph_node", "spec_two_ranks"}],
    ids=lambda p: Path(str(p)).stem,
)
def test_windows_on_worker_processes_give_the_one_process_result(path, monkeypatch):
    started: list[object] = []
    start_pool = parallel._start_pool

    def recorded(*args: object) -> object:
        started.append(start_pool(*args))  # type: ignore[arg-type]
        return started[-1]

    monkeypatch.setattr(parallel, "_start_pool", recorded)
    options = AnalysisOptions()
    one, _ = streamed(path, options, window_rows=2_000, monkeypatch=monkeypatch)
    assert not started
    pooled, analysis = streamed(path, options, window_rows=2_000, monkeypatch=monkeypatch, jobs=2)
    assert analysis.windows > 2
    assert len(started) == 1 and started[0] is not None, "the windows did not go to workers"
    assert_same(pooled, one)


# Two peer captures by default; every one in the thorough run.
@pytest.mark.parametrize(
    "path", sweep(peer_trace_paths(), REPRESENTATIVE_PEERS), ids=lambda p: Path(str(p)).name
)
def test_every_peer_trace_analyses_the_same_through_analyse_export(path):
    trace, analysis = analyse_export(path, AnalysisOptions(), timelines=VIEWS, window_rows=50)
    assert_same(build_report(trace, analysis), whole_shipped_report(path, AnalysisOptions()))


@pytest.mark.parametrize(
    ("name", "step", "reason"),
    [
        ("mfu_2gpu_before.sqlite", "aten::copy_", "CUDA API rows are not in start order"),
        ("saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "saxpy", None),
    ],
)
def test_peer_traces_with_a_chosen_step_stream_or_say_why_not(name, step, reason, monkeypatch):
    if name not in PEERS:
        pytest.skip(f"peer trace {name} not present")
    options = AnalysisOptions(step_name=step)
    if reason is not None:
        with pytest.raises(NeedsWholeTrace, match=reason):
            streamed(PEERS[name], options, window_rows=5_000, monkeypatch=monkeypatch)
        return
    # saxpy (schema 2.9.1): old-style calls launch its copies; they must stay joined.
    report, analysis = streamed(PEERS[name], options, window_rows=5, monkeypatch=monkeypatch)
    assert analysis.windows == 5
    assert_same(report, whole_shipped_report(PEERS[name], options))


def decode_loop(builder: ExportBuilder, steps: int, *, late: bool = False) -> ExportBuilder:
    """steps decode steps of 10 µs: [draft][verify] with one launch each; rows in time order.

    late: step 1's verify kernel runs in step 6 (launched at 15_000, it starts at 65_000).
    """
    for i in range(steps):
        o = i * 10_000
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
    for i in range(steps):
        o = i * 10_000
        builder.launch("k_draft", o + 100, o + 600, o + 1_000, o + 3_000)
        if late and i == 1:
            builder.call("cudaLaunchKernel", o + 5_000, o + 5_400, correlation_id=999)
            continue
        if late and i == 6:
            builder.kernel("k_late", o + 5_000, o + 5_800, correlation_id=999)
        builder.launch("k_verify", o + 5_000, o + 5_400, o + 6_000, o + 9_000)
    return builder


def test_a_kernel_and_a_sync_across_many_windows_are_charged_as_in_one_pass(
    export_builder, monkeypatch
):
    #   steps   |0|1|2|3|4|5|6|7|8|9|   one step per window
    #   GPU         [long kernel from step 2 into step 6]
    #   thread                [cudaDeviceSynchronize 4 → 7]
    builder = export_builder()
    for i in range(10):
        o = i * 10_000
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
    for i in range(10):
        o = i * 10_000
        builder.launch("k_draft", o + 100, o + 600, o + 1_000, o + 3_000)
        if i == 2:
            builder.launch("long", o + 3_200, o + 3_400, o + 3_500, o + 41_000)
        if i == 4:
            builder.call("cudaDeviceSynchronize", o + 4_100, o + 32_000)
    path = builder.write()
    options = AnalysisOptions(skip=0)
    report, analysis = streamed(path, options, window_rows=1, monkeypatch=monkeypatch)
    assert analysis.windows == 10
    assert_same(report, whole_report(path, options))


@pytest.mark.parametrize("lost", [(), range(43_000, 59_000, 2_000)], ids=["all", "some_lost"])
def test_gpu_metric_samples_across_window_edges_read_as_in_one_pass(
    lost, export_builder, monkeypatch
):
    # One step per window; a 2 µs sample across each step's end covers the end of this
    # step's verify kernel and the start of the next step's draft kernel:
    #   step i      [o ........................... o+10000)[o+10000 ...
    #   GPU           [draft 500..3000]  [verify 5000..9600]   [draft 10500..
    #   samples   ...|1000  |3000  |5000  |7000  |9000          |11000 ...   DRAM read 20 %
    # The sample's GPU busy time is 1,100 ns (rate while busy 36 %) in every window: the
    # window before it holds the draft kernel only as read ahead, the window after it holds
    # the verify kernel only as busy time dropped with the window before. some_lost: no
    # sample from 43 to 57 µs; the one at 41 µs lasts a period whichever window reads it.
    builder = export_builder()
    for i in range(10):
        o = i * 10_000
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
    for time_ns in sorted(set(range(1_000, 102_000, 2_000)) - set(lost)):
        builder.gpu_sample(time_ns, dram_read_pct=20)
    for i in range(10):
        o = i * 10_000
        builder.launch("k_draft", o + 100, o + 400, o + 500, o + 3_000)
        builder.launch("k_verify", o + 4_100, o + 4_400, o + 5_000, o + 9_600)
    path = builder.write()
    options = AnalysisOptions(skip=0)
    report, analysis = streamed(path, options, window_rows=1, monkeypatch=monkeypatch)
    assert analysis.windows == 10
    expected = whole_report(path, options)
    figures = {s.name: s.gpu_metrics for p in expected.processes for s in p.stages}
    assert figures["draft"] is not None and figures["verify"] is not None
    assert_same(report, expected)


def test_an_op_read_windows_after_its_launch_is_refused(export_builder, monkeypatch):
    path = decode_loop(export_builder(), 10, late=True).write()
    options = AnalysisOptions(skip=0)
    # Two rows per chunk: the late kernel is read only when step 6 is near, long after its
    # launch call was dropped; the windows cannot place it and say so.
    with pytest.raises(NeedsWholeTrace, match="window after its launch"):
        streamed(path, options, window_rows=1, monkeypatch=monkeypatch, chunk_rows=2)
    trace, analysis = analyse_export(path, options, timelines=VIEWS, window_rows=1)
    assert analysis.windows == 1
    assert_same(build_report(trace, analysis), whole_report(path, options))
    # Read early (larger chunks), it keeps its launch call alive and the windows place it.
    report, analysis = streamed(path, options, window_rows=1, monkeypatch=monkeypatch)
    assert analysis.windows == 10
    assert_same(report, whole_report(path, options))


def test_a_copy_call_outlasting_its_window_is_refused(export_builder, monkeypatch):
    # A pageable copy issued in step 2 returns in step 6, after its copy ran: a sync. A
    # window cannot know that before it reads the copy, so it refuses.
    builder = export_builder()
    for i in range(10):
        o = i * 10_000
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
    for i in range(10):
        o = i * 10_000
        builder.launch("k_draft", o + 100, o + 600, o + 1_000, o + 3_000)
        if i == 2:
            builder.call("cudaMemcpyAsync", o + 5_500, o + 41_000, correlation_id=777)
    builder.memcpy(60_000, 60_500, correlation_id=777)
    path = builder.write()
    options = AnalysisOptions(skip=0)
    with pytest.raises(NeedsWholeTrace, match="copy call outlasts"):
        streamed(path, options, window_rows=1, monkeypatch=monkeypatch, chunk_rows=2)
    trace, analysis = analyse_export(path, options, timelines=VIEWS, window_rows=1)
    assert analysis.windows == 1
    whole = whole_report(path, options)
    assert_same(build_report(trace, analysis), whole)
    ledger = [e for e in whole.processes[0].ledger if e.cause == "sync"]
    assert ledger  # the copy's wait is sync time in the whole-trace ledger


def test_rows_out_of_start_order_are_refused(export_builder, monkeypatch):
    builder = decode_loop(export_builder(), 6)
    builder.launch("k_early", 50, 60, 70, 80)  # stored last, starts first
    path = builder.write()
    with pytest.raises(NeedsWholeTrace, match="not in start order"):
        streamed(path, AnalysisOptions(skip=0), window_rows=1, monkeypatch=monkeypatch)


def test_untimed_rows_are_counted_the_same_when_streamed(export_builder, monkeypatch):
    builder = decode_loop(export_builder(), 6)
    builder.kernel("k_untimed", 0, 0, correlation_id=-1)
    path = builder.write()
    # The untimed row (start 0) sorts first: the stream drops it before checking the order.
    monkeypatch.setattr(read, "CHUNK_ROWS", 2)
    with stream_export(path) as export:
        analysis = analyse_rows(export.head, export.sources, AnalysisOptions(), window_rows=1)
        trace = export.trace()
    assert trace.info.untimed_events == load_trace(path).info.untimed_events == 1
    assert analysis.windows > 1


def _inflate(source: Path, target: Path, factor: int) -> None:
    spec = importlib.util.spec_from_file_location("inflate", ROOT / "benchmarks" / "inflate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.inflate(source, target, factor)


def test_rows_held_at_once_do_not_grow_with_the_export(tmp_path, monkeypatch):
    # The same real steps repeated 2 and 6 times: the largest buffer stays the same size.
    source = ROOT / "sample_traces" / "spec_eager.sqlite"
    if not source.exists():
        pytest.skip("sample trace not present")
    held: list[int] = []
    fill = streams.RowStream.fill

    def counting_fill(self: streams.RowStream, limit: int, window: int) -> None:
        fill(self, limit, window)
        held.append(sum(len(frame) for frame in self.held))

    monkeypatch.setattr(streams.RowStream, "fill", counting_fill)
    peaks, counts = {}, {}
    for factor in (2, 6):
        big = tmp_path / f"x{factor}.sqlite"
        _inflate(source, big, factor)
        held.clear()
        _, analysis = streamed(big, AnalysisOptions(), window_rows=20_000, monkeypatch=monkeypatch)
        peaks[factor], counts[factor] = max(held), analysis.windows
    assert counts[2] >= 3
    assert counts[6] >= 2 * counts[2]
    assert peaks[6] <= 1.2 * peaks[2]


def test_read_turns_go_to_the_stream_furthest_behind_in_time():
    # While one reader holds the turn, three ask at different times reached: the turns then
    # go in time order (the analysis needs every stream up to the same time), not in the
    # order they asked.
    import threading
    import time

    turns = read_ahead.Turns()
    order: list[int] = []
    holder = object()
    with turns.turn(holder, 0):
        threads = []
        for reached in (30, 10, 20):

            def ask(reached: int = reached) -> None:
                with turns.turn(object(), reached):
                    order.append(reached)

            threads.append(threading.Thread(target=ask))
            threads[-1].start()
        deadline = time.monotonic() + 10
        while len(turns._waiting) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(turns._waiting) == 3
    for thread in threads:
        thread.join(timeout=10)
    assert order == [10, 20, 30]
