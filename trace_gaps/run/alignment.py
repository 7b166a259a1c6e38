"""The clocks of a run's exports put on one (export 0's), and who is of the run.

Each export counts time from its own session start. Clocks are aligned first by the session
starts (wall-clock ns in TARGET_INFO_SESSION_START_TIME), then refined by collective
completions: matched collectives end at the same moment on every participant, so the median
of (reference end - export end) over the instances an export shares with the reference
(export 0) is its correction. The residual is the spread of ends of cross-export instances
after alignment (p50, p99); a wait across exports shorter than the p99 residual is not
attributed (it cannot be told from clock error).

Exports are one run only when their collectives say so (run_apart_reason): an export shares
a collective family with export 0, each shared family has as many instances in both, and
their ends agree after alignment (p50 residual within RUN_END_TOLERANCE_NS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.analysis.collectives import (
    END_TOLERANCE_NS,
    EXPORT,
    FAMILY,
    INSTANCE,
    PEER_EXPORT,
    PEER_PID,
    WAIT_END_NS,
    CollectiveMatch,
    match_collectives,
    number_instances,
    user_collectives,
)
from trace_gaps.errors import about_file
from trace_gaps.model import END_NS, NAME, PID, START_NS
from trace_gaps.nsys.stream import stream_export
from trace_gaps.records.notes import NoteNumber

# Exports are one run only if, once aligned, the median spread of their shared collectives'
# ends is within this. Measured: one run's, 0.12 µs (tp_rank0/tp_rank1, all-reduces) and
# 3.3 µs (mfu_2gpu_before split per process: send/recv pairs, whose ends differ by up to
# 31 µs); different runs' with collectives to pair, 6.7 ms and more.
RUN_END_TOLERANCE_NS = 50_000


@dataclass(frozen=True, slots=True)
class ExportSide:
    """What phase one reads of an export: its session start and its collective kernels."""

    path: Path
    session_start_utc_ns: int | None
    collectives: pd.DataFrame  # start_ns, end_ns, pid, device_id, name (own clock)


@dataclass(frozen=True, slots=True)
class Alignment:
    """Per export, the ns to add to its times to put them on export 0's clock."""

    offsets_ns: tuple[int, ...]
    method: str
    residual_p50_ns: int | None  # spread of ends of cross-export instances, after alignment
    residual_p99_ns: int | None
    shared_instances: int  # cross-export instances the refinement used
    drift_ns_per_s: float | None  # slope of the remaining end mismatch over time, if any


def read_side(path: Path, collective_patterns: tuple[str, ...] = ()) -> ExportSide:
    """Phase one of an export: session start and collectives (one SQL scan, no op tables);
    collective_patterns: the user's (--collective), beside the table's."""
    with about_file(path), stream_export(path) as opened:
        collectives = opened.sources.collectives(user_collectives(collective_patterns))
        return ExportSide(path, opened.head.info.session_start_utc_ns, collectives)


def align(sides: Sequence[ExportSide]) -> Alignment:
    """Offsets by session start, refined by the ends of collectives the exports share."""
    starts = [side.session_start_utc_ns for side in sides]
    have_starts = all(start is not None for start in starts)
    coarse = [int(start - starts[0]) if have_starts else 0 for start in starts]  # type: ignore[operator]
    method = "session start" if have_starts else "none (no session start in some export)"
    if len(sides) < 2:
        return Alignment(tuple(coarse), method, None, None, 0, None)
    frames = _on_clock(sides, coarse)
    ends = _instance_ends(frames)
    offsets = list(coarse)
    shared = 0
    drift = None
    if not ends.empty and 0 in ends.columns:
        for i in range(1, len(sides)):
            if i not in ends.columns:
                continue
            both = ends[[0, i]].dropna()
            if both.empty:
                continue
            delta = both[0] - both[i]
            correction = int(np.median(delta.to_numpy()))
            offsets[i] += correction
            shared += len(both)
            if len(both) >= 10:
                times = both[0].to_numpy(dtype=np.float64) / 1e9
                remaining = delta.to_numpy(dtype=np.float64) - correction
                slope = float(np.polyfit(times - times.mean(), remaining, 1)[0])
                drift = slope if drift is None or abs(slope) > abs(drift) else drift
        method += " + collective ends" if shared else ""
    spread = _instance_spread(_on_clock(sides, offsets))
    p50 = int(np.percentile(spread, 50)) if len(spread) else None
    p99 = int(np.percentile(spread, 99)) if len(spread) else None
    return Alignment(tuple(offsets), method, p50, p99, shared, drift)


