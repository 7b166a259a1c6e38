"""Bootstrap confidence intervals of a difference of means over steps: the diff's noise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

RESAMPLES = 2_000
CONFIDENCE_PCT = 95
SEED = 0  # fixed: the same two exports give a byte-identical diff


@dataclass(frozen=True, slots=True)
class MeanDifferenceIntervals:
    """Percentile CIs of mean(after) − mean(before): per column, and column 0 relative."""

    low: np.ndarray  # per column, in the values' unit (float)
    high: np.ndarray
    relative_low_pct: float  # column 0's change in percent of the before mean
    relative_high_pct: float


def bootstrap_mean_difference(
    before: np.ndarray, after: np.ndarray, rng: np.random.Generator
) -> MeanDifferenceIntervals | None:
    """CIs of mean(after) − mean(before) per column of two (steps × columns) matrices.

    Each resample draws every step of a side with replacement (multinomial counts), so the
    resampled means of all columns come from one matrix product. None when a side has < 2 steps.
    The before side's counts are drawn first, then the after side's, from rng.
    """
    if len(before) < 2 or len(after) < 2:
        return None
    means_before = resampled_means(before, draw_counts(len(before), rng))
    means_after = resampled_means(after, draw_counts(len(after), rng))
    return mean_difference_intervals(means_before, means_after)


def draw_counts(n: int, rng: np.random.Generator) -> np.ndarray:
    """How many times each of n steps is drawn, per resample (RESAMPLES x n, float64).

    The costly part of a diff's noise (the 1M capture's 1,702 steps: 0.13 s a side), and it
    depends only on n and rng's state: a diff's sides may draw theirs while they are
    analysed (SideMeans), one after the other from one generator, as here."""
    counts: np.ndarray = rng.multinomial(n, np.full(n, 1 / n), size=RESAMPLES).astype(np.float64)
    return counts


def resampled_means(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per resample (row) and column, the mean of the values of the steps drawn.

    The product is in float64 (BLAS; int64 has none: 4.5 s against 0.3 s at 17,000 steps and
    40 columns) and gives the same result: every product and partial sum is an integer below
    2**53 ns (104 days of summed step time), which float64 holds exactly. So each column's
    means are the same whatever other columns are in the product.
    """
    means: np.ndarray = (counts @ values.astype(np.float64)) / len(values)
    return means


def mean_difference_intervals(
    means_before: np.ndarray, means_after: np.ndarray
) -> MeanDifferenceIntervals:
    """The percentile CIs from the two sides' resampled means (column 0 also relative)."""
    tail = (100 - CONFIDENCE_PCT) / 2
    low, high = np.percentile(means_after - means_before, [tail, 100 - tail], axis=0)
    relative = 100 * (means_after[:, 0] - means_before[:, 0]) / means_before[:, 0]
    rel_low, rel_high = np.percentile(relative, [tail, 100 - tail])
    return MeanDifferenceIntervals(low, high, float(rel_low), float(rel_high))


@dataclass(frozen=True, slots=True)
class SideMeans:
    """One side's resampled means, drawn already from the diff's generator (default_rng(SEED)):
    the before side's counts first, then the after side's, as bootstrap_mean_difference
    draws them (a diff's sides draw theirs while they are analysed: side_runner.py)."""

    before_steps: int  # the before side's analysed steps, whose counts were drawn first
    steps: int  # this side's analysed steps
    columns: pd.Index  # its bucket table's (stage, bucket) columns, in order
    means: np.ndarray  # RESAMPLES x (1 + len(columns)): wall time, then each column

    def expanded(self, columns: pd.Index) -> np.ndarray | None:
        """The means over wall time and the given columns (zero where this side has none:
        the means of a column of zeros); None when the columns lack one of this side's
        (the means were drawn for another table)."""
        at = columns.get_indexer(self.columns)
        if (at < 0).any():
            return None
        out = np.zeros((len(self.means), 1 + len(columns)))
        out[:, 0] = self.means[:, 0]
        out[:, 1 + at] = self.means[:, 1:]
        return out


def means_drawn(
    sides: tuple[SideMeans | None, SideMeans | None],
    before_steps: int,
    after_steps: int,
    columns: pd.Index,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides' resampled means over wall time and columns, when they are the ones
    bootstrap_mean_difference would draw first for these step counts (the after side's
    counts drawn after the before side's); else None."""
    before, after = sides
    if before is None or after is None:
        return None
    if not before.steps == before.before_steps == after.before_steps == before_steps:
        return None
    if after.steps != after_steps:
        return None
    expanded = before.expanded(columns), after.expanded(columns)
    return None if expanded[0] is None or expanded[1] is None else (expanded[0], expanded[1])
