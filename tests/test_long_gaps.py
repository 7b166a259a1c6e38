"""Long host gaps: split from the short gaps between launches, explained, grouped per pattern."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.test_report import report_of
from trace_gaps.analysis.long_gaps import (
    LONG_GAP_MIN_NS,
    spacing_thresholds,
)

STEP_NS = 10_000_000


def launches(builder, start_ns, count, *, every_ns, stage_pid=100):  # type: ignore[no-untyped-def]
    """count launch calls of 1 µs, every_ns apart from start_ns, each with a 1 µs kernel."""
    for k in range(count):
        t = start_ns + k * every_ns
        builder.launch("k", t, t + 1_000, t + 1_500, t + 2_500, pid=stage_pid, tid=stage_pid)
    return start_ns + count * every_ns


def test_a_long_gap_ending_in_a_library_load_is_named_with_its_calls_and_os_calls(
    export_builder,
):
    #   verify: 40 launches 10 µs apart, cudaGetDeviceProperties, 5 ms of host code reading a
    #   file (fopen, fread), cuLibraryLoadData, 40 more launches; every step.
    #   thread  [l][l]...[l][getDeviceProperties] ....... 5 ms ....... [cuLibraryLoadData][l]...
    #   osrt                                          [fopen] [fread]
    b = export_builder()
    for i in range(4):
        o = i * STEP_NS
        b.range("decode_step", o, o + 6_000_000).range("verify", o, o + 6_000_000)
        t = launches(b, o + 1_000, 40, every_ns=10_000)
        b.call("cudaGetDeviceProperties", t, t + 2_000)
        b.os_call("fopen", t + 100_000, t + 200_000).os_call("fread", t + 300_000, t + 2_000_000)
        b.call("cuLibraryLoadData", t + 5_002_000, t + 5_010_000)
        launches(b, t + 5_020_000, 40, every_ns=10_000)
    process = report_of(b.write(), skip=0).processes[0]
    [finding] = process.long_host_gaps
    assert (finding.stage, finding.call_before, finding.call_after) == (
        "verify",
        "cudaGetDeviceProperties",
        "cuLibraryLoadData",
    )
    assert finding.os_calls == ["fopen", "fread"]
    assert finding.nvtx_path == ["decode_step", "verify"]
    assert finding.gaps_per_step == 1
    assert finding.typical_ns == 5_000_000
    assert finding.ends_in_code_load
    # The GPU is idle through the whole gap (the last kernel ended before it began).
    assert finding.idle_ns_per_step == 5_000_000
    top = process.candidates[0]
    assert (top.stage, top.bucket, top.kind) == ("verify", "idle", "long_host_gaps")
    assert "cuLibraryLoadData" in top.verdict and "launch-bound" not in top.verdict
    assert top.lever_ns_per_step == 5_000_000
    assert "cuLibraryLoadData" in process.headline
    verify = next(s for s in process.stages if s.name == "verify")
    assert verify.launch_spacing_ns == 9_000  # 10 µs apart, each call 1 µs long
    assert verify.long_gap_threshold_ns == LONG_GAP_MIN_NS
    assert (verify.long_gaps_per_step, verify.long_gap_idle_ns_per_step) == (1, 5_000_000)


def test_short_gaps_between_launches_are_launch_bound_and_no_long_gap(export_builder):
    #   forward: 300 launches 20 µs apart (19 µs of host code between calls), GPU idle between.
    b = export_builder()
    for i in range(4):
        o = i * STEP_NS
        b.range("decode_step", o, o + 6_000_000).range("forward", o, o + 6_000_000)
        launches(b, o + 1_000, 300, every_ns=20_000)
    process = report_of(b.write(), skip=0).processes[0]
    assert process.long_host_gaps == []
    top = next(c for c in process.candidates if (c.stage, c.bucket) == ("forward", "idle"))
    assert top.kind == "launch_bound"
    assert "launch-bound" in top.verdict and "short gaps" in top.verdict
    assert top.evidence.host_ns_per_launch is not None
    forward = next(s for s in process.stages if s.name == "forward")
    assert forward.even_gap_fraction == 1.0
    assert "100 % of it in gaps within 4x the median gap" in top.verdict


@pytest.mark.parametrize("every_us", [20, 40, 200])
def test_evenly_spread_host_time_is_dispatch_whatever_the_cost_per_launch(export_builder, every_us):
    #   prepare: 25 launches every_us apart: the same shape at any cost per launch (no cliff).
    b = export_builder()
    for i in range(4):
        o = i * STEP_NS
        end = o + 3_000 + 25 * every_us * 1_000
        b.range("decode_step", o, end).range("prepare", o, end)
        launches(b, o + 1_000, 25, every_ns=every_us * 1_000)
    process = report_of(b.write(), skip=0).processes[0]
    prepare = next(c for c in process.candidates if (c.stage, c.bucket) == ("prepare", "idle"))
    assert prepare.kind == "launch_bound"
    assert "per-op dispatch" in prepare.verdict


def test_host_time_concentrated_in_a_few_gaps_is_host_bound_not_launch_bound(export_builder):
    #   prepare: 30 launches 10 µs apart, then 5 gaps of 600 µs (under the 1 ms long-gap floor)
    #   each followed by a launch: 3 ms of 3.3 ms of short-gap host time is in 5 gaps.
    b = export_builder()
    for i in range(4):
        o = i * STEP_NS
        end = o + 1_000 + 300_000 + 5 * 610_000 + 2_000
        b.range("decode_step", o, end).range("prepare", o, end)
        t = launches(b, o + 1_000, 30, every_ns=10_000)
        for _ in range(5):
            t = launches(b, t + 600_000, 1, every_ns=10_000)
    process = report_of(b.write(), skip=0).processes[0]
    assert process.long_host_gaps == []
    prepare = next(c for c in process.candidates if (c.stage, c.bucket) == ("prepare", "idle"))
    assert prepare.kind == "host_bound"
    assert "launch-bound" not in prepare.verdict
    assert "concentrated in a few gaps" in prepare.verdict


def test_a_long_gap_in_a_stage_with_slow_launches_needs_ten_times_their_spacing(export_builder):
    #   stage: launches 500 µs apart, then one 3 ms gap: 3 ms < 10 x 499 µs, so not long.
    b = export_builder()
    for i in range(4):
        o = i * STEP_NS
        b.range("decode_step", o, o + 9_000_000).range("slow", o, o + 9_000_000)
        t = launches(b, o + 1_000, 10, every_ns=500_000)
        launches(b, t + 3_000_000, 2, every_ns=500_000)
    process = report_of(b.write(), skip=0).processes[0]
    slow = next(s for s in process.stages if s.name == "slow")
    assert slow.long_gap_threshold_ns == 10 * slow.launch_spacing_ns > 3_000_000  # type: ignore[operator]
    assert process.long_host_gaps == []


def test_the_spacing_median_is_counted_in_whole_microseconds():
    spacing = pd.DataFrame(
        {"pid": [1, 1, 1], "stage": [3, 3, 3], "gap_us": [5, 7, 900], "launches": [2, 1, 2]}
    )
    [row] = spacing_thresholds(spacing).to_dict("records")
    # 5 launches: 5, 5, 7, 900, 900 µs; the median is 7 µs.
    assert (row["spacing_ns"], row["threshold_ns"]) == (7_000, LONG_GAP_MIN_NS)
