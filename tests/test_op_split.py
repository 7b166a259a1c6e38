"""An op's time split as the ledger splits it: a collective's wait for a peer apart from the
rest, so that no op is listed in a bucket with more time than the bucket holds."""

from __future__ import annotations

import json

import pytest

from tests.conftest import shipped_trace
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.records.report import Report
from trace_gaps.render import render_json
from trace_gaps.report.evidence import evidence_lines
from trace_gaps.run.multi import analyse_exports
from trace_gaps.run.one import load_and_report
from trace_gaps.units import format_duration


@pytest.fixture(scope="module")
def rank_pair() -> Report:
    # A real 2-GPU tensor-parallel run, one export per rank: rank 0 (pid 2947) waits in its
    # NCCL all-reduces for rank 1.
    finding = TimelineRequest(StepPick.FINDING)
    pair = [shipped_trace("tp_rank0"), shipped_trace("tp_rank1")]
    return analyse_exports(pair, AnalysisOptions(), timelines=(finding,)).report


@pytest.fixture(scope="module")
def two_ranks() -> Report:
    return load_and_report(shipped_trace("spec_two_ranks"), AnalysisOptions())[1]


def _busy_candidates(report: Report):
    return [
        (process, candidate)
        for process in report.processes
        for candidate in process.candidates
        if candidate.bucket == "busy"
    ]


@pytest.mark.parametrize("name", ["rank_pair", "two_ranks"])
def test_no_op_in_a_busy_bucket_holds_more_than_the_bucket(name, request):
    report = request.getfixturevalue(name)
    assert _busy_candidates(report)
    for _, candidate in _busy_candidates(report):
        for op in candidate.evidence.top_kernels:
            assert op.running_ns_per_step <= candidate.ns_per_step, (candidate.stage, op)


def test_a_waiting_collective_is_listed_by_its_running_part_with_its_wait_beside(rank_pair):
    process = next(p for p in rank_pair.processes if p.candidates[0].kind == "waiting_for_peer")
    busy = next(c for c in process.candidates if c.bucket == "busy" and c.stage == "forward")
    nccl = next(op for op in busy.evidence.top_kernels if op.name.startswith("ncclDevKernel"))
    # Most of the all-reduce's time is waiting for the other rank (the op's total alone is
    # more than the whole busy bucket, as it was listed before the split).
    assert nccl.ns_per_step > busy.ns_per_step > nccl.running_ns_per_step
    assert nccl.wait_ns_per_step > 0.9 * nccl.ns_per_step
    [(_, lines)] = [
        (heading, lines)
        for heading, lines in evidence_lines(process, top=len(process.candidates))
        if heading.endswith("forward busy")
    ]
    assert any(
        line.startswith(f"op {nccl.name}: {format_duration(nccl.running_ns_per_step)}/step")
        and f"another {format_duration(nccl.wait_ns_per_step)}/step waiting for a peer" in line
        for line in lines
    )
    assert f"{format_duration(nccl.ns_per_step)}/step" not in "\n".join(lines)


def test_the_json_keeps_both_parts_of_an_op(rank_pair):
    data = json.loads(render_json(rank_pair))
    ops = [
        op
        for process in data["processes"]
        for candidate in process["candidates"]
        for op in candidate["evidence"]["top_kernels"]
    ]
    assert all({"ns_per_step", "wait_ns_per_step"} <= op.keys() for op in ops)
    assert any(0 < op["wait_ns_per_step"] < op["ns_per_step"] for op in ops)


def test_a_wait_finding_draws_the_step_with_the_most_collective_wait(rank_pair):
    process = next(p for p in rank_pair.processes if p.candidates[0].kind == "waiting_for_peer")
    [timeline] = [t for t in rank_pair.timelines if t.view == "finding"]
    analysed = {r.step_id for r in process.step_rows if not r.is_warmup}
    waits = {r.step_id: r.wait_ns for r in process.step_rows if r.step_id in analysed and r.wait_ns}
    step_id = min(waits, key=lambda s: (-waits[s], s))
    assert (timeline.pid, timeline.step_id) == (process.pid, step_id)
    assert (timeline.finding, timeline.finding_ns) == ("wait", waits[step_id])
