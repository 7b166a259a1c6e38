"""CUDA graph facts per process and per stage: captures, their NVTX path, and whose stage it is."""

from __future__ import annotations

import json

import pytest

from tests.test_long_gaps import launches
from tests.test_report import report_of
from trace_gaps.analysis.graphs import match_stage
from trace_gaps.render.json import render_json


@pytest.mark.parametrize(
    ("path", "owner"),
    [
        (["capture_verify_graph"], "verify_forward"),
        (["decode_step", "verify_forward"], "verify_forward"),
        (["warmup", "cuda_graph_capture"], None),  # only generic words
        (["capture_forward"], None),  # "forward" is in both stages: ambiguous
        (["capture_draft"], "draft_forward"),
        ([], None),
    ],
)
def test_a_capture_belongs_to_the_stage_it_is_inside_or_named_after(path, owner):
    assert match_stage(path, ["draft_forward", "verify_forward"]) == owner


def capture(builder, start_ns, *, range_name, pid=100):  # type: ignore[no-untyped-def]
    """A capture of two kernels inside an NVTX range, then its instantiation."""
    builder.range(range_name, start_ns, start_ns + 100_000, pid=pid, tid=pid)
    builder.call("cudaStreamBeginCapture", start_ns + 1_000, start_ns + 2_000, pid=pid, tid=pid)
    builder.call("cudaLaunchKernel", start_ns + 3_000, start_ns + 4_000, pid=pid, tid=pid)
    builder.call("cudaStreamEndCapture", start_ns + 10_000, start_ns + 11_000, pid=pid, tid=pid)
    builder.call("cudaGraphInstantiate", start_ns + 20_000, start_ns + 60_000, pid=pid, tid=pid)


def two_stage_steps(builder, *, pid=100, first_ns=1_000_000):  # type: ignore[no-untyped-def]
    """4 steps of 1.2 ms: draft_forward then verify_forward, each 60 eager launches 10 µs
    apart (GPU idle most of the time, no long host gap)."""
    for i in range(4):
        o = first_ns + i * 1_200_000
        builder.range("decode_step", o, o + 1_200_000, pid=pid, tid=pid)
        builder.range("draft_forward", o, o + 600_000, pid=pid, tid=pid)
        builder.range("verify_forward", o + 600_000, o + 1_200_000, pid=pid, tid=pid)
        launches(builder, o + 1_000, 60, every_ns=10_000, stage_pid=pid)
        launches(builder, o + 601_000, 60, every_ns=10_000, stage_pid=pid)


def test_only_the_stage_that_captured_a_graph_is_told_it_does_not_replay_it(export_builder):
    #   before the steps: capture_verify_graph [BeginCapture ... EndCapture] [Instantiate]
    #   steps: draft_forward and verify_forward both eager, no graph launch
    b = export_builder()
    capture(b, 100_000, range_name="capture_verify_graph")
    two_stage_steps(b)
    report = report_of(b.write(), skip=0)
    process = report.processes[0]
    verdicts = {c.stage: c.verdict for c in process.candidates if c.bucket == "idle"}
    assert "although it captured one (in capture_verify_graph)" in verdicts["verify_forward"]
    assert "captured" not in verdicts["draft_forward"]
    [graph] = json.loads(render_json(report))["processes"][0]["graphs"]["captures"]
    assert graph["nvtx_path"] == ["capture_verify_graph"]
    assert graph["stage"] == "verify_forward"
    assert graph["replays_per_step"] == 0
    assert graph["instantiations"] == 1
    assert graph["node_count"] is None  # no CUDA_GRAPH_NODE_EVENTS table
    verify = next(s for s in process.stages if s.name == "verify_forward")
    assert (verify.launches_per_step["graph"], verify.eager_launches_per_step) == (0, 60)
    assert verify.nodes_per_replay is None


def test_graph_captures_are_counted_per_process(export_builder):
    #   process 100 captures a graph in its verify stage; process 200 captures none.
    b = export_builder()
    capture(b, 100_000, range_name="capture_verify_graph", pid=100)
    b.graph_event(50_000, pid=100, tid=100)
    two_stage_steps(b, pid=100)
    two_stage_steps(b, pid=200)
    report = report_of(b.write(), skip=0)
    by_pid = {p.pid: p for p in report.processes}
    assert [len(by_pid[pid].graphs.captures) for pid in (100, 200)] == [1, 0]
    assert [by_pid[pid].graphs.graph_events for pid in (100, 200)] == [1, 0]
    assert not any("captured" in c.verdict for c in by_pid[200].candidates)
    assert any("captured one" in c.verdict for c in by_pid[100].candidates)


