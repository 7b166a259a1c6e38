"""Run-to-run noise for diffs of repeated captures (repeats.py)."""

from __future__ import annotations

import pytest

from trace_gaps.diff.repeats import run_spread, t975

# Mean step times of three captures in a row of one unchanged eager decode on an H200
# (sample_traces/corpus/repeat_eager_{1,2,3}: analyze's default run).
REPEATS = [20_464_398, 14_852_097, 19_647_905]


def test_t_quantiles_match_the_table_and_interpolate():
    assert t975(1) == pytest.approx(12.706)
    assert t975(10) == pytest.approx(2.228)
    assert t975(2.5) == pytest.approx((4.303 + 3.182) / 2)
    assert t975(120) == pytest.approx(1.98)


def test_unchanged_code_is_never_beyond_the_run_to_run_noise():
    # Every split of the three repeats into a before and an after side.
    for before, after in (
        (REPEATS[:2], REPEATS[2:]),
        (REPEATS[:1], REPEATS[1:]),
        ([REPEATS[0], REPEATS[2]], [REPEATS[1]]),
    ):
        spread = run_spread(before, after, threshold_ns=0.01 * before[0])
        assert spread.is_beyond_noise is False
        assert spread.ci_ns is not None and spread.ci_ns.low_ns < 0 < spread.ci_ns.high_ns


def test_a_change_larger_than_the_spread_between_runs_is_beyond_noise():
    before = [10_000_000, 10_100_000, 9_950_000]
    after = [12_000_000, 12_050_000, 11_980_000]
    spread = run_spread(before, after, threshold_ns=100_000)
    assert spread.is_beyond_noise is True
    assert spread.change_pct == pytest.approx(19.9, abs=0.1)


def test_two_single_runs_have_no_noise_estimate():
    spread = run_spread([10_000_000], [12_000_000], threshold_ns=100_000)
    assert spread.ci_ns is None and spread.is_beyond_noise is None


def test_ranks_of_one_run_are_captured_together_and_repeats_are_not():
    from tests.conftest import corpus_trace_paths
    from trace_gaps.diff.repeats import captured_together
    from trace_gaps.nsys.head import capture_window

    corpus = {p.stem: p for p in corpus_trace_paths()}
    if not {"tp_rank0", "tp_rank1", "repeat_eager_1"} <= set(corpus):
        pytest.skip("the corpus is absent")
    ranks = [capture_window(corpus[f"tp_rank{i}"]) for i in (0, 1)]
    repeats = [capture_window(corpus[f"repeat_eager_{i}"]) for i in (1, 2, 3)]
    assert captured_together([w for w in ranks if w])
    assert not captured_together([w for w in repeats if w])
