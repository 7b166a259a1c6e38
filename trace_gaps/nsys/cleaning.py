"""Rows no capture can hold, left out of the chunks as they pass and counted in a Tally:
untimed rows, impossible times, repeated rows (Cleaner, every table), and ops no GPU can have
run, shifted copies and ops holding the next op of their stream whole (StreamCheck, op
tables).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from trace_gaps.model import (
    CORRELATION_ID,
    DEVICE_ID,
    END_NS,
    GRAPH_NODE_ID,
    OP_KIND,
    PID,
    START_NS,
    STREAM_ID,
)
from trace_gaps.nsys.head import impossible_times


@dataclass(slots=True)
class RowCounts:
    """The timed rows of the op tables, or of the CUDA API table, read and left out."""

    read: int = 0  # timed rows read, before any was left out
    # times no capture can hold (head.impossible_times), and ops whose span holds the next
    # op of their stream whole (StreamCheck)
    impossible: int = 0
    duplicated: int = 0  # copies of an earlier row, exact or shifted (StreamCheck)


@dataclass(slots=True)
class Tally:
    """What the chunks showed on their way past: op counts per device, the earliest start,
    and rows left out as untimed, impossible or copies."""

    device_ops: list[pd.DataFrame] = field(default_factory=list)
    earliest: int = np.iinfo(np.int64).max
    untimed: int = 0
    op_rows: RowCounts = field(default_factory=RowCounts)
    call_rows: RowCounts = field(default_factory=RowCounts)
    # calls whose name id is not in StringIds, or whose name is no CUDA call's ('', NULL, ...)
    unresolved_calls: int = 0
    unresolved_kernels: int = 0  # kernels likewise
    lock: threading.Lock = field(default_factory=threading.Lock)  # streams count on threads

    def snapshot(self) -> dict[str, object]:
        """The counts so far (a read of every row), to restore after reading again."""
        with self.lock:
            counts = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "lock"}
            counts["device_ops"] = list(self.device_ops)
            counts["op_rows"] = replace(self.op_rows)
            counts["call_rows"] = replace(self.call_rows)
            return counts

    def restore(self, counts: dict[str, object]) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, value)

    def ops(self) -> pd.DataFrame:
        if not self.device_ops:
            return pd.DataFrame({PID: [], DEVICE_ID: [], OP_KIND: [], "ops": []}, dtype="int64")
        counts = pd.concat(self.device_ops, ignore_index=True)
        counts[OP_KIND] = counts[OP_KIND].astype(str)
        return counts.groupby([PID, DEVICE_ID, OP_KIND], sort=True)["ops"].sum().reset_index()


def _repeated_rows(chunk: pd.DataFrame, keys: list[str], before: pd.DataFrame) -> np.ndarray:
    """Rows equal on keys to an earlier row of the chunk, or of `before` (the run of equal
    starts that ended the table's previous chunk, when the chunk goes on with that start).

    The stream's rows are in start order (checked as windows fill; when they are not, the
    analysis reads the export whole and load_trace counts copies itself), so a copy shares a
    run of equal starts with its original: only rows in such runs are hashed, which keeps
    this check cheap (a full duplicated() costs ~0.1 s per chunk). A run may cross a chunk's
    edge, so the copies found do not depend on where the chunks are cut.
    """
    starts = chunk[START_NS].to_numpy()
    carried = len(before) > 0 and len(starts) > 0 and before[START_NS].iat[-1] == starts[0]
    tied = np.zeros(len(starts), dtype=bool)
    if len(starts) > 1:
        same = starts[1:] == starts[:-1]
        tied[1:] |= same
        tied[:-1] |= same
    if carried:
        tied |= starts == starts[0]
    repeated = np.zeros(len(starts), dtype=bool)
    if tied.any():
        run = chunk.loc[tied, keys]
        if carried:
            joined = pd.concat([before[keys], run], ignore_index=True)
            repeated[tied] = joined.duplicated(keys).to_numpy()[len(before) :]
        else:
            repeated[tied] = run.duplicated(keys).to_numpy()
    return repeated


def _drop_untimed(chunk: pd.DataFrame, tally: Tally) -> pd.DataFrame:
    starts = chunk[START_NS].to_numpy()
    untimed = (starts == 0) & (chunk[END_NS].to_numpy() == 0)
    if untimed.any():
        with tally.lock:
            tally.untimed += int(untimed.sum())
        chunk = chunk[~untimed].reset_index(drop=True)
        starts = chunk[START_NS].to_numpy()
    if len(chunk):
        earliest = int(starts.min())
        with tally.lock:
            tally.earliest = min(tally.earliest, earliest)
    index = chunk.index
    fresh = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    return chunk if fresh else chunk.reset_index(drop=True)


class Cleaner:
    """Leaves out a table's untimed rows, impossible times and copies, chunk after chunk,
    each counted in a tally (which the caller may change between chunks: a span's rows are
    counted only where the span owns them)."""

    def __init__(
        self, capture: tuple[int | None, int | None], key: list[str], *, calls: bool
    ) -> None:
        self.capture = capture
        self.key = key
        self.calls = calls
        self.run = pd.DataFrame({k: np.zeros(0, dtype=np.int64) for k in key})

    def __call__(self, chunk: pd.DataFrame, tally: Tally) -> pd.DataFrame:
        """The chunk without its untimed rows, impossible times and copies, each counted."""
        rows = tally.call_rows if self.calls else tally.op_rows
        chunk = _drop_untimed(chunk, tally)
        impossible = impossible_times(chunk, *self.capture)
        with tally.lock:
            rows.read += len(chunk)
        if impossible.any():
            with tally.lock:
                rows.impossible += int(impossible.sum())
            chunk = chunk.loc[~impossible].reset_index(drop=True)
        repeated = _repeated_rows(chunk, self.key, self.run)
        if repeated.any():
            with tally.lock:
                rows.duplicated += int(repeated.sum())
            chunk = chunk.loc[~repeated].reset_index(drop=True)
        if len(chunk):
            starts = chunk[START_NS].to_numpy()
            run = chunk.loc[starts == starts[-1], self.key]
            if len(self.run) and self.run[START_NS].iat[-1] == starts[-1]:
                run = pd.concat([self.run, run], ignore_index=True)
            self.run = run
        return chunk


# An op whose span holds the next op of its stream whole, overlapping it by more than this,
# cannot be real: a stream runs its ops one after the other. Measured on every sample, corpus
# and peer capture (47 exports, nsys 2022-2026): consecutive ops of a stream overlap by up to
# 1.1 µs (clock granularity; a graph's first kernel after an eager one) and, once, by 12.4 µs
# (a kernel launched early, programmatic dependent launch), but never does an op end after
# the next one of its stream ends; a kernel set to start at 1 ns or pushed 0.5 s later does.
HOLDS_NEXT_MIN_NS = 1_000
# Rows held back, at most, waiting for the next op of their stream (StreamCheck): past it,
# the ops still waiting are kept (a long op on a stream that is seldom used again).
HELD_ROWS_MAX = 200_000
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class StreamCheck:
    """Leaves out the op rows no GPU can have run, chunk after chunk of one table in start
    order, each counted in its chunk's tally:

    - copies of an op shifted in time or moved to another stream: the same process, device,
      correlation id, graph node and duration as an earlier op still running at its start
      (no two ops of a real export share a correlation id and graph node), counted as
      duplicated;
    - ops whose span holds the next op of their stream whole (HOLDS_NEXT_MIN_NS), counted
      as impossible: the op is known only once the next op of its stream is read, so the
      rows from the first op still waiting are held back (at most HELD_ROWS_MAX), and the
      chunks stay in start order. Nodes of one graph launch are not checked against each
      other (branches of a graph may run at once).
    """

    def __init__(self) -> None:
        self.running = pd.DataFrame({c: np.zeros(0, np.int64) for c in _COPY_COLUMNS})
        self.held: list[tuple[pd.DataFrame, Tally]] = []

    def __call__(self, chunk: pd.DataFrame, tally: Tally) -> list[tuple[pd.DataFrame, Tally]]:
        """The rows now known to be possible, each part with its tally, in start order."""
        if len(chunk):
            self.held.append((self._without_copies(chunk, tally), tally))
        return self._decided(final=False)

    def flush(self) -> list[tuple[pd.DataFrame, Tally]]:
        """The rows still held, at the end of the table."""
        return self._decided(final=True)

    def _without_copies(self, chunk: pd.DataFrame, tally: Tally) -> pd.DataFrame:
        earlier = self.running
        both = pd.concat([earlier, chunk[_COPY_COLUMNS]], ignore_index=True)
        copies = shifted_copies(both)
        copied = copies[len(earlier) :]
        if copied.any():
            with tally.lock:
                tally.op_rows.duplicated += int(copied.sum())
            chunk = chunk.loc[~copied].reset_index(drop=True)
        kept = both.loc[~copies]
        if len(chunk):
            latest = chunk[START_NS].iat[-1]
            self.running = kept.loc[kept[END_NS].to_numpy() > latest].reset_index(drop=True)
        return chunk

    def _decided(self, *, final: bool) -> list[tuple[pd.DataFrame, Tally]]:
        if not self.held:
            return []
        frames = [frame for frame, _ in self.held]
        sizes = np.array([len(frame) for frame in frames])
        rows = pd.concat([f[_STREAM_COLUMNS] for f in frames], ignore_index=True)
        if rows.empty:
            self.held = []
            return []
        impossible, waiting = holding_next(rows)
        cut = len(rows)
        if not final and len(rows) <= HELD_ROWS_MAX and waiting.any():
            cut = int(np.argmax(waiting))
        decided: list[tuple[pd.DataFrame, Tally]] = []
        held: list[tuple[pd.DataFrame, Tally]] = []
        for (frame, tally), lo in zip(self.held, np.r_[0, np.cumsum(sizes)[:-1]], strict=True):
            upto = min(max(cut - int(lo), 0), len(frame))
            dropped = impossible[lo : lo + upto]
            if dropped.any():
                with tally.lock:
                    tally.op_rows.impossible += int(dropped.sum())
            if upto:
                part = frame.iloc[:upto]
                part = part.loc[~dropped] if dropped.any() else part
                decided.append((part.reset_index(drop=True), tally))
            if upto < len(frame):
                held.append((frame.iloc[upto:].reset_index(drop=True), tally))
        self.held = held
        return decided


def shifted_copies(ops: pd.DataFrame) -> np.ndarray:
    """Mask of the ops that copy an earlier op (by start) still running at their start: the
    same process, device, correlation id, graph node and duration."""
    starts = ops[START_NS].to_numpy()
    durations = ops[END_NS].to_numpy() - starts
    key = np.zeros(len(ops), dtype=np.uint64)
    for values in (*(ops[c].to_numpy() for c in _COPY_KEY), durations):
        key = (key ^ values.astype(np.uint64)) * _GOLDEN
    # A hash finds the few rows that may be copies; they are then compared exactly.
    maybe = np.flatnonzero(pd.Series(key).duplicated(keep=False).to_numpy())
    copies = np.zeros(len(ops), dtype=bool)
    if len(maybe):
        order = maybe[np.lexsort((starts[maybe], key[maybe]))]
        prev, this = order[:-1], order[1:]
        same = key[prev] == key[this]
        for column in _COPY_KEY:
            values = ops[column].to_numpy()
            same &= values[prev] == values[this]
        same &= durations[prev] == durations[this]
        shift = starts[this] - starts[prev]
        copies[this[same & (shift < np.maximum(durations[this], 1))]] = True
    return copies


def holding_next(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the ops whose span holds the next op (by start) of their stream whole, and
    of those whose next op is not among these rows and may yet do so (one that starts at
    the latest start here, or after it)."""
    starts, ends = ops[START_NS].to_numpy(), ops[END_NS].to_numpy()
    pids, devices, streams = (ops[c].to_numpy() for c in (PID, DEVICE_ID, STREAM_ID))
    order = np.lexsort((starts, streams, devices, pids))
    prev, this = order[:-1], order[1:]
    same_stream = (
        (pids[prev] == pids[this])
        & (devices[prev] == devices[this])
        & (streams[prev] == streams[this])
    )
    prev, this = prev[same_stream], this[same_stream]
    nodes, correlations = ops[GRAPH_NODE_ID].to_numpy(), ops[CORRELATION_ID].to_numpy()
    one_graph = (nodes[prev] >= 0) & (nodes[this] >= 0)
    one_graph &= correlations[prev] == correlations[this]
    holds = (ends[prev] >= ends[this]) & (ends[prev] - starts[this] > HOLDS_NEXT_MIN_NS)
    impossible = np.zeros(len(ops), dtype=bool)
    impossible[prev[holds & ~one_graph]] = True
    waiting = np.ones(len(ops), dtype=bool)
    waiting[prev] = False  # the next op of its stream is here
    if len(ops):
        waiting &= ends - HOLDS_NEXT_MIN_NS > starts.max()
    return impossible, waiting


_COPY_KEY = [PID, DEVICE_ID, CORRELATION_ID, GRAPH_NODE_ID]
_COPY_COLUMNS = [*_COPY_KEY, START_NS, END_NS]
_STREAM_COLUMNS = [PID, DEVICE_ID, STREAM_ID, CORRELATION_ID, GRAPH_NODE_ID, START_NS, END_NS]
