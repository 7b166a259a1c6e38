"""Launch overhead, execution mode, candidates, verdicts and the JSON shape of a Report."""

from __future__ import annotations

import json
from pathlib import Path

from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.nsys.load import load_trace
from trace_gaps.records.report import Report
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report


def report_of(path: Path, **options: object) -> Report:
    trace = load_trace(path)
    return build_report(trace, analyse_trace(trace, AnalysisOptions(**options)))  # type: ignore[arg-type]


def eager_and_graph_export(builder, *, eager_launches=30, graph_captured=True):  # type: ignore[no-untyped-def]
    """4 steps of 100 µs: draft 0..40 µs issues many tiny eager kernels; verify 40..100 µs
    replays one graph (node-level: 3 kernels sharing the cudaGraphLaunch correlation id)."""
    if graph_captured:
        builder.call("cudaStreamBeginCapture", 1, 2).call("cudaStreamEndCapture", 2, 3)
        builder.call("cudaGraphInstantiate", 3, 4).graph_event(3)
    for i in range(4):
        o = 1_000_000 + i * 100_000
        builder.range("decode_step", o, o + 100_000)
        builder.range("draft", o, o + 40_000).range("verify", o + 40_000, o + 100_000)
        for k in range(eager_launches):
            t = o + 100 + k * 1_000
            builder.launch("tiny", t, t + 300, t + 500, t + 600)  # 200 ns queued each
        builder.call("cudaGraphLaunch", o + 41_000, o + 42_000, correlation_id=10_000 + i)
        for n in range(3):
            s = o + 43_000 + n * 10_000
            builder.kernel("gemm", s, s + 9_000, correlation_id=10_000 + i, graph_node_id=n)
        builder.call("cudaStreamSynchronize", o + 42_100, o + 80_000)
    return builder.write()


def test_launch_counts_queue_time_and_execution_mode_per_stage(export_builder):
    report = report_of(eager_and_graph_export(export_builder()), skip=0)
    stages = {s.name: s for s in report.processes[0].stages}
    draft, verify = stages["draft"], stages["verify"]
    assert draft.execution == "eager"
    assert draft.launches_per_step == {"kernel": 30, "graph": 0, "memcpy": 0, "memset": 0}
    assert draft.launch_api_ns_per_step == 30 * 300
    assert draft.queue_delay_sum_ns_per_step == 30 * 200
    assert draft.queue_delay_mean_ns_per_launch == 200
    assert draft.eager_launches_per_step == 30
    assert draft.queued_launches_per_step == 30
    assert verify.execution == "graph"
    assert verify.launches_per_step["graph"] == 1
    assert verify.nodes_per_replay == 3
    assert verify.syncs_per_step == 1
    assert verify.sync_ns_per_step == 80_000 - 42_100


def test_ledger_means_sum_to_the_mean_step_wall_time_in_json(export_builder):
    data = json.loads(render_json(report_of(eager_and_graph_export(export_builder()), skip=0)))
    process = data["processes"][0]
    assert data["schema_version"] == 3  # 3: notes as records
    assert process["steps"]["steps_analysed"] == 4
    assert sum(e["ns_per_step"] for e in process["ledger"]) == process["steps"]["wall"]["mean_ns"]
    assert {e["cause"] for e in process["ledger"] if e["bucket"] == "idle"} <= {
        "launch",
        "sync",
        "queued",
        "api",
        "host",
    }
    ranks = [c["rank"] for c in process["candidates"]]
    assert ranks == list(range(1, len(ranks) + 1))
    # Ranked by what-if saving; explained_rank is the order by time explained.
    savings = [c["saving_ns"] or 0 for c in process["candidates"]]
    assert savings == sorted(savings, reverse=True)
    explained = sorted(process["candidates"], key=lambda c: c["explained_rank"])
    amounts = [c["ns_per_step"] for c in explained]
    assert amounts == sorted(amounts, reverse=True)


def test_verdict_calls_an_eager_stage_launch_bound_and_keeps_a_capture_outside_it_apart(
    export_builder,
):
    #   draft: 38 eager launches per 40 µs, GPU mostly idle between them; the one capture is
    #   outside every NVTX range, so no stage owns it: it is stated at process level.
    report = report_of(eager_and_graph_export(export_builder(), eager_launches=38), skip=0)
    process = report.processes[0]
    draft_idle = next(c for c in process.candidates if (c.stage, c.bucket) == ("draft", "idle"))
    assert "launch-bound" in draft_idle.verdict
    assert draft_idle.kind == "launch_bound"
    assert "38 eager ops/step" in draft_idle.verdict
    assert "captured" not in draft_idle.verdict
    [capture] = process.graphs.captures
    assert (capture.nvtx_path, capture.stage, capture.instantiations) == ([], None, 1)
    assert process.graphs.unmatched_captures == 1
    assert process.graphs.graph_events == 1
    assert set(draft_idle.evidence.idle_by_cause_ns_per_step) == {
        "launch",
        "sync",
        "queued",
        "api",
        "host",
    }
    assert draft_idle.evidence.host_ns_per_launch is not None