def test_a_stage_that_captured_a_graph_says_so_whatever_its_verdict(export_builder):
    #   verify_forward captured a graph, runs 30 eager launches 10 µs apart and 5 more after
    #   600 µs of host code each (host-bound: concentrated in a few gaps, not launch-bound)
    #   and replays nothing: its verdict still says it captured one.
    b = export_builder()
    capture(b, 100_000, range_name="capture_verify_graph")
    for i in range(4):
        o = 1_000_000 + i * 6_000_000
        end = o + 3_400_000
        b.range("decode_step", o, end).range("verify_forward", o, end)
        t = launches(b, o + 1_000, 30, every_ns=10_000)
        for _ in range(5):
            t = launches(b, t + 600_000, 1, every_ns=10_000)
    process = report_of(b.write(), skip=0).processes[0]
    verify = next(c for c in process.candidates if c.bucket == "idle")
    assert verify.kind == "host_bound"
    assert "it captured a CUDA graph (in capture_verify_graph) but replays none" in verify.verdict


def test_a_capture_named_after_no_stage_is_linked_by_the_nodes_it_holds():
    from trace_gaps.analysis.graphs import match_by_nodes

    launches = {"draft": 298.0, "verify_forward": 386.0, "sample": 17.0}
    replays = {"draft": 0.0, "verify_forward": 0.0, "sample": 0.0}
    assert match_by_nodes(386, launches, replays) == "verify_forward"
    assert match_by_nodes(384, launches, replays) == "verify_forward"  # within max(3, 2 %)
    assert match_by_nodes(340, launches, replays) is None  # matches nothing
    # A stage that replays a graph already is not the one that ignores its capture.
    assert match_by_nodes(386, launches, {**replays, "verify_forward": 1.0}) is None
    # Two stages of that size: no guess.
    assert match_by_nodes(300, {"a": 300.0, "b": 299.0}, {"a": 0.0, "b": 0.0}) is None


def test_graph_updates_and_launches_every_step_are_named_graph_dispatch(export_builder):
    #   xla_step: 200 cuGraphExecKernelNodeSetParams of 3 µs, then one cuGraphLaunch of
    #   500 µs whose replay runs 100 µs on the GPU; the GPU idles meanwhile (as JAX's does).
    from tests.test_collectives import report_of

    b = export_builder()
    for i in range(4):
        o = i * 2_000_000
        b.range("decode_step", o, o + 1_500_000).range("xla_step", o, o + 1_500_000)
        t = o + 1_000
        for _ in range(200):
            b.call("cuGraphExecKernelNodeSetParams", t, t + 3_000)
            t += 4_000
        corr = 9_000 + i
        b.call("cuGraphLaunch", t, t + 500_000, correlation_id=corr)
        b.graph_replay(t + 510_000, t + 610_000, correlation_id=corr)
    process = report_of(b.write()).processes[0]
    idle = next(c for c in process.candidates if (c.stage, c.bucket) == ("xla_step", "idle"))
    assert "graph dispatch (as JAX/XLA does)" in idle.verdict
    assert (
        "200.0 updates per step" in idle.verdict
        and "cuGraphExecKernelNodeSetParams" in idle.verdict
    )


def test_a_capture_under_an_unrelated_range_is_linked_to_its_stage_by_its_nodes(export_builder):
    #   setup_graphs captures a graph of 60 nodes (CUDA_GRAPH_NODE_EVENTS rows) and never
    #   replays it; verify_forward launches 60 eager kernels a step, draft_forward 30.
    import sqlite3

    from tests.builders import global_tid

    b = export_builder()
    capture(b, 100_000, range_name="setup_graphs")
    for i in range(4):
        o = 1_000_000 + i * 1_200_000
        b.range("decode_step", o, o + 1_000_000).range("draft_forward", o, o + 400_000)
        b.range("verify_forward", o + 400_000, o + 1_000_000)
        launches(b, o + 1_000, 30, every_ns=10_000)
        launches(b, o + 401_000, 60, every_ns=10_000)
    path = b.write()
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start INTEGER, globalTid INTEGER)")
        connection.executemany(
            "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?, ?)",
            [(100_000 + 2_500 + k * 100, global_tid(100, 100)) for k in range(60)],
        )
    connection.close()
    process = report_of(path, skip=0).processes[0]
    [found] = process.graphs.captures
    assert (found.stage, found.node_count) == ("verify_forward", 60)
    verify = next(
        c for c in process.candidates if (c.stage, c.bucket) == ("verify_forward", "idle")
    )
    assert "captured one (in setup_graphs, 60 nodes)" in verify.verdict
