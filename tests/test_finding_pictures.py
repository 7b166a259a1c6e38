"""The default timeline draws the step where the top finding is largest (a collective wait, a
sync or long host gaps); --median draws the median step, as before."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.conftest import shipped_trace
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest, choose_request
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.plot import plot_timeline
from trace_gaps.records.report import ProcessReport, Report
from trace_gaps.report.timeline import build_timelines
from trace_gaps.run.one import analyse_export, load_and_report
from trace_gaps.units import format_duration

FINDING, MEDIAN = TimelineRequest(StepPick.FINDING), TimelineRequest(StepPick.MEDIAN)


def _largest(process: ProcessReport, bucket: str, cause: str) -> tuple[int, int]:
    """(step_id, ns) of the analysed step with the most ledger time in (bucket, cause),
    from the report's own step ledger."""
    analysed = {row.step_id for row in process.step_rows if not row.is_warmup}
    per_step: dict[int, int] = defaultdict(int)
    for entry in process.step_ledger:
        if entry.step_id in analysed and (entry.bucket, entry.cause) == (bucket, cause):
            per_step[entry.step_id] += entry.duration_ns
    step_id = min(per_step, key=lambda s: (-per_step[s], s))
    return step_id, per_step[step_id]


@pytest.fixture(scope="module")
def two_ranks() -> Report:
    path = shipped_trace("spec_two_ranks")
    return load_and_report(path, AnalysisOptions(), timelines=(FINDING, MEDIAN))[1]


def test_a_long_host_gap_finding_draws_the_step_with_the_most_host_idle_time(two_ranks):
    # pid 1136's top candidate: long host gaps in accept_sample_commit (it waits in gloo for
    # the slower rank 1137).
    process = two_ranks.processes[0]
    assert process.candidates[0].kind == "long_host_gaps"
    [finding] = [t for t in two_ranks.timelines if t.view == "finding"]
    step_id, ns = _largest(process, "idle", "host")
    assert (finding.pid, finding.step_id, finding.finding, finding.finding_ns) == (
        process.pid,
        step_id,
        "host",
        ns,
    )


def test_a_sync_finding_of_a_real_capture_draws_the_step_with_the_most_sync_idle_time():
    # The worker-thread serving loop (graph forward): its top candidate is the sample stage's
    # sync. (tp_rank0 alone, used before, now has no candidate priced: it waits for tp_rank1.)
    path = shipped_trace("serving_worker_graph")
    report = load_and_report(path, AnalysisOptions(), timelines=(FINDING,))[1]
    process = report.processes[0]
    assert process.candidates[0].kind == "sync_bound"
    [finding] = report.timelines
    assert (finding.step_id, finding.finding_ns) == _largest(process, "idle", "sync")
    assert finding.finding == "sync"


def test_the_median_view_keeps_the_step_nearest_the_median_wall(two_ranks):
    process = two_ranks.processes[0]
    [median] = [t for t in two_ranks.timelines if t.view == "median"]
    walls = [r for r in process.step_rows if not r.is_warmup and r.thread == median.thread]
    walls.sort(key=lambda r: r.step_index)
    p50 = sorted(r.wall_ns for r in walls)[len(walls) // 2 - 1 : len(walls) // 2 + 1]
    middle = sum(p50) / 2
    nearest = min(walls, key=lambda r: abs(r.wall_ns - middle))
    assert (median.step_id, median.finding) == (nearest.step_id, "")


def test_a_sync_finding_draws_the_step_with_the_most_sync_idle_time():
    # spec_sync's top candidate is launch-bound; a sync-bound one is given, as the report
    # would give it, to see which step a sync finding draws on a real capture.
    path = shipped_trace("spec_sync")
    trace, analysis = analyse_export(path, AnalysisOptions(), timelines=(FINDING,))
    report = load_and_report(path, AnalysisOptions())[1]
    process = report.processes[0]
    [timeline] = build_timelines(
        analysis, trace_start_ns=analysis.trace_start_ns, top_kinds={process.pid: "sync_bound"}
    )
    assert (timeline.step_id, timeline.finding_ns) == _largest(process, "idle", "sync")
    assert timeline.finding == "sync"


def test_no_picture_of_a_finding_a_step_does_not_show():
    # spec_sync's top candidate is launch-bound: the finding view draws nothing, so the
    # default picture is the median step's.
    report = load_and_report(shipped_trace("spec_sync"), AnalysisOptions(), timelines=(FINDING,))[1]
    assert report.processes[0].candidates[0].kind == "launch_bound"
    assert report.timelines == []


def test_the_default_asks_for_the_finding_and_median_for_the_median():
    assert choose_request() == FINDING
    assert choose_request(median=True) == MEDIAN


def test_the_finding_title_says_which_step_and_why(two_ranks):
    finding = next(t for t in two_ranks.timelines if t.view == "finding")
    title = plot_timeline(two_ranks).axes[0].get_title(loc="left")
    assert (
        f"decode_step #{finding.step_index}, the step where GPU idle in host code is largest "
        f"({format_duration(finding.finding_ns)})"
    ) in title
    median = plot_timeline(two_ranks, "median").axes[0].get_title(loc="left")
    assert "median step: decode_step #" in median and "largest" not in median
