"""The side runner's relay (side_runner.py): a diff's bootstrap draws, made in its two sides
while they are analysed.

A diff's noise (diff/bootstrap.py) resamples each side's analysed steps: the
multinomial counts cost 0.13 s a side on the 1M-kernel capture (1,702 steps), and diff's
own process drew them after both sides were done, on one core, the other idle. Every
number drawn depends only on the seed, on each side's count of steps and on the order
(before, then after). So the before side draws its counts as soon as its steps are cut
and hands the generator's state on to the after side (a pipe made in diff's process, which
a forked side inherits), which draws its own when its analysis is done; each side returns
its resampled means (SideMeans), which the statistics use where they are the ones they
would have drawn themselves (one process a side, the same step counts), else draw as
before.

Only where each side has one process with steps: with several, the pairs' draws alternate
between the sides. The relay's message is the before side's step count with the state, so
that the after side's draws are checked against the step count diff pairs them with.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.analysis.steps import IS_WARMUP
from trace_gaps.diff.bootstrap import SEED, SideMeans, draw_counts, resampled_means
from trace_gaps.model import PID


class DrawRelay:
    """Carries the generator's state from the before side to the after side."""

    def __init__(self) -> None:
        self._receive, self._send = multiprocessing.Pipe(duplex=False)

    def hand_on(self, before_steps: int, state: Mapping[str, Any]) -> None:
        self._send.send((before_steps, state))

    def take(self) -> tuple[int, Mapping[str, Any]] | None:
        """What the before side handed on, if it has (never waits)."""
        if not self._receive.poll():
            return None
        before_steps, state = self._receive.recv()
        return int(before_steps), state


class BeforeSideDraws:
    """The before side's counts, drawn when its steps are cut (pass `on_steps` to the
    analysis), and handed on."""

    def __init__(self, relay: DrawRelay) -> None:
        self.relay = relay
        self.counts: np.ndarray | None = None

    def on_steps(self, steps: pd.DataFrame) -> None:
        if self.counts is not None:
            return  # called again when the export is analysed whole after all
        n = _only_process_steps(steps)
        if n is None or n < 2:
            return
        rng = np.random.default_rng(SEED)
        self.counts = draw_counts(n, rng)
        self.relay.hand_on(n, rng.bit_generator.state)

    def means(self, walls: np.ndarray, table: pd.DataFrame) -> SideMeans | None:
        """The side's means from its analysed steps' walls and bucket table."""
        if self.counts is None or self.counts.shape[1] != len(walls):
            return None
        return _side_means(len(walls), walls, table, self.counts)


def after_side_means(relay: DrawRelay, walls: np.ndarray, table: pd.DataFrame) -> SideMeans | None:
    """The after side's means, drawn from the state the before side handed on (None when
    it has not, or this side has fewer than 2 steps)."""
    handed = relay.take()
    if handed is None or len(walls) < 2:
        return None
    before_steps, state = handed
    rng = np.random.default_rng(SEED)
    rng.bit_generator.state = state
    return _side_means(before_steps, walls, table, draw_counts(len(walls), rng))


def _only_process_steps(steps: pd.DataFrame) -> int | None:
    """The analysed steps of the only process with steps (None: several processes)."""
    if steps[PID].nunique() != 1:
        return None
    return int((~steps[IS_WARMUP].to_numpy(dtype=bool)).sum())


def _side_means(
    before_steps: int, walls: np.ndarray, table: pd.DataFrame, counts: np.ndarray
) -> SideMeans:
    values = np.column_stack([walls, table.to_numpy()])
    return SideMeans(before_steps, len(walls), table.columns, resampled_means(values, counts))
