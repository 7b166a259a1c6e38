"""Noise between runs: a diff of repeated captures per side uses the spread of the runs.

Two captures of the same unchanged code differ by far more than the steps of one capture
do (measured on three repeats of one eager decode on an H200: mean steps of 20.46, 14.85
and 19.65 ms; docs/diff.md). A side given as several repeated captures (`diff --repeats`)
is summarised by each capture's mean step time, and the change of the mean of those means
gets a Student t interval over the runs (Welch's, or the pooled spread where one side has a
single run): the run-to-run noise a CI gate has to survive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trace_gaps.diff.changes import NsInterval, PctInterval

# Two-sided 95 % Student t quantiles by degrees of freedom (1-30); above 30, 1.96 + 2.4/df.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: float) -> float:
    """The 97.5 % quantile of Student's t with df degrees of freedom (df >= 1)."""
    if df >= len(_T975):
        return 1.96 + 2.4 / df
    low = max(int(math.floor(df)), 1)
    high = min(low + 1, len(_T975))
    weight = df - low
    return _T975[low - 1] * (1 - weight) + _T975[high - 1] * weight


@dataclass(frozen=True, slots=True)
class RunSpread:
    """The step time of repeated captures on each side, and its change with run noise."""

    before_run_ns: list[int]  # each before capture's mean step wall time (its slowest process)
    after_run_ns: list[int]
    change_ns: int  # mean of the after runs minus mean of the before runs
    change_pct: float | None
    ci_ns: NsInterval | None  # 95 % t interval over the runs; None: fewer than 3 runs in all
    ci_pct: PctInterval | None
    is_beyond_noise: bool | None


def run_spread(before_ns: list[int], after_ns: list[int], threshold_ns: float) -> RunSpread:
    """The change of the runs' mean step time, with a t interval over the runs; beyond
    noise when the interval excludes 0 and the change is at least threshold_ns."""
    n1, n2 = len(before_ns), len(after_ns)
    m1, m2 = sum(before_ns) / n1, sum(after_ns) / n2
    change = m2 - m1
    pct = round(100 * change / m1, 2) if m1 else None
    half = _half_width(before_ns, after_ns)
    if half is None:
        return RunSpread(before_ns, after_ns, int(round(change)), pct, None, None, None)
    ci = NsInterval(int(round(change - half)), int(round(change + half)))
    ci_pct = (
        PctInterval(round(100 * ci.low_ns / m1, 2), round(100 * ci.high_ns / m1, 2)) if m1 else None
    )
    beyond = ci.excludes_zero and abs(change) >= threshold_ns
    return RunSpread(before_ns, after_ns, int(round(change)), pct, ci, ci_pct, bool(beyond))


def _half_width(before: list[int], after: list[int]) -> float | None:
    n1, n2 = len(before), len(after)
    if n1 + n2 < 3:
        return None
    v1, v2 = _variance(before), _variance(after)
    if n1 > 1 and n2 > 1:
        se2 = v1 / n1 + v2 / n2
        if se2 == 0:
            return 0.0
        df = se2**2 / ((v1 / n1) ** 2 / (n1 - 1) + (v2 / n2) ** 2 / (n2 - 1))
        return t975(max(df, 1.0)) * math.sqrt(se2)
    # One side has a single run: its spread is taken to be the other side's.
    spread = v1 if n1 > 1 else v2
    df = (n1 if n1 > 1 else n2) - 1
    return t975(df) * math.sqrt(spread * (1 / n1 + 1 / n2))


def _variance(values: list[int]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def captured_together(windows: list[tuple[int, int]]) -> bool:
    """Whether captures ran at the same time (ranks of one run), from (start, length) each:
    every capture overlaps the first one's window. Repeats run one after another."""
    first_start, first_length = windows[0]
    return all(
        start < first_start + first_length and first_start < start + length
        for start, length in windows[1:]
    )