def run_apart_reason(
    first: ExportSide, other: ExportSide
) -> tuple[str, dict[str, NoteNumber]] | None:
    """Why `other` is not of `first`'s run, as (reason, numbers), or None when it is: their
    collectives are the same sequence, ending together once aligned.

    reasons: "no_collectives" (one has none), "no_shared_family", "counts" (a shared family
    has more instances in one), "ends" (paired ends disagree after alignment)."""
    if first.collectives.empty or other.collectives.empty:
        empty = first if first.collectives.empty else other
        return "no_collectives", {"without": empty.path.name}
    counts = [_instances_per_family(side) for side in (first, other)]
    shared = sorted(set(counts[0]) & set(counts[1]))
    if not shared:
        return "no_shared_family", {
            "families": tuple(sorted(counts[0])),
            "other_families": tuple(sorted(counts[1])),
        }
    differ = [family for family in shared if counts[0][family] != counts[1][family]]
    if differ:
        family = differ[0]
        return "counts", {
            "family": family,
            "count": counts[0][family],
            "other_count": counts[1][family],
        }
    pair = align([first, other])
    if pair.residual_p50_ns is None or pair.residual_p50_ns > RUN_END_TOLERANCE_NS:
        return "ends", {
            "residual_p50_ns": pair.residual_p50_ns or 0,
            "shared_instances": pair.shared_instances,
            "tolerance_ns": RUN_END_TOLERANCE_NS,
        }
    return None


def _instances_per_family(side: ExportSide) -> dict[str, int]:
    """Per collective family: its instances in the export (the most any participant runs)."""
    found = number_instances(side.collectives)
    return {
        str(family): int(count)
        for family, count in (found.groupby(FAMILY)[INSTANCE].max() + 1).items()
    }


def _on_clock(sides: Sequence[ExportSide], offsets: Sequence[int]) -> pd.DataFrame:
    frames = []
    for i, (side, offset) in enumerate(zip(sides, offsets, strict=True)):
        if len(side.collectives):
            frame = side.collectives.copy()
            frame[START_NS] += offset
            frame[END_NS] += offset
            frame[EXPORT] = i
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[START_NS, END_NS, PID, "device_id", NAME, EXPORT])
    return pd.concat(frames, ignore_index=True)


def _instance_ends(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (family, instance): the first end of each export (columns), on the frame's clock."""
    if frame.empty:
        return pd.DataFrame()
    found = number_instances(frame)
    return found.groupby([FAMILY, INSTANCE, EXPORT])[END_NS].min().unstack(EXPORT)


def _instance_spread(frame: pd.DataFrame) -> np.ndarray:
    """Per cross-export instance: latest end - earliest end."""
    if frame.empty:
        return np.array([], dtype=np.int64)
    found = number_instances(frame)
    grouped = found.groupby([FAMILY, INSTANCE])
    crosses = grouped[EXPORT].nunique() > 1
    spread = (grouped[END_NS].max() - grouped[END_NS].min())[crosses]
    return spread.to_numpy()


def match_across(sides: Sequence[ExportSide], alignment: Alignment) -> tuple[CollectiveMatch, int]:
    """Match every export's collectives on the common clock. A wait across exports that is
    not longer than the p99 residual is dropped; returns the match and how many were."""
    frame = _on_clock(sides, alignment.offsets_ns)
    if frame.empty:
        return match_collectives(frame.iloc[:0]), 0
    match = match_collectives(frame)
    ops = match.ops
    tolerance = max(alignment.residual_p99_ns or 0, END_TOLERANCE_NS)
    crosses = (ops[PEER_EXPORT] >= 0) & (ops[PEER_EXPORT] != ops[EXPORT])
    short = crosses & ((ops[WAIT_END_NS] - ops[START_NS]) <= tolerance)
    if short.any():
        ops = ops.assign(
            **{
                WAIT_END_NS: np.where(short, ops[START_NS], ops[WAIT_END_NS]),
                PEER_PID: np.where(short, -1, ops[PEER_PID]),
                PEER_EXPORT: np.where(short, -1, ops[PEER_EXPORT]),
            }
        )
        match = replace(match, ops=ops)
    return match, int(short.sum())


def match_groups(
    sides: Sequence[ExportSide], groups: list[list[int]], alignment: Alignment
) -> tuple[list[CollectiveMatch], int]:
    """Each group's collectives matched among its own exports (match_across), its ops'
    export numbers those of `sides`; and how many short cross-export waits were dropped."""
    matches, dropped = [], 0
    for group in groups:
        offsets = tuple(alignment.offsets_ns[i] for i in group)
        match, short = match_across(
            [sides[i] for i in group], replace(alignment, offsets_ns=offsets)
        )
        index = np.asarray(group, dtype=np.int64)
        ops = match.ops
        if len(ops):
            peer = ops[PEER_EXPORT].to_numpy(dtype=np.int64)
            ops = ops.assign(
                **{
                    EXPORT: index[ops[EXPORT].to_numpy(dtype=np.int64)],
                    PEER_EXPORT: np.where(peer >= 0, index[np.maximum(peer, 0)], -1),
                }
            )
        matches.append(replace(match, ops=ops))
        dropped += short
    return matches, dropped
