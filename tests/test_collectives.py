"""Collectives across processes: matching, the wait bucket, and the cross-rank view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from tests.conftest import corpus_trace_paths, shipped_report, shipped_trace
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.cli import app
from trace_gaps.nsys.load import load_trace
from trace_gaps.records.notes import NoteCode
from trace_gaps.records.report import Report
from trace_gaps.report.build import build_report

runner = CliRunner()
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
SENDRECV = "ncclDevKernel_SendRecv"
STEP_NS = 1_000_000
US = 1_000


def tensor_parallel(
    builder: ExportBuilder,
    *,
    ranks: int = 2,
    steps: int = 8,
    late_rank: int | None = 0,
    late_ns: int = 300 * US,
    skip_collective: tuple[int, int] | None = None,
    pipeline_pair: bool = False,
) -> Path:
    """`ranks` processes (pids 100, 101, ...), each step: `forward` with one compute kernel
    and one all-reduce. The late rank first spends late_ns in `detokenize` (host work), so
    the others' all-reduces start earlier and wait for it; all end together."""
    for i in range(steps):
        t = i * STEP_NS
        arrive = t + 50 * US + (late_ns if late_rank is not None else 0)
        end_collective = arrive + 60 * US
        for r in range(ranks):
            pid = 100 + r
            late = r == late_rank
            builder.range("decode_step", t, t + 450 * US, pid=pid)
            forward_start = t + late_ns if late else t
            if late:
                builder.range("detokenize", t, t + late_ns, pid=pid)
            builder.range("forward", forward_start, t + 450 * US, pid=pid)
            call = forward_start + 10 * US
            builder.launch("gemm", call, call + 5 * US, call + 8 * US, call + 30 * US, pid=pid)
            if skip_collective == (r, i):
                continue
            start = arrive if late or late_rank is None else call + 40 * US
            builder.launch(
                ALLREDUCE, start - 6 * US, start - 1 * US, start, end_collective, pid=pid
            )
            if pipeline_pair and r < 2:
                begin = end_collective + 10 * US + (100 * US if r == 0 else 0)
                builder.launch(
                    SENDRECV, begin - 6 * US, begin - 1 * US, begin, end_collective + 200 * US,
                    pid=pid,
                )  # fmt: skip
    return builder.write("tp.sqlite")


def report_of(path: Path) -> Report:
    trace = load_trace(path)
    return build_report(trace, analyse_trace(trace, AnalysisOptions(skip=0)))


def test_the_waiting_rank_top_candidate_is_its_wait_for_the_late_rank(export_builder):
    report = report_of(tensor_parallel(export_builder()))
    waiting = next(p for p in report.processes if p.pid == 101)
    # First by the time it explains (candidates are ranked by what-if saving).
    top = min(waiting.candidates, key=lambda c: c.explained_rank)
    assert (top.stage, top.bucket) == ("forward", "wait")
    assert top.lever == "ontime"
    # The all-reduce on 101 starts at +50 us (after its gemm) and the late rank's at +350 us.
    assert top.ns_per_step == 300 * US  # from 101's start (+50 us) to 100's (+350 us)
    assert "for process 100" in top.verdict
    assert "detokenize" in top.verdict
    assert report.ranks.pace_setter_pid == 100
    late = next(r for r in report.ranks.processes if r.pid == 100)
    assert late.last_arrival_fraction == 1.0 and late.wait_ns_per_step == 0


def test_busy_wait_and_idle_add_up_to_every_step(export_builder):
    report = report_of(tensor_parallel(export_builder(), ranks=4))
    for process in report.processes:
        for row in process.step_rows:
            assert row.busy_ns + row.wait_ns + row.idle_ns == row.wall_ns
        assert sum(e.ns_per_step for e in process.ledger) == process.steps.wall.mean_ns


def test_four_ranks_all_wait_for_the_late_one(export_builder):
    report = report_of(tensor_parallel(export_builder(), ranks=4, late_rank=2))
    assert report.ranks.pace_setter_pid == 102
    for rank in report.ranks.processes:
        if rank.pid != 102:
            assert [w.pid for w in rank.waits_for] == [102]
            assert rank.wait_ns_per_step == 300 * US
    assert report.ranks.unmatched_instances == 0


def test_a_rank_missing_a_collective_leaves_the_rest_unmatched_and_says_so(export_builder):
    report = report_of(tensor_parallel(export_builder(), steps=8, skip_collective=(1, 4)))
    # 101 lacks step 4's all-reduce: its 5th..7th pair with 100's 6th..8th, whose ends differ
    # (3 unmatched); 100's 8th has no partner at all (not an instance of two).
    assert (report.ranks.matched_instances, report.ranks.unmatched_instances) == (7, 3)
    assert NoteCode.UNMATCHED_COLLECTIVES in [note.code for note in report.notes]
    waiting = next(r for r in report.ranks.processes if r.pid == 101)
    assert waiting.wait_ns_per_step == 300 * US * 4 // 8  # only the 4 matched instances


