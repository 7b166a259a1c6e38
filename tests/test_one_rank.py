"""One rank's export alone: its collective time is not called GPU work, and the wait it may
hide is bounded from below, checked against the wait measured with every rank's export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import shipped_trace
from tests.test_collectives import ALLREDUCE, STEP_NS, US, report_of, tensor_parallel
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.run.multi import analyse_exports

runner = CliRunner()
GPU_BOUND_WORDS = "only faster or fewer kernels"


def _corpus(name: str) -> Path:
    return shipped_trace(name)


def _alone(name: str) -> dict:
    result = runner.invoke(app, ["analyze", str(_corpus(name)), "-f", "json"])
    assert result.exit_code == 0, result.output
    data: dict = json.loads(result.stdout)
    return data


@pytest.mark.parametrize(("name", "stage_ms"), [("tp_rank0", 9.19), ("tp_rank1", 2.95)])
def test_one_rank_alone_calls_its_all_reduce_time_collective_time(name, stage_ms):
    # Before: "forward: GPU busy 10.53 ms/step ...; top op ncclDevKernel_AllReduce... 9.19
    # ms/step — GPU-bound here: only faster or fewer kernels shrink it" on tp_rank0 alone.
    process = _alone(name)["processes"][0]
    busy = next(
        c for c in process["candidates"] if (c["stage"], c["bucket"]) == ("forward", "busy")
    )
    assert busy["kind"] == "collective_unsplit"
    assert f"{stage_ms:.2f} ms/step of it in collective kernels" in busy["verdict"]
    assert "cannot split into waiting for other ranks and transfer" in busy["verdict"]
    assert "'tp_rank*.sqlite'" in busy["verdict"]
    with_collectives = [
        c["verdict"]
        for c in process["candidates"]
        if any(k["name"] == ALLREDUCE for k in c["evidence"]["top_kernels"])
    ]
    assert with_collectives
    assert all(GPU_BOUND_WORDS not in words for words in [process["headline"], *with_collectives])


def test_the_json_carries_the_unsplit_time_and_the_exports_to_add():
    ranks = _alone("tp_rank0")["ranks"]["processes"]
    unsplit = ranks[0]["unsplit"]
    assert unsplit["collective_ns_per_step"] == 9_185_042
    assert unsplit["wait_lower_bound_ns_per_step"] > 0 and unsplit["no_bound_reason"] == ""
    assert unsplit["names"] == [ALLREDUCE]
    assert unsplit["exports_to_add"] == "tp_rank*.sqlite"


def test_the_lower_bound_holds_against_the_wait_measured_with_both_exports():
    # Measured: tp_rank0 9.05 ms/step bound vs 9.10 waited; tp_rank1 2.85 vs 2.86.
    paths = [_corpus("tp_rank0"), _corpus("tp_rank1")]
    pair = analyse_exports(paths, AnalysisOptions()).report
    waited = {r.pid: r.wait_ns_per_step for r in pair.ranks.processes}
    assert all(r.unsplit is None for r in pair.ranks.processes)  # both ranks: a wait, measured
    for path in paths:
        alone = analyse_exports([path], AnalysisOptions()).report.ranks.processes[0]
        assert alone.unsplit is not None and alone.unsplit.wait_lower_bound_ns_per_step is not None
        bound = alone.unsplit.wait_lower_bound_ns_per_step
        assert 0.95 * waited[alone.pid] <= bound <= waited[alone.pid], (path.name, bound)


def test_a_lone_synthetic_rank_gets_the_bound_from_its_shortest_all_reduce(export_builder):
    # One rank, 8 steps: each all-reduce 60 µs (the late rank's, so no wait inside): the
    # shortest is 60 µs, nothing exceeds twice it: the bound is 0, and the verdict says so.
    report = report_of(tensor_parallel(export_builder(), ranks=1))
    rank = report.ranks.processes[0]
    assert rank.unsplit is not None
    assert rank.unsplit.collective_ns_per_step == 60 * US
    assert rank.unsplit.wait_lower_bound_ns_per_step == 0
    assert rank.unsplit.exports_to_add == ""  # tp.sqlite holds no rank number


def test_a_collective_that_runs_once_per_gpu_has_no_bound_and_says_why(export_builder):
    builder = export_builder()
    for i in range(4):
        t = i * STEP_NS
        builder.range("decode_step", t, t + 450 * US, pid=100)
        builder.range("forward", t, t + 450 * US, pid=100)
        builder.launch(
            f"{ALLREDUCE}_{i}", t + 10 * US, t + 15 * US, t + 20 * US, t + 420 * US, pid=100
        )
    report = report_of(builder.write("rank3.sqlite"))
    rank = report.ranks.processes[0]
    assert rank.unsplit is not None and rank.unsplit.wait_lower_bound_ns_per_step is None
    assert "runs once per GPU" in rank.unsplit.no_bound_reason
    assert rank.unsplit.exports_to_add == "rank*.sqlite"
    # Ranked by what-if saving, the unsplit collective time (no lever prices a wait that may
    # be a peer's) is listed, not first: find it by its bucket.
    top = next(c for c in report.processes[0].candidates if c.bucket == "busy")
    assert top.kind == "collective_unsplit"
    assert "no lower bound of the wait: each collective kernel runs once" in top.verdict
    assert GPU_BOUND_WORDS not in top.verdict


def _notes(report: dict, code: str) -> list[str]:
    return [note["text"] for note in report["notes"] if note["code"] == code]


def test_a_rank_that_waits_for_missing_peers_has_no_lever_priced():
    # Before: tp_rank0 alone ranked "sample host syncs removed saves 3.05 ms/step" first,
    # then detokenize 3.01 and a graph of forward 2.95, while it waits at least 9.05 ms/step
    # for tp_rank1 (9.10 measured with it): savings that would only move the wait.
    report = _alone("tp_rank0")
    assert report["ranks"]["processes"][0]["unsplit"]["peers_decide_levers"] is True
    process = report["processes"][0]
    candidates = process["candidates"]
    assert all(c["saving_ns"] is None and c["predicted_step_ns"] is None for c in candidates)
    assert [c["explained_rank"] for c in candidates] == sorted(
        c["explained_rank"] for c in candidates
    )
    assert (candidates[0]["stage"], candidates[0]["kind"]) == ("forward", "collective_unsplit")
    assert "biggest saving" not in process["headline"]
    assert "biggest lever: forward collective time, 9.19 ms/step" in process["headline"]
    (note,) = _notes(report, "collectives_unsplit")
    assert note.startswith("Process 2947: its 16 collectives per step")
    assert "trace-gaps analyze 'tp_rank*.sqlite'" in note
    assert "9.19 ms/step of its GPU busy time is these collective kernels" in note
    assert "at least 9.05 ms/step of it is waiting" in note
    assert "Levers the missing ranks decide are not priced: ontime" in note
    assert "every other lever of this process" in note


def test_with_its_peer_the_rank_is_priced_and_no_note_says_peers_are_missing():
    paths = [_corpus("tp_rank0"), _corpus("tp_rank1")]
    pair = analyse_exports(paths, AnalysisOptions()).report
    assert not [n for n in pair.notes if n.code == "collectives_unsplit"]
    for process in pair.processes:
        assert any(c.saving_ns is not None for c in process.candidates), process.label


def test_a_lone_rank_that_does_not_wait_keeps_its_levers_priced_and_says_how(export_builder):
    # The late rank alone: its all-reduces all take 60 µs, no wait bound: priced, as if the
    # missing ranks gained as much.
    report = report_of(tensor_parallel(export_builder(), ranks=1))
    rank = report.ranks.processes[0]
    assert rank.unsplit is not None and not rank.unsplit.peers_decide_levers
    assert any(c.saving_ns is not None for c in report.processes[0].candidates)
    (note,) = [n.text for n in report.notes if n.code == "collectives_unsplit"]
    assert "at least 0 ns/step of it is waiting" in note
    assert "its other levers are priced with each collective as long as measured" in note
