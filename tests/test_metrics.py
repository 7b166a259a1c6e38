"""The declared per-window metrics: each computed on every window and merged by its rule."""

from __future__ import annotations

import pytest

from trace_gaps.analysis.engine.metric import Metric, declare, merge_parts
from trace_gaps.analysis.engine.metrics import FINDING_STEPS, LEDGER, METRICS, OP_CENSUS
from trace_gaps.analysis.engine.picks import StepPick, TimelineRequest
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.nsys.load import load_trace


def decode_loop(builder, steps: int):
    """steps decode steps of 10 µs: [draft][verify], one kernel launched in each stage."""
    for i in range(steps):
        o = i * 10_000
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
        builder.launch("k_draft", o + 100, o + 600, o + 1_000, o + 3_000)
        builder.launch("k_verify", o + 4_100, o + 4_600, o + 5_000, o + 9_000)
    return builder.write()


def test_every_declared_metric_is_merged_into_the_analysis(export_builder):
    trace = load_trace(decode_loop(export_builder(), 6))
    analysis = analyse_trace(trace, AnalysisOptions(skip=0), window_rows=4, chunk_rows=3)
    assert analysis.windows > 1
    assert set(analysis.metrics.by_name) == {metric.name for metric in METRICS}
    # Each op is counted once, in the window that owns its start.
    census = analysis.metrics[OP_CENSUS]
    assert int(census["ops"].sum()) == 12
    # Per step, the ledger adds up to the step's wall time (10 µs).
    per_step = analysis.metrics[LEDGER].groupby("step_id")["duration_ns"].sum()
    assert per_step.tolist() == [10_000] * 6


def test_a_metric_is_declared_once():
    with pytest.raises(ValueError, match="ledger is declared twice"):
        declare("ledger", lambda frames: frames.ledger, lambda parts: parts)


def test_parts_merge_by_the_metric_s_rule_and_are_found_by_the_metric():
    steps_seen = Metric("steps_seen", lambda frames: len(frames.steps), sum)
    merged = merge_parts((steps_seen, LEDGER), {"steps_seen": [3, 3], "ledger": []})
    assert merged[steps_seen] == 6
    assert list(merged[LEDGER].columns) == ["step_id", "stage", "bucket", "cause", "duration_ns"]


def test_the_step_where_a_finding_is_largest_is_the_same_however_the_windows_cut(export_builder):
    # Step 4's verify kernel is launched 2 µs later than the others': the most host idle time.
    builder = export_builder()
    for i in range(6):
        o, late = i * 10_000, 2_000 if i == 4 else 0
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
        builder.launch("k_draft", o + 100, o + 600, o + 1_000, o + 3_000)
        builder.launch("k_verify", o + 4_100 + late, o + 4_600 + late, o + 5_000 + late, o + 9_500)
    trace = load_trace(builder.write())
    finding = (TimelineRequest(StepPick.FINDING),)
    found = [
        analyse_trace(
            trace, AnalysisOptions(skip=0), timelines=finding, window_rows=rows, chunk_rows=3
        ).metrics[FINDING_STEPS]["host"]
        for rows in (None, 4)
    ]
    whole, windowed = found
    assert (whole.step_id, whole.duration_ns) == (windowed.step_id, windowed.duration_ns)
    assert whole.step_id == 4 and len(windowed.detail.ops) == len(whole.detail.ops) == 2