def test_verdict_names_sync_when_the_host_waits(export_builder):
    #   accept: launch one short kernel then wait 50 µs in cudaDeviceSynchronize after it ends
    b = export_builder()
    for i in range(3):
        o = i * 100_000
        b.range("decode_step", o, o + 100_000).range("accept", o, o + 100_000)
        b.launch("k", o + 100, o + 200, o + 300, o + 1_000)
        b.call("cudaDeviceSynchronize", o + 250, o + 60_000)
    report = report_of(b.write(), skip=0)
    top = report.processes[0].candidates[0]
    assert (top.stage, top.bucket) == ("accept", "idle")
    assert "sync-bound" in top.verdict and "1.0 host syncs per step" in top.verdict
    # Inside the sync 250..60000 the GPU is idle except while k runs 300..1000.
    assert top.evidence.idle_by_cause_ns_per_step["sync"] == (300 - 250) + (60_000 - 1_000)


def test_each_process_gets_its_own_ledger_and_the_slowest_is_named_per_stage(export_builder):
    b = export_builder()
    for pid, length in ((100, 5_000), (200, 8_000)):
        for i in range(3):
            o = i * 10_000
            b.range("decode_step", o, o + 9_000, pid=pid, tid=pid).range(
                "fwd", o, o + length, pid=pid, tid=pid
            )
            b.launch("k", o + 10, o + 20, o + 30, o + 1_000, pid=pid, tid=pid)
    report = report_of(b.write(), skip=0)
    assert [p.pid for p in report.processes] == [100, 200]
    slowest = {s.stage: s.pid for s in report.slowest_rank_by_stage}
    assert slowest["fwd"] == 200


def test_an_async_copy_that_returns_after_its_copy_ends_is_a_sync(export_builder):
    #   accept: [k 200..4000] then cudaMemcpyAsync 300..5000 whose DtoH copy runs 4000..4500:
    #   the call blocked (pageable memory), so idle 4500..5000 is sync, and it counts as a sync.
    b = export_builder()
    for i in range(3):
        o = i * 10_000
        b.range("decode_step", o, o + 10_000).range("accept", o, o + 10_000)
        b.launch("k", o + 100, o + 150, o + 200, o + 4_000)
        b.call("cudaMemcpyAsync", o + 300, o + 5_000, correlation_id=20_000 + i)
        b.memcpy(o + 4_000, o + 4_500, correlation_id=20_000 + i)
    report = report_of(b.write(), skip=0)
    process = report.processes[0]
    idle = {(e.stage, e.cause): e.ns_per_step for e in process.ledger if e.bucket == "idle"}
    assert idle[("accept", "sync")] == 500  # 4500..5000; the GPU is busy for the rest of the call
    stage = process.stages[0]
    assert stage.syncs_per_step == 1
    assert stage.launches_per_step["memcpy"] == 0


def test_idle_host_time_blocked_in_an_os_call_is_called_waiting_not_computing(export_builder):
    #   accept: [k 100..1000]; host code 1000..10000, of which pthread_cond_wait 2000..9000
    b = export_builder()
    for i in range(3):
        o = i * 10_000
        b.range("decode_step", o, o + 10_000).range("accept", o, o + 10_000)
        b.launch("k", o + 10, o + 50, o + 100, o + 1_000)
        b.os_call("pthread_cond_wait", o + 2_000, o + 9_000)
    top = report_of(b.write(), skip=0).processes[0].candidates[0]
    assert (top.stage, top.bucket) == ("accept", "idle")
    assert [(c.name, c.ns_per_step) for c in top.evidence.host_blocked_in] == [
        ("pthread_cond_wait", 7_000)
    ]
    assert "blocked in OS calls (mostly pthread_cond_wait" in top.verdict
    assert "CPU-bound" not in top.verdict


def test_a_report_pickled_to_another_process_comes_back_equal():
    # A diff's sides send their reports between processes; the step ledger entries pickle
    # as their fields (StepLedgerEntry.__reduce__), every other part as dataclasses do.
    import pickle

    from tests.conftest import SAMPLE_TRACES

    trace = load_trace(SAMPLE_TRACES / "spec_sync.sqlite")
    report = build_report(trace, analyse_trace(trace, AnalysisOptions()))
    copy = pickle.loads(pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL))
    entries = [e for p in report.processes for e in p.step_ledger]
    assert entries and any(e.cause is None for e in entries) and any(e.cause for e in entries)
    assert copy == report
    assert render_json(copy) == render_json(report)


def test_os_call_names_are_looked_up_by_the_ids_read_and_unknown_ids_read_as_unknown(
    export_builder,
):
    b = export_builder()
    b.range("decode_step", 0, 10_000).launch("k", 10, 50, 100, 1_000)
    b.os_call("poll", 2_000, 3_000).os_call("read", 4_000, 5_000).os_call("poll", 6_000, 7_000)
    b.string("unused by any OS call")
    b._add("OSRT_API", (8_000, 9_000, 27, b.rows["OSRT_API"][0][3], 9_999, 0, 0, None))
    names = load_trace(b.write()).os_calls["name"].astype(str).tolist()
    assert names == ["poll", "read", "poll", "?"]
