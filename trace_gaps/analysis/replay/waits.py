"""What a step's syncs wait for: the op each sync waited for and its tail, and which event
syncs wait for the previous step's work (a run-ahead loop)."""

from __future__ import annotations

import numpy as np

from trace_gaps.analysis.replay.codes import NO_INDEX, SYNC

# An event sync no longer than this did not wait: on the run-ahead captures (H100) a call
# whose event had completed took 4.3-9.9 us, one that waited for the GPU 100 us and more.
EVENT_SYNC_FREE_NS = 20_000
# A sync waits for one of the ops launched before it; only this many of the latest are
# searched (the op a sync waits for is among the last few launched).
WAIT_SEARCH_OPS = 4096


def find_waits(
    c_start: np.ndarray,
    c_end: np.ndarray,
    category: np.ndarray,
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each sync call, the op it waited for (the latest-ending op launched by it or an
    earlier call of the step that ended before it returned) and the time after that op."""
    waits = np.full(len(c_start), NO_INDEX, dtype=np.int32)
    tails = np.zeros(len(c_start), dtype=np.int64)
    syncs = np.flatnonzero(category == SYNC)
    launched = np.flatnonzero(op_call >= 0)
    if not len(syncs) or not len(launched):
        return waits, tails
    # Ops launched by the step's calls, in launch order; a running max of their ends.
    order = launched[np.argsort(op_call[launched], kind="stable")]
    by_call = op_call[order]
    for i in syncs:
        upto = int(np.searchsorted(by_call, i, side="right"))
        if not upto:
            continue
        candidates = order[max(0, upto - WAIT_SEARCH_OPS) : upto]
        ends = op_end[candidates]
        ok = ends <= c_end[i]
        if not ok.any():
            continue
        best = candidates[ok][int(np.argmax(ends[ok]))]
        waits[i] = best
        if op_end[best] > c_start[i]:
            tails[i] = c_end[i] - op_end[best]
    return waits, tails


def event_lags(
    event_syncs: np.ndarray,
    event_records: np.ndarray,
    c_start: np.ndarray,
    c_end: np.ndarray,
    waits: np.ndarray,
    tails: np.ndarray,
    op_call: np.ndarray,
    op_start: np.ndarray,
    op_end: np.ndarray,
    stream: np.ndarray,
    carried: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Which event syncs wait for the previous step's work (a run-ahead loop reads step N−1's
    output while step N runs: vLLM's async scheduling, SGLang's overlap scheduler). An event
    sync that blocked until an op the step's thread launched before the step ended: lag 1,
    its op here is the last op the step launched before it on that op's stream (the op the
    next step waits for). One that did not block: which event it waited on cannot be told
    from the export; lag 1 is taken, on the latest op launched before it (the record a
    run-ahead loop waits on a step later). Of the step's own ops, only one an event recorded
    in the step before the sync can mark is waited for (the last op launched on its stream
    before a record call): an op queued behind the previous step's, run in the moment the
    host takes to wake, is not. waits and tails are updated in place. Also returned, per
    call: the op of the step before that a lag-1 sync blocked for (-1: none), which the
    first step of a run-ahead chain waits for (chain.chain_of)."""
    lags = np.zeros(len(c_start), dtype=np.int8)
    previous = np.full(len(c_start), NO_INDEX, dtype=np.int32)
    for i in np.flatnonzero(event_syncs):
        during = (op_end > c_start[i]) & (op_end <= c_end[i])
        during &= _may_be_marked(int(i), event_records, op_call, stream)
        waited = int(np.flatnonzero(during)[np.argmax(op_end[during])]) if during.any() else -1
        # It blocked for that op when it lasted longer than a call that does not wait and
        # spent longer before the op's end than after it (an op ending inside a call that
        # did not wait is a coincidence).
        blocked = c_end[i] - c_start[i] > EVENT_SYNC_FREE_NS
        if blocked and waited >= 0 and op_end[waited] - c_start[i] > c_end[i] - op_end[waited]:
            if not carried[waited]:
                continue  # it waited for this step's own op: lag 0, as found
            mine = np.flatnonzero((op_call >= 0) & (op_call < i) & (stream == stream[waited]))
            if not len(mine):
                continue
            waits[i] = int(mine[np.argmax(op_call[mine])])
            tails[i] = int(c_end[i] - op_end[waited])
            lags[i] = 1
            previous[i] = waited
        elif waits[i] >= 0:
            tails[i] = 0
            lags[i] = 1
    return lags, previous


def _may_be_marked(
    sync: int, event_records: np.ndarray, op_call: np.ndarray, stream: np.ndarray
) -> np.ndarray:
    """Per op: whether an event call `sync` waits on can mark it: an op launched elsewhere
    (the step before, another thread), or the last op launched on its stream before one of
    the step's event record calls that precede the sync. Every op where the step records
    no event before it (the record was made elsewhere: which op it marks cannot be told)."""
    records = np.flatnonzero(event_records[:sync])
    launched = op_call >= 0
    if not len(records):
        return np.ones(len(op_call), dtype=bool)
    marked = ~launched
    for record in records:
        before = np.flatnonzero(launched & (op_call < record))
        if not len(before):
            continue
        # The latest launched per stream (ops are in start order: a graph's last node wins).
        order = before[np.lexsort((before, op_call[before], stream[before]))]
        last = np.r_[stream[order][1:] != stream[order][:-1], True]
        marked[order[last]] = True
    return marked