def test_two_communicators_match_each_family_among_its_own_participants(export_builder):
    report = report_of(tensor_parallel(export_builder(), ranks=4, pipeline_pair=True))
    assert report.ranks.unmatched_instances == 0
    assert report.ranks.matched_instances == 8 + 8  # all-reduces of 4 ranks, send/recv of 2
    # 101 waits 300 us a step in its all-reduce and 100 us more for 100's send/recv.
    rank_101 = next(r for r in report.ranks.processes if r.pid == 101)
    assert rank_101.wait_ns_per_step == 300 * US + 100 * US
    assert next(r for r in report.ranks.processes if r.pid == 103).wait_ns_per_step == 300 * US


def test_a_collective_where_no_one_waits_has_no_wait_and_no_pace_setter(export_builder):
    report = report_of(tensor_parallel(export_builder(), late_rank=None))
    assert report.ranks.pace_setter_pid is None
    for process in report.processes:
        assert all(e.bucket != "wait" for e in process.ledger)


def test_exports_without_collectives_have_no_wait_and_no_ranks():
    # The real two-process sample spec_two_ranks syncs its ranks over gloo on the host: no
    # collective kernel, so no ranks view and no wait, only the slowest-process table.

    report = shipped_report(shipped_trace("spec_two_ranks"), AnalysisOptions(skip=0))
    assert len(report.processes) == 2
    assert report.ranks.processes == [] and report.ranks.pace_setter_pid is None
    assert all(e.bucket != "wait" for p in report.processes for e in p.ledger)
    assert report.slowest_rank_by_stage


def test_a_lone_rank_has_no_one_to_wait_for(export_builder):
    report = report_of(tensor_parallel(export_builder(), ranks=1))
    assert report.ranks.pace_setter_pid is None
    assert report.ranks.matched_instances == 0
    assert all(e.bucket != "wait" for p in report.processes for e in p.ledger)


def test_json_carries_the_ranks_view_and_wait_rows(export_builder):
    path = tensor_parallel(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "-f", "json", "--skip", "0"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ranks"]["pace_setter_pid"] == 100
    ranked = {p["pid"]: p for p in data["ranks"]["processes"]}
    assert ranked[101]["waits_for"][0]["pid"] == 100
    rows = [e for p in data["processes"] for e in p["ledger"] if e["bucket"] == "wait"]
    assert rows and all(e["cause"] == "collective" for e in rows)


@pytest.mark.parametrize("fmt", ["text", "md", "csv"])
def test_every_format_shows_the_wait(export_builder, fmt):
    path = tensor_parallel(export_builder())
    result = runner.invoke(app, ["analyze", str(path), "-f", fmt, "--skip", "0"])
    assert result.exit_code == 0, result.output
    assert "wait" in result.stdout
    if fmt != "csv":
        assert "sets the pace" in result.stdout


def _corpus(name: str) -> Path | None:
    return next((p for p in corpus_trace_paths() if p.stem == name), None)


@pytest.mark.skipif(_corpus("tp_eager") is None, reason="corpus tp_eager absent")
def test_real_two_gpu_capture_rank_1_waits_for_rank_0s_detokenize():
    # sample_traces/corpus/tp_eager: rank 0 (pid 2604) plants 3 ms of host work a step.
    path = _corpus("tp_eager")
    assert path is not None
    report = shipped_report(path)
    assert report.ranks.pace_setter_pid == 2604
    waiting = next(p for p in report.processes if p.pid == 2605)
    top = min(waiting.candidates, key=lambda c: c.explained_rank)
    assert (top.stage, top.bucket) == ("forward", "wait")
    assert top.lever == "ontime" and top.saving_ns is not None and top.saving_ns > 0
    assert top.ns_per_step > 7_000_000  # 7.89 ms/step of the 15.4 ms step
    assert "for process 2604" in top.verdict and "detokenize" in top.verdict
    assert report.ranks.unmatched_instances == 0
    # Rank 0 is late because of its host: its GPU sits idle through most of rank 1's wait,
    # mostly in host code (detokenize, and the eager forward's Python between launches).
    waits_for = next(r for r in report.ranks.processes if r.pid == 2605).waits_for[0]
    idle = waits_for.peer_idle_ns_per_step
    assert sum(idle.values()) > 0.8 * waits_for.ns_per_step
    assert max(idle, key=lambda cause: idle[cause]) == "host"


@pytest.mark.skipif(_corpus("tp_graph") is None, reason="corpus tp_graph absent")
def test_real_graph_replay_waits_no_more_than_the_replays_skew():
    # sample_traces/corpus/tp_graph: the forward (16 all-reduces) replays from a CUDA graph on
    # both ranks with no planted work; the ranks launch their replays a few µs apart, and
    # that skew is all the waiting there is (measure.py finds 0.00 and 0.08 ms/step too).
    path = _corpus("tp_graph")
    assert path is not None
    report = shipped_report(path)
    for process in report.processes:
        wall = process.steps.wall.mean_ns
        wait = sum(e.ns_per_step for e in process.ledger if e.bucket == "wait")
        assert wait < 0.06 * wall  # 0.08 of 1.90 ms at most
        assert min(process.candidates, key=lambda c: c.explained_rank).bucket == "busy"
    assert report.ranks.unmatched_instances == 0
