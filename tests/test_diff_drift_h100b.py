"""Issue 42's 5 % GPU regression, on real captures (docs/diff.md, "Measured").

sample_traces/drift/h100b_*: one synchronous decode (forward replayed from a CUDA graph)
captured on one H100 in one device call (capture_42_5pct.sh), interleaved: unchanged three
times (h100b_same_1..3: 1.88 to 2.31 ms/step) and with the MLP twice as wide three times
(h100b_mlp2x_1..3, --d-ff 8192: +95 µs/step of GPU time, 4.1 to 5.1 % of the step), while
the host ran up to twice as slow from one capture to another.
"""

from __future__ import annotations

import itertools

import numpy as np

from tests.test_diff_drift import H100B_GPU, H100B_SAME, gpu_busy_ns, one_a_side, run
from trace_gaps.diff.build import is_slower_than
from trace_gaps.diff.runs import compare_runs


def added_gpu_ns() -> float:
    return float(
        np.mean([gpu_busy_ns(n) for n in H100B_GPU]) - np.mean([gpu_busy_ns(n) for n in H100B_SAME])
    )


def test_unchanged_pairs_name_no_code_change_though_the_host_ran_twice_as_slow() -> None:
    step_alone, host_ratios = 0, []
    for before, after in itertools.permutations(H100B_SAME, 2):
        diff = one_a_side(before, after)
        (process,) = diff.processes
        drift = process.drift
        assert drift is not None
        assert drift.code.is_beyond_noise is False, (before, after)
        assert abs(drift.code.change_pct or 0.0) < 1.0, (before, after)  # -0.7 to +0.3
        assert not is_slower_than(diff, 3)
        assert abs(drift.gpu.time_change_pct or 0.0) < 1, (before, after)  # within 0.4 %
        assert drift.host.time_change_pct is not None
        host_ratios.append(1 + drift.host.time_change_pct / 100)
        low = process.wall.ci_pct.low_pct if process.wall.ci_pct else 0.0
        step_alone += low > 3
    # The host took x0.52 to x1.92 as long; on the step time alone 3 of the 6 pairs trip
    # (h100b_same_1 -> _2, h100b_same_3 -> _1 and -> _2: up to +23.1 %).
    assert min(host_ratios) < 0.6 and max(host_ratios) > 1.8
    assert step_alone == 3


def test_the_wider_mlp_is_the_codes_in_every_pair_and_trips_3_pct_on_the_shortest_step() -> None:
    added = added_gpu_ns()
    assert 85e3 < added < 105e3  # +95 µs/step of GPU time, whatever the host
    tripped: set[tuple[str, str]] = set()
    for before in H100B_SAME:
        for after in H100B_GPU:
            diff = one_a_side(before, after)
            (process,) = diff.processes
            assert process.drift is not None
            # The GPU read at one speed (x1.00 on 335 ops a step by place) though the host
            # ran x0.71 to x1.71 as long: the MLP's ops are the code's.
            assert abs(process.drift.gpu.time_change_pct or 0.0) < 1, (before, after)
            # 0.98 to 1.17 of what the GPU added (+92.5 to +110.5 µs), beyond noise in all 9.
            assert 0.9 * added < process.drift.code.change_ns < 1.25 * added, (before, after)
            assert process.drift.code.is_beyond_noise is True, (before, after)
            if is_slower_than(diff, 3):
                tripped.add((before, after))
    # One a side the 3 % gate trips only where the before is h100b_same_3, the shortest step
    # (1.875 ms: the same 95 µs is +5.0 to +5.4 %, lower bounds +3.2 to +3.5 %); the other
    # six pairs' lower bounds are +1.6 to +2.8 %.
    assert tripped == {("h100b_same_3", after) for after in H100B_GPU}


def test_three_a_side_the_3_pct_gate_trips_on_the_codes_part_not_on_the_step_time() -> None:
    added = added_gpu_ns()
    diff = compare_runs(
        [run(n) for n in H100B_SAME], [run(n) for n in H100B_GPU], (H100B_SAME[0], H100B_GPU[0])
    )
    assert diff.runs is not None and diff.code_runs is not None
    # The step time alone over the runs, +6.6 % (95 % CI -16.6 to +29.8 %), cannot gate.
    assert diff.runs.is_beyond_noise is False
    assert diff.code_runs.is_beyond_noise is True
    assert 0.95 * added < diff.code_runs.change_ns < 1.15 * added  # +99.4 µs, 1.05
    # +4.6 %, 95 % CI +4.0 to +5.1 %: issue 42's 3 % gate trips, a 4.5 % one does not.
    assert is_slower_than(diff, 3) and is_slower_than(diff, 3.5)
    assert not is_slower_than(diff, 4.5)
