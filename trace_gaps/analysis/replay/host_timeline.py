"""The step thread's host timeline: its host time, cut at stage boundaries so that each
piece belongs to one stage, and the calls between, in time order."""

from __future__ import annotations

import numpy as np

from trace_gaps.analysis.replay.codes import NO_INDEX
from trace_gaps.analysis.stages import StageMap, thread_stage_at


def host_timeline(
    start: int,
    end: int,
    c_start: np.ndarray,
    c_end: np.ndarray,
    c_stage: np.ndarray,
    stage_map: StageMap,
    tid: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The host timeline's items: host gaps cut at stage boundaries, and the calls, in time
    order (each gap's pieces, then the call that ends it); vectorised over every gap."""
    thread = stage_map.threads.get(tid)
    cuts = np.zeros(0, dtype=np.int64)
    if thread is not None:
        edges = [*thread.level_starts, *thread.level_ends]
        if edges:
            cuts = np.unique(np.concatenate(edges)).astype(np.int64)
            cuts = cuts[(cuts > start) & (cuts < end)]
    gap_lo = np.r_[start, c_end].astype(np.int64)
    gap_hi = np.maximum(np.r_[c_start, end].astype(np.int64), gap_lo)
    # Gap g holds the cuts strictly inside it, cuts[first[g]:first[g] + inner[g]].
    first = np.searchsorted(cuts, gap_lo, side="right")
    inner = np.maximum(np.searchsorted(cuts, gap_hi, side="left") - first, 0)
    pieces = np.where(gap_hi > gap_lo, inner + 1, 0)
    gap = np.repeat(np.arange(len(gap_lo)), pieces)
    at = np.arange(len(gap)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    # A piece starts at the gap's start or a cut, and ends at a cut or the gap's end; the
    # index past the last cut (and -1) read a padding value that np.where discards.
    padded = np.r_[cuts, 0]
    cut_at = first[gap] + at
    lo = np.where(at > 0, padded[cut_at - 1], gap_lo[gap])
    hi = np.where(at < inner[gap], padded[cut_at], gap_hi[gap])
    mids = (lo + hi) // 2
    codes = (
        thread_stage_at(stage_map, thread, mids)
        if thread is not None
        else np.zeros(len(mids), dtype=np.int64)
    )
    # Items per gap: its pieces, then the call that ends it (the last gap ends the step).
    ends_in_call = np.arange(len(gap_lo)) < len(c_start)
    per_gap = pieces + ends_in_call
    offset = np.cumsum(per_gap) - per_gap
    total = int(per_gap.sum())
    calls = np.full(total, NO_INDEX, dtype=np.int32)
    lengths = np.zeros(total, dtype=np.int64)
    stages = np.zeros(total, dtype=np.int32)
    piece_at = offset[gap] + at
    lengths[piece_at] = hi - lo
    stages[piece_at] = codes
    call_at = (offset + pieces)[ends_in_call]
    calls[call_at] = np.arange(len(c_start), dtype=np.int32)
    stages[call_at] = np.asarray(c_stage, dtype=np.int64)[: len(c_start)]
    return calls, lengths, stages
