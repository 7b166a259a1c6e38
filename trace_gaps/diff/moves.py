"""How each stage and each candidate moved between the two sides of a diff."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trace_gaps.diff.changes import BucketChange, NsInterval, StageChange, stage_side
from trace_gaps.diff.noise import is_beyond
from trace_gaps.records.report import ProcessReport
from trace_gaps.vocabulary import CandidateStatus, Presence


@dataclass(frozen=True, slots=True)
class CandidateChange:
    """A (stage, busy|idle) ranked on either side and how it moved."""

    stage: str
    bucket: str
    status: str
    before_rank: int | None
    after_rank: int | None
    before_ns_per_step: int
    after_ns_per_step: int
    change_ns_per_step: int


def bucket_changes(
    columns: pd.Index,
    means: tuple[np.ndarray, np.ndarray],
    intervals: list[NsInterval],
    stages: tuple[set[str], set[str]],
) -> list[BucketChange]:
    """Each (stage, bucket label) column's change, largest first, those zero on both sides
    left out. means: the sides' means of wall time then each column; intervals: the
    bootstrap's, in the same order ([]: no noise estimate); stages: each side's stages."""
    means_before, means_after = means
    buckets = [
        BucketChange(
            stage=str(stage),
            bucket=str(bucket),
            presence=stage_presence(stage, *stages),
            before_ns_per_step=int(round(means_before[i + 1])),
            after_ns_per_step=int(round(means_after[i + 1])),
            change_ns_per_step=int(round(means_after[i + 1] - means_before[i + 1])),
            ci_ns=intervals[i + 1] if intervals else None,
            is_beyond_noise=is_beyond(
                intervals[i + 1], means_after[i + 1] - means_before[i + 1], means_before[0]
            )
            if intervals
            else None,
        )
        for i, (stage, bucket) in enumerate(
            zip(columns.get_level_values(0), columns.get_level_values(1), strict=True)
        )
    ]
    return sorted(
        (b for b in buckets if b.before_ns_per_step or b.after_ns_per_step),
        key=lambda b: (-abs(b.change_ns_per_step), b.stage, b.bucket),
    )


def stage_presence(stage: str, before: set[str], after: set[str]) -> str:
    """Whether the stage is on both sides or on one only."""
    if stage in before and stage in after:
        return Presence.BOTH
    return Presence.BEFORE_ONLY if stage in before else Presence.AFTER_ONLY


def stage_changes(
    before: ProcessReport, after: ProcessReport, buckets: list[BucketChange]
) -> list[StageChange]:
    """Each stage's change (its buckets' sum) with its figures on each side, largest first."""
    summaries = {
        "before": {s.name: s for s in before.stages},
        "after": {s.name: s for s in after.stages},
    }
    totals: dict[str, list[int]] = {}
    for b in buckets:
        total = totals.setdefault(b.stage, [0, 0])
        total[0] += b.before_ns_per_step
        total[1] += b.after_ns_per_step
    presence = {b.stage: b.presence for b in buckets}
    for stage in summaries["before"].keys() | summaries["after"].keys():
        totals.setdefault(stage, [0, 0])
        presence.setdefault(
            stage, stage_presence(stage, set(summaries["before"]), set(summaries["after"]))
        )
    changes = [
        StageChange(
            stage=stage,
            presence=presence[stage],
            before=None
            if presence[stage] == Presence.AFTER_ONLY
            else stage_side(summaries["before"].get(stage), ns[0]),
            after=None
            if presence[stage] == Presence.BEFORE_ONLY
            else stage_side(summaries["after"].get(stage), ns[1]),
            change_ns_per_step=ns[1] - ns[0],
        )
        for stage, ns in totals.items()
    ]
    return sorted(changes, key=lambda c: (-abs(c.change_ns_per_step), c.stage))


def candidate_changes(
    before: ProcessReport, after: ProcessReport, buckets: list[BucketChange]
) -> list[CandidateChange]:
    """Each (stage, busy|idle) ranked on either side and how it moved, largest first."""
    ranks_before = {(c.stage, c.bucket): c.rank for c in before.candidates}
    ranks_after = {(c.stage, c.bucket): c.rank for c in after.candidates}
    totals: dict[tuple[str, str], list[int]] = {}
    # A candidate moved beyond noise when any of its buckets did (None: no noise estimate).
    noisy: dict[tuple[str, str], list[bool | None]] = {}
    for b in buckets:
        key = (b.stage, b.bucket.split()[0])
        total = totals.setdefault(key, [0, 0])
        total[0] += b.before_ns_per_step
        total[1] += b.after_ns_per_step
        noisy.setdefault(key, []).append(b.is_beyond_noise)
    changes = []
    for key in sorted(ranks_before.keys() | ranks_after.keys()):
        ns_before, ns_after = totals.get(key, [0, 0])
        if key not in ranks_after:
            status = CandidateStatus.VANISHED
        elif key not in ranks_before:
            status = CandidateStatus.APPEARED
        elif noisy.get(key) and all(flag is False for flag in noisy[key]):
            status = CandidateStatus.UNCHANGED
        else:
            status = {
                1: CandidateStatus.GREW,
                -1: CandidateStatus.SHRANK,
                0: CandidateStatus.UNCHANGED,
            }[int(np.sign(ns_after - ns_before))]
        changes.append(
            CandidateChange(
                key[0],
                key[1],
                status,
                ranks_before.get(key),
                ranks_after.get(key),
                ns_before,
                ns_after,
                ns_after - ns_before,
            )
        )
    return sorted(changes, key=lambda c: (-abs(c.change_ns_per_step), c.stage, c.bucket))
