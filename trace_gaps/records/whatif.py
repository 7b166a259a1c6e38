"""The what-if's records: the replay of unchanged steps, the levers' predicted step and
its replayed ledger."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ReplayCheck:
    """The unchanged replay against the measured steps."""

    steps: int
    measured_ns: int
    replayed_ns: int
    error_pct: float  # (replayed − measured) / measured, in %
    # How far predictions were from real "after" captures on this shape of step
    # (analysis/replay/shapes.py): real pairs 0 where none has checked it, and then the
    # candidates are ranked by the time they explain, not by their saving.
    shape: str = ""
    real_pairs: int = 0
    within_pct: float = 0.0  # the largest error at the after's host speed, %
    drifted_pct: float = 0.0  # the largest error as captured, the host's drift included, %
    # The first steps of a GPU-paced run-ahead loop that did not wait for the step before's
    # work (the loop filling the GPU's queue), left out of the check (whatif.filling_steps).
    filling_steps: int = 0


@dataclass(frozen=True, slots=True)
class Prediction:
    """The levers' effect on the replayed steps of one process (of one kind of step)."""

    levers: list[str]
    steps: int  # how many steps were replayed
    measured_ns: int  # their mean measured wall time
    replayed_ns: int  # mean replayed, unchanged
    lever_ns: int  # mean replayed with the levers pulled
    saving_ns: int  # the process's mean step − predicted_ns (0 or more)
    # the process's mean step less the replayed steps' relative saving (replayed_ns −
    # lever_ns, kept within [0, the time the levers remove]); above zero, at most the step
    predicted_ns: int
    ledger: list[WhatIfLedgerEntry]  # replayed with the levers pulled
    not_applicable: list[NotApplicable]  # levers asked for that these steps give nothing to
    # The pids replayed together, ranks in lockstep (analysis/replay/joint.py): the prediction is the
    # run's step, the same in each of their sections; empty where this process is alone.
    ranks: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NotApplicable:
    """A lever asked for that changes nothing in these steps (a kind or process of a run
    whose other steps it does change): `no_stage` where they lack its stage, else the
    stage lacks what the lever removes (why_not says what)."""

    lever: str
    stage: str
    kind: str
    reason: str  # "no_stage", "nothing_to_change" or "no_gpu_metrics" (a sol lever)


@dataclass(frozen=True, slots=True)
class WhatIfLedgerEntry:
    """One (stage, bucket, cause) of the replayed steps with the levers pulled."""

    stage: str
    bucket: str
    cause: str
    ns_per_step: int
