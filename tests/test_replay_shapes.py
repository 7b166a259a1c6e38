"""The replay's own error by step shape (analysis/replay/shapes.py) against the real pairs it was
measured on (benchmarks/bench_whatif.py): each pair's "before" has the shape the table counts
it under, its prediction is within the shape's bounds, and in the thorough profile the table
holds exactly what the pairs give (no bound looser than its worst pair, no pair uncounted)."""

from __future__ import annotations

import pytest

from benchmarks import bench_whatif
from tests.conftest import THOROUGH
from trace_gaps.analysis.replay.shapes import REPLAY_ERRORS, ShapeError, StepShape, step_shape
from trace_gaps.records.report import Pace
from trace_gaps.report.build import build_report
from trace_gaps.report.descriptions import replay_lines

# One quick pair of each shape the pairs cover, in the default profile; every pair, thorough.
QUICK = ("whatif_plain_detok", "runahead_eager", "serving_worker_eager", "gp_graph_x2")
PAIRS = [pair for pair in bench_whatif.PAIRS if THOROUGH or pair[0] in QUICK]


@pytest.fixture(scope="module")
def results() -> dict[str, bench_whatif.PairResult]:
    get = bench_whatif.analysed_once()
    return {
        before: bench_whatif.evaluate(before, levers, after, unchanged, get)
        for before, levers, after, unchanged, _ in PAIRS
    }


@pytest.mark.parametrize("pair", PAIRS, ids=lambda pair: pair[0])
def test_each_pair_is_within_its_shapes_bounds(
    pair: tuple[str, ...], results: dict[str, bench_whatif.PairResult]
) -> None:
    result = results[pair[0]]
    declared = REPLAY_ERRORS[result.shape]
    assert declared.covered, f"{pair[0]} is a {result.shape} pair the table does not count"
    assert abs(result.at_speed_error_pct) <= declared.within_pct + 0.05
    assert abs(result.error_pct) <= declared.drifted_pct + 0.05


@pytest.mark.skipif(not THOROUGH, reason="needs every pair: TRACE_GAPS_THOROUGH=1 pytest")
def test_the_table_is_what_the_pairs_give(
    results: dict[str, bench_whatif.PairResult],
) -> None:
    for shape in StepShape:
        found = [r for r in results.values() if r.shape == shape]
        declared = REPLAY_ERRORS[shape]
        assert declared.pairs == len(found), shape
        if found:
            assert declared.within_pct == round(max(abs(r.at_speed_error_pct) for r in found), 1)
            assert declared.drifted_pct == round(max(abs(r.error_pct) for r in found), 1)


def test_shape_precedence() -> None:
    host = Pace("host", 2, 0, 1, {})
    gpu = Pace("gpu", 1, 1, 2, {})
    assert step_shape(None, ranks=1, worker_thread=False) == StepShape.SYNCHRONOUS
    assert step_shape(host, ranks=1, worker_thread=False) == StepShape.HOST_PACED
    assert step_shape(gpu, ranks=1, worker_thread=False) == StepShape.RUN_AHEAD
    assert step_shape(gpu, ranks=1, worker_thread=True) == StepShape.WORKER_THREAD
    assert step_shape(None, ranks=2, worker_thread=True) == StepShape.RANKS


def test_a_shape_no_real_pair_has_checked_is_ranked_by_time_explained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every shape has real pairs today; a new one would start with none. Its candidates are
    then ranked by the time they explain, the headline names the biggest lever, and the replay
    line says why (on a real GPU-paced run-ahead capture, its shape's pairs taken away)."""
    unchecked = ShapeError(StepShape.RUN_AHEAD, pairs=0, within_pct=0.0, drifted_pct=0.0)
    monkeypatch.setitem(REPLAY_ERRORS, StepShape.RUN_AHEAD, unchecked)
    trace, analysis = bench_whatif.analysed_once()("gp_graph")
    (process,) = build_report(trace, analysis).processes
    assert process.replay is not None and process.replay.shape == "run_ahead"
    assert process.replay.real_pairs == 0
    assert all(c.saving_ns is None for c in process.candidates)
    assert "biggest lever: forward GPU work" in process.headline
    assert "No real before/after pair has checked the replay" in "\n".join(
        replay_lines(process)
    )
    monkeypatch.undo()
    (checked,) = build_report(trace, analysis).processes
    assert checked.replay is not None and checked.replay.real_pairs == 3
    assert "biggest saving: forward GPU work" in checked.headline
