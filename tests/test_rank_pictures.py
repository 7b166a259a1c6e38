"""The pictures of several exports: the same step of each rank, on the aligned clock."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import corpus_trace_paths
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.plot import plot_timeline
from trace_gaps.render.bundle import BUNDLE_VIEWS, RANKS_VIEW
from trace_gaps.run.multi import analyse_exports


def _corpus(name: str) -> Path:
    found = next((p for p in corpus_trace_paths() if p.stem == name), None)
    if found is None:
        pytest.skip(f"corpus {name} absent")
    return found


def _step_start_on_wall_clock(export: Path, index: int) -> int:
    """Recounted from the export alone: the index-th decode_step's start (warm-up included),
    in ns since the epoch by the session start (no collective refinement)."""
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as connection:
        (session,) = connection.execute(
            "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME"
        ).fetchone()
        starts = [
            row[0]
            for row in connection.execute(
                "SELECT n.start FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId "
                "WHERE COALESCE(n.text, s.value) = 'decode_step' ORDER BY n.start"
            )
        ]
    return int(session + starts[index])


def test_the_ranks_picture_draws_the_same_step_of_each_rank_on_the_aligned_clock():
    # Before: rank 0's step #38 beside rank 1's #28, drawn 456 ms apart (each export picked
    # its own median, each on its own clock).
    paths = [_corpus("tp_rank0"), _corpus("tp_rank1")]
    report = analyse_exports(paths, AnalysisOptions(), timelines=BUNDLE_VIEWS).report
    ranks = {t.pid: t for t in report.timelines if t.view == RANKS_VIEW.view}
    assert set(ranks) == {2947, 2950}
    first, second = ranks[2947], ranks[2950]
    assert first.step_index == second.step_index  # both captures' 20th decode step
    drawn_skew = second.start_offset_ns - first.start_offset_ns
    recounted = _step_start_on_wall_clock(paths[1], second.step_index) - _step_start_on_wall_clock(
        paths[0], first.step_index
    )
    assert abs(drawn_skew) < first.wall_ns / 2  # the same step: they overlap
    assert abs(drawn_skew - recounted) < 1_000_000  # within 1 ms of the session clocks' say
    # The pictures of one process are the first export's: no other rank's step in them.
    assert {t.pid for t in report.timelines if t.view == "median"} == {2947}
    median, both = plot_timeline(report, "median"), plot_timeline(report, RANKS_VIEW.view)
    assert len(both.axes[0].get_yticklabels()) > len(median.axes[0].get_yticklabels())
