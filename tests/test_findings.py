"""What a candidate is (report/findings.py), judged from evidence and stage figures built by
hand, before any words; and its words (verdicts.write_candidate) follow the judgement."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trace_gaps.figures.inputs import StageInputs
from trace_gaps.figures.stage import StageSummary, StepValue, Total, summarise_stage
from trace_gaps.model import OpKind
from trace_gaps.records.report import CallShare, Candidate, Evidence, LongGapFinding
from trace_gaps.report.findings import Case, Finding, Judgement, StageFacts, judge
from trace_gaps.report.verdicts import write_candidate
from trace_gaps.vocabulary import Bucket, VerdictKind

US = 1_000


def stage(**figures: object) -> StageSummary:
    """A stage with no launch, call or time, but for the figures given."""
    empty = summarise_stage(
        StageInputs(
            name="verify",
            steps=1,
            totals=dict.fromkeys(Total, 0),
            busy_ns_per_step=0,
            idle_ns_per_step=0,
            launch_spacing_ns=None,
            long_gap_threshold_ns=1_000 * US,
            even_gap_fraction=None,
            long_gaps=0,
            long_gap_idle_ns=0,
            step_values=dict.fromkeys(StepValue, ()),
        )
    )
    return replace(empty, **figures)  # type: ignore[arg-type]


def idle(launch: int = 0, host: int = 0, sync: int = 0, queued: int = 0, api: int = 0) -> Evidence:
    """Evidence of an idle candidate with this split by cause, ns per step."""
    return Evidence(
        idle_by_cause_ns_per_step={
            "launch": launch,
            "sync": sync,
            "queued": queued,
            "api": api,
            "host": host,
        },
        launches_per_step=0.0,
        syncs_per_step=0.0,
        host_ns_per_launch=None,
        top_kernels=[],
        top_api_calls=[],
        longest_gaps=[],
        unexpected_calls_per_step={},
    )


EAGER = stage(
    eager_launches_per_step=300.0,
    launches_per_step={OpKind.KERNEL: 300.0, OpKind.MEMCPY: 0, OpKind.MEMSET: 0, OpKind.GRAPH: 0},
    launch_spacing_ns=10 * US,
)
GRAPHED = stage(
    launches_per_step={OpKind.KERNEL: 0, OpKind.MEMCPY: 0, OpKind.MEMSET: 0, OpKind.GRAPH: 2.0}
)


def test_busy_time_is_gpu_bound_for_all_of_it():
    assert judge(Bucket.BUSY, 900 * US, idle(), StageFacts(EAGER)) == Judgement(
        VerdictKind.GPU_BOUND, 900 * US
    )


@pytest.mark.parametrize(
    ("even", "kind", "case"),
    [(0.9, VerdictKind.LAUNCH_BOUND, Case.PLAIN), (0.3, VerdictKind.HOST_BOUND, Case.CONCENTRATED)],
)
def test_an_eager_stage_is_launch_bound_only_when_its_host_time_is_spread_evenly(even, kind, case):
    facts = StageFacts(replace(EAGER, even_gap_fraction=even))
    found = judge(Bucket.IDLE, 500 * US, idle(launch=200 * US, host=300 * US), facts)
    assert (found.kind, found.case, found.lever_ns_per_step) == (kind, case, 500 * US)


def test_long_host_gaps_ending_in_a_code_load_explain_their_own_time():
    gaps = LongGapFinding(
        "verify", "cudaGetDeviceProperties", "cuLibraryLoadData", [], [], 1.0,
        800 * US, 800 * US, 0, 800 * US, 800 * US, ends_in_code_load=True,
    )  # fmt: skip
    evidence = replace(
        idle(launch=50 * US, host=850 * US),
        long_host_gaps=[gaps],
        long_gap_idle_ns_per_step=800 * US,
    )
    assert judge(Bucket.IDLE, 900 * US, evidence, StageFacts(EAGER)) == Judgement(
        VerdictKind.LONG_HOST_GAPS, 800 * US, Case.CODE_LOAD, 800 * US
    )


def test_graph_updates_and_graph_launches_are_graph_dispatch():
    evidence = replace(
        idle(launch=100 * US, api=300 * US),
        top_api_calls=[CallShare("cuGraphExecKernelNodeSetParams_v2", 250 * US, 40.0)],
    )
    found = judge(Bucket.IDLE, 400 * US, evidence, StageFacts(GRAPHED))
    assert (found.kind, found.case, found.lever_ns_per_step) == (
        VerdictKind.API,
        Case.GRAPH_DISPATCH,
        350 * US,
    )


def test_a_host_thread_waiting_in_os_calls_is_blocked_not_cpu_bound():
    evidence = replace(idle(host=400 * US), host_blocked_in=[CallShare("futex", 300 * US, 2.0)])
    assert judge(Bucket.IDLE, 400 * US, evidence, StageFacts(stage())).kind == (
        VerdictKind.BLOCKED_IN_OS
    )
    assert judge(Bucket.IDLE, 400 * US, idle(host=400 * US), StageFacts(stage())).kind == (
        VerdictKind.HOST_BOUND
    )


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        ("sync", VerdictKind.SYNC_BOUND),
        ("queued", VerdictKind.QUEUED),
        ("api", VerdictKind.API),
        ("launch", VerdictKind.LAUNCH_CALLS),
    ],
)
def test_a_few_launches_are_judged_by_the_largest_cause(cause, kind):
    found = judge(Bucket.IDLE, 400 * US, idle(**{cause: 400 * US}), StageFacts(stage()))
    assert (found.kind, found.lever_ns_per_step) == (kind, 400 * US)


def test_the_words_follow_the_judgement():
    evidence = idle(launch=200 * US, host=300 * US)
    candidate = Candidate(1, "verify", "idle", 500 * US, 0.5, "", 0, "", "", evidence)
    facts = StageFacts(replace(EAGER, even_gap_fraction=0.9))
    launch_bound = Judgement(VerdictKind.LAUNCH_BOUND, 500 * US)
    written = write_candidate(Finding(candidate, launch_bound, facts), None)
    assert written.verdict.startswith(
        "verify: GPU idle 500.0 µs/step while the host launches 300 eager ops/step — "
        "launch-bound: 200.0 µs with the GPU idle inside launch calls and 300.0 µs of host "
        "code in the short gaps between them"
    )
    assert written.why == (
        "300 eager launches/step keep the GPU waiting: a CUDA graph or fused kernels remove it"
    )
