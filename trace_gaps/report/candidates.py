"""Rank (stage, busy|idle) candidates by the time per step each explains, with evidence
(findings.py judges each; its words are written when the report is built)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trace_gaps.analysis.ledger import BUCKET, CAUSE
from trace_gaps.model import CAUSE_ORDER, Bucket, IdleCause


def round_per_step(totals: pd.Series, steps: int) -> pd.Series:
    """Divide totals by the step count into integers that sum to round(sum / steps).

    Largest-remainder rounding, so that a ledger's per-step means add up to the mean
    step wall time exactly.
    """
    if steps == 0 or totals.empty:
        return totals.astype("int64") * 0
    exact = totals.to_numpy(dtype=np.float64) / steps
    floor = np.floor(exact).astype(np.int64)
    target = int(round(int(totals.sum()) / steps))
    short = target - int(floor.sum())
    order = np.argsort(-(exact - floor), kind="stable")
    floor[order[: max(short, 0)]] += 1
    return pd.Series(floor, index=totals.index)


def idle_split(ledger_means: pd.DataFrame, stage: str) -> dict[str, int]:
    """Per cause, the idle ns per step charged to a stage (every cause present, zero or not)."""
    rows = ledger_means[
        (ledger_means["stage"] == stage) & (ledger_means[BUCKET] == Bucket.IDLE.value)
    ]
    by_cause = rows.groupby(CAUSE)["ns_per_step"].sum()
    return {cause.value: int(by_cause.get(cause.value, 0)) for cause in CAUSE_ORDER}


def rank_candidates(ledger_means: pd.DataFrame, *, wall_mean_ns: int) -> pd.DataFrame:
    """One row per (stage, bucket) with ns_per_step and share, largest first."""
    grouped = ledger_means.groupby(["stage", BUCKET], sort=False)["ns_per_step"].sum().reset_index()
    grouped = grouped[grouped["ns_per_step"] > 0]
    grouped = grouped.sort_values(
        ["ns_per_step", "stage", BUCKET], ascending=[False, True, True], kind="stable"
    )
    share = grouped["ns_per_step"] / wall_mean_ns if wall_mean_ns else 0.0
    return grouped.assign(share=share, rank=np.arange(1, len(grouped) + 1)).reset_index(drop=True)


def host_ns_per_launch(
    split: dict[str, int], launches_per_step: float, long_gap_idle_ns: int = 0
) -> int | None:
    """Idle host time in the short gaps between calls (long gaps left out), per launch (None
    without launches)."""
    if launches_per_step <= 0:
        return None
    short = max(split[IdleCause.HOST.value] - long_gap_idle_ns, 0)
    return int(round(short / launches_per_step))
