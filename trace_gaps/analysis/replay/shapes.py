"""The replay's own error, by the shape of the step it replays (docs/what-if.md, "How far to
trust a prediction").

A prediction is a replay of the measured steps with levers pulled; how far it can be trusted
depends on how the loop runs, and was measured on real before/after pairs, each captured back
to back on one machine (benchmarks/bench_whatif.py prints them; tests/test_replay_shapes.py
recomputes them). A shape that no real pair has checked is not trusted: its candidates are
ranked by the time they explain, and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.replay.joint import JointRun
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.whatif import check_replay
from trace_gaps.records.report import Pace
from trace_gaps.records.whatif import ReplayCheck


class StepShape(StrEnum):
    """How a loop's step runs, as far as the replay's accuracy goes."""

    SYNCHRONOUS = "synchronous"  # the host waits for its own step's GPU work
    RUN_AHEAD = "run_ahead"  # the host runs ahead of the GPU, and the GPU sets the pace
    HOST_PACED = "host_paced"  # the host runs ahead of the GPU, and the host sets the pace
    WORKER_THREAD = "worker_thread"  # another thread launches, under ranges of its own
    RANKS = "ranks"  # several ranks in lockstep, replayed jointly


@dataclass(frozen=True, slots=True)
class ShapeError:
    """How far predictions on one shape of step were from real "after" captures."""

    shape: StepShape
    pairs: int  # how many real before/after pairs measured it
    # the largest |predicted − measured| / measured over those pairs, %, with the prediction
    # made at the after's host speed (the error of the model, not of the host's drift)
    within_pct: float
    # the same without that correction: what a user sees when the host's speed moves too
    drifted_pct: float

    @property
    def covered(self) -> bool:
        """Whether a real pair has checked the replay on this shape."""
        return self.pairs > 0

    def checked(self, models: list[StepModel]) -> ReplayCheck:
        """The unchanged replay of these steps against their measured time, with this shape's
        error on real pairs."""
        return replace(
            check_replay(models),
            shape=self.shape.value,
            real_pairs=self.pairs,
            within_pct=self.within_pct,
            drifted_pct=self.drifted_pct,
        )


# Measured by benchmarks/bench_whatif.py on the pairs it lists (tests/test_replay_shapes.py
# checks every pair against its shape's bound, and that no bound is looser than its pairs).
REPLAY_ERRORS: dict[StepShape, ShapeError] = {
    shape.shape: shape
    for shape in (
        ShapeError(StepShape.SYNCHRONOUS, pairs=8, within_pct=2.0, drifted_pct=39.8),
        ShapeError(StepShape.RUN_AHEAD, pairs=3, within_pct=0.9, drifted_pct=0.9),
        ShapeError(StepShape.HOST_PACED, pairs=4, within_pct=0.5, drifted_pct=41.5),
        ShapeError(StepShape.WORKER_THREAD, pairs=1, within_pct=2.3, drifted_pct=7.9),
        ShapeError(StepShape.RANKS, pairs=1, within_pct=6.7, drifted_pct=11.7),
    )
}


def step_shape(pace: Pace | None, *, ranks: int, worker_thread: bool) -> StepShape:
    """The shape of a process's steps: ranks replayed jointly first, then a launching worker
    thread, then whether its host runs ahead (whatif.pace_of) and what sets the pace."""
    if ranks > 1:
        return StepShape.RANKS
    if worker_thread:
        return StepShape.WORKER_THREAD
    if pace is None:
        return StepShape.SYNCHRONOUS
    return StepShape.HOST_PACED if pace.paced_by == "host" else StepShape.RUN_AHEAD


def replay_trust(
    analysis: Analysis, pid: int, pace: Pace | None, joint: JointRun | None
) -> ShapeError:
    """What real pairs say of the replay on this process's shape of step."""
    ranks = len(joint.pids) if joint is not None and pid in joint.pids else 1
    # A global thread id holds its process id above its 24 low bits.
    worker = any((tid >> 24) & 0xFFFFFF == pid for tid in analysis.borrowed_threads.values())
    return REPLAY_ERRORS[step_shape(pace, ranks=ranks, worker_thread=worker)]
