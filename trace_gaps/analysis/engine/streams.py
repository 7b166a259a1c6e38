"""The rows of each table, held chunk by chunk in start order while a window may need them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from trace_gaps.model import PID, START_NS, NeedsWholeTrace

READ_AT = "read_at"  # the window whose reading brought the row in


class RowStream:
    """Rows of one table, chunk by chunk in start order; holds those still needed."""

    def __init__(
        self,
        name: str,
        chunks: Iterator[pd.DataFrame],
        empty: pd.DataFrame,
        prepare: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
    ) -> None:
        """prepare: applied to each chunk as it is read (the calls are staged once)."""
        self.name = name
        self.prepare = prepare
        empty = prepare(empty) if prepare is not None else empty
        self.empty = empty.assign(**{READ_AT: np.zeros(0, dtype=np.int32)})
        self.chunks = chunks
        self.held: list[pd.DataFrame] = []
        self.last_start = np.iinfo(np.int64).min
        self.done = False

    def fill(self, limit: int, window: int) -> None:
        """Read chunks until every row starting before limit is held."""
        while not self.done and self.last_start < limit:
            chunk = next(self.chunks, None)
            if chunk is None:
                self.done = True
                return
            if chunk.empty:
                continue
            starts = chunk[START_NS].to_numpy()
            if starts[0] < self.last_start or (np.diff(starts) < 0).any():
                raise NeedsWholeTrace(f"{self.name} rows are not in start order")
            self.last_start = int(starts[-1])
            if self.prepare is not None:
                chunk = self.prepare(chunk)
            self.held.append(chunk.assign(**{READ_AT: np.int32(window)}))

    def frame(self) -> pd.DataFrame:
        """The rows held, as one frame with a fresh RangeIndex (positions are row ids)."""
        if len(self.held) > 1:
            self.held = [pd.concat(self.held, ignore_index=True)]
        return self.held[0] if self.held else self.empty

    def keep(self, keep: np.ndarray) -> None:
        frame = self.frame()
        if len(frame):
            # The rows kept are mostly a suffix (those starting after the next window's
            # start) and a few before it (still running): the suffix is held as a slice,
            # not copied; frame() concatenates the parts once, with the next chunks.
            dropped = np.flatnonzero(~keep)
            tail = int(dropped[-1]) + 1 if len(dropped) else 0
            self.held = [frame.iloc[:tail][keep[:tail]], frame.iloc[tail:]]


def of_process(pid: int | None, chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The chunks, only pid's rows in each (every row: pid None)."""
    for chunk in chunks:
        yield chunk if pid is None else chunk[chunk[PID].to_numpy() == pid]


def concat_streams(streams: list[RowStream]) -> pd.DataFrame:
    """The op streams' held rows as one frame, stream after stream (_drop_finished relies on
    that order). Streams holding rows share their name categories, so the names stay
    categorical; empty ones (no categories) are left out of the concat.

    Every stream's held parts are concatenated at once (one copy, not one per stream and
    one more across them); each stream then holds its rows as a slice of the result."""
    lengths = [sum(len(part) for part in s.held) for s in streams]
    parts = [part for s in streams for part in s.held if len(part)]
    if not parts:
        return streams[0].frame()
    whole = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    whole = whole.reset_index(drop=True)  # a slice's index need not start at 0 (no copy)
    at = 0
    for stream, rows in zip(streams, lengths, strict=True):
        stream.held = [whole.iloc[at : at + rows].reset_index(drop=True)] if rows else []
        at += rows
    return whole
