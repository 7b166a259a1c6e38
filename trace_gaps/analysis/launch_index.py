"""The launch index: staged calls by (pid, correlation id), built once per window, so that
each GPU op finds its launching call by a gather (a dense table) or a binary search."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from trace_gaps.model import CORRELATION_ID, PID


def launch_keys(pids: np.ndarray, correlation_ids: np.ndarray) -> np.ndarray:
    """One int64 per (pid, correlation id): pids take 24 bits, ids the 39 below them."""
    return (pids.astype(np.int64) << 39) | (correlation_ids.astype(np.int64) & ((1 << 39) - 1))


# A dense table of positions is used while its slots number at most this many per call
# (plus a few), for at most this many processes; else keys are sorted and searched.
# (CUPTI draws correlation ids for more than the runtime calls: a real eager capture's
# calls hold about one id in six.)
DENSE_SLOTS_PER_CALL = 16
DENSE_PROCESSES_MAX = 64


@dataclass(frozen=True, slots=True)
class _DenseLookup:
    """Per process, a table over its range of correlation ids: the position of the first
    call with each id (-1: none). A window's calls carry nearly consecutive ids per
    process, so a lookup is a gather, not a binary search (a search of ops' keys, which
    four op tables give out of order, costs several times more)."""

    pids: np.ndarray  # sorted, distinct
    lows: np.ndarray  # per pid, its lowest id
    spans: np.ndarray  # per pid, highest - lowest + 1
    offsets: np.ndarray  # per pid, where its ids start in table
    table: np.ndarray  # int32

    @classmethod
    def of(cls, pids: np.ndarray, ids: np.ndarray, positions: np.ndarray) -> _DenseLookup | None:
        """None when the ids spread too wide for a table (or over too many processes)."""
        code = None  # one process (the common case): no codes
        if pids.min() == pids.max():
            distinct = pids[:1]
            lows, highs = ids.min(keepdims=True), ids.max(keepdims=True)
        else:
            distinct = np.sort(pd.unique(pids))
            if len(distinct) > DENSE_PROCESSES_MAX:
                return None
            code = np.searchsorted(distinct, pids)
            lows = np.full(len(distinct), np.iinfo(np.int64).max, dtype=np.int64)
            highs = np.full(len(distinct), np.iinfo(np.int64).min, dtype=np.int64)
            np.minimum.at(lows, code, ids)
            np.maximum.at(highs, code, ids)
        spans = highs - lows + 1
        if int(spans.sum()) > DENSE_SLOTS_PER_CALL * len(ids) + 65_536:
            return None
        offsets = np.cumsum(spans) - spans
        slots = ids - lows[0] if code is None else offsets[code] + (ids - lows[code])
        # int32 positions (a window's calls number far fewer): half the table to fill.
        table = np.full(int(spans.sum()), -1, dtype=np.int32)
        positions = positions.astype(np.int32)
        table[slots] = positions
        # A key of several calls (a rare case) kept one of their positions: the first wins.
        repeated = table[slots] != positions
        if repeated.any():
            np.minimum.at(table, slots[repeated], positions[repeated])
        return cls(pids=distinct, lows=lows, spans=spans, offsets=offsets, table=table)

    def first_of(self, pids: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if len(self.pids) == 1:
            rel = ids - self.lows[0]
            inside = (pids == self.pids[0]) & (rel >= 0) & (rel < self.spans[0])
            slot = np.where(inside, rel, 0)
        else:
            code = np.minimum(np.searchsorted(self.pids, pids), len(self.pids) - 1)
            rel = ids - self.lows[code]
            inside = (self.pids[code] == pids) & (rel >= 0) & (rel < self.spans[code])
            slot = np.where(inside, self.offsets[code] + rel, 0)
        found: np.ndarray = np.where(inside, self.table[slot], np.int64(-1))  # int64
        return found


@dataclass(frozen=True, slots=True)
class _SortedLookup:
    """(pid, id) keys sorted stably, searched by binary search: any spread of ids."""

    keys: np.ndarray
    positions: np.ndarray  # of each sorted key's call

    @classmethod
    def of(cls, pids: np.ndarray, ids: np.ndarray, positions: np.ndarray) -> _SortedLookup:
        keys = launch_keys(pids, ids)
        order = np.argsort(keys, kind="stable")
        return cls(keys=keys[order], positions=positions[order])

    def first_of(self, pids: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.full(len(ids), -1, dtype=np.int64)
        wanted = launch_keys(pids, ids)
        at = np.searchsorted(self.keys, wanted, side="left")
        found = (at < len(self.keys)) & (ids >= 0)
        found[found] = self.keys[at[found]] == wanted[found]
        result: np.ndarray = np.where(found, self.positions[np.minimum(at, len(self.keys) - 1)], -1)
        return result


@dataclass(frozen=True, slots=True)
class LaunchIndex:
    """Staged calls by (pid, correlation id), indexed once for all the lookups of a window:
    per key, the position of the first call with it."""

    pids: np.ndarray  # of every staged call
    ids: np.ndarray  # correlation ids of every staged call
    calls: int  # lookups see the first `calls` staged calls (prefix)
    lookup: _DenseLookup | _SortedLookup

    @classmethod
    def of(cls, staged_calls: pd.DataFrame, *, dense: bool = True) -> LaunchIndex:
        """dense False: always sort the keys (for tests of both lookups)."""
        pids = staged_calls[PID].to_numpy()
        ids = staged_calls[CORRELATION_ID].to_numpy()
        has_id = ids >= 0
        if has_id.all():  # no copies of the columns when every call has an id
            positions, with_id = np.arange(len(ids)), (pids, ids)
        else:
            positions, with_id = np.flatnonzero(has_id), (pids[has_id], ids[has_id])
        with_id = (with_id[0].astype(np.int64, copy=False), with_id[1].astype(np.int64, copy=False))
        lookup = _DenseLookup.of(*with_id, positions) if dense and len(positions) else None
        return cls(
            pids=pids,
            ids=ids,
            calls=len(staged_calls),
            lookup=lookup if lookup is not None else _SortedLookup.of(*with_id, positions),
        )

    def prefix(self, rows: int) -> LaunchIndex:
        """The index of the first `rows` staged calls, LaunchIndex.of(staged_calls[:rows]),
        without indexing again: the first call with a key lies among them, or none does."""
        return self if rows >= self.calls else replace(self, calls=rows)

    def first_calls(self) -> np.ndarray:
        """Per staged call, the position of the first call with its key (itself, or the
        call it shares its launch with), or -1 for a call without a correlation id."""
        return self.find(self.pids[: self.calls], self.ids[: self.calls])

    def find(self, pids: np.ndarray, correlation_ids: np.ndarray) -> np.ndarray:
        """Per (pid, id), the position of the first call with that key, or -1."""
        found = self.lookup.first_of(
            pids.astype(np.int64, copy=False), correlation_ids.astype(np.int64, copy=False)
        )
        if self.calls < len(self.ids):
            found = np.where(found < self.calls, found, -1)
        return found
