"""An export's OS calls (OSRT_API, --trace=osrt), read a window at a time by the process
that analyses the window, instead of whole before the first one (or whole: read_os_calls).

nsys stores OSRT_API in runs each sorted by start, not in start order over the table (a
thread's calls, then other threads' from earlier: 2 to 22 such runs on every capture
here), and a window needs every call overlapping its steps, however early it started.
So the table is mapped once, in blocks of BLOCK_ROWS rowids: each block's earliest start
and latest end, and the name ids, from one scan inside SQLite (no row reaches Python).
A window reads only the blocks that can hold a call overlapping it, by rowid range.

A call counts once, for the outermost: analysis/host.py keeps a thread's call only when
it starts after every earlier call of the thread has ended. For a call that started
before the window, the earlier calls that decide it overlap its start, so a window reads
those too (OsCallWindow): the choice among the calls read is the one among all of them.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.interrupts import stopping
from trace_gaps.model import (
    END_NS,
    GLOBAL_TID,
    NAME,
    OS_CALL_COLUMNS,
    START_NS,
    NeedsWholeTrace,
    empty_frame,
)
from trace_gaps.nsys import queries
from trace_gaps.nsys.export import open_export, reading_export
from trace_gaps.nsys.head import read_strings
from trace_gaps.nsys.read import read_frame, read_table_chunks
from trace_gaps.nsys.sql import query_row
from trace_gaps.parallel import threaded_map, usable_cores

BLOCK_ROWS = 8192
ROW_ID = "row_id"


# The columns of queries.OS_CALLS: the name as its id.
OS_CALL_READ = {
    **{n: d for n, d in OS_CALL_COLUMNS.items() if d != "category"},
    "name_id": "int64",
}


def read_os_calls(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> pd.DataFrame:
    """Every OS call (OSRT_API) of the export, in its order."""
    if queries.OS_CALL_TABLE not in tables:
        return empty_frame(OS_CALL_COLUMNS)
    calls = read_frame(path, queries.OS_CALLS, OS_CALL_READ)
    # Each distinct id named once (a million calls use a few dozen names), looked up by
    # the ids read rather than by a second scan of the table (0.07 s for 1.28M calls).
    codes, ids = pd.factorize(calls.pop("name_id").to_numpy())
    named = os_call_names(connection, ids)
    calls[NAME] = pd.Categorical.from_codes(
        named.codes[codes] if len(codes) else codes, categories=named.categories
    )
    return calls[list(OS_CALL_COLUMNS)]


def os_call_names(connection: sqlite3.Connection, ids: np.ndarray) -> pd.Categorical:
    """The names of these OS-call name ids, one per id, its categories the names sorted
    ("?" for an id StringIds lacks)."""
    listed = len(ids) <= queries.LISTED_IDS_MAX
    sql = queries.strings_with_ids(ids.tolist()) if listed else queries.OS_CALL_NAMES
    names = read_strings(connection, sql)
    return pd.Categorical(
        pd.Series(ids).map(names.set_index("name_id")[NAME]).astype(object).fillna("?")
    )


@dataclass(frozen=True, slots=True)
class OsCallBlocks:
    """Where an export's OS calls lie, block by block (those holding calls), and their names."""

    path: Path
    first_rows: np.ndarray  # each block's first rowid (a block is BLOCK_ROWS rowids)
    earliest: np.ndarray  # its earliest start
    latest: np.ndarray  # its latest end
    name_ids: np.ndarray  # every name id of the table, sorted
    names: pd.Categorical  # their names, one per id (os_call_names)

    def near(self, lo: int, hi: int, tids: np.ndarray) -> OsCallWindow:
        """What a window whose steps span [lo, hi) on these threads reads (OsCallWindow)."""
        return OsCallWindow(self, lo, hi, tids)

    def read(
        self, lo: int, hi: int, tids: np.ndarray, *, ends_by: int | None = None
    ) -> pd.DataFrame:
        """The calls of these threads that overlap [lo, hi) (and end by ends_by), in rowid
        order, with their rowids."""
        frames: list[pd.DataFrame] = []
        blocks = (self.earliest < hi) & (self.latest > lo)
        for first, last in _row_ranges(self.first_rows[blocks]):
            frames.extend(
                read_table_chunks(
                    self.path, queries.OS_CALLS_OVERLAPPING, _READ, (first, last), (hi, lo)
                )
            )
        if not frames:
            return empty_frame(_READ)
        calls = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        keep = np.isin(calls[GLOBAL_TID].to_numpy(), tids)
        if ends_by is not None:
            keep &= calls[END_NS].to_numpy() <= ends_by
        kept: pd.DataFrame = calls[keep]
        return kept


@dataclass(frozen=True, slots=True)
class OsCallWindow:
    """The OS calls a window needs, read when called (on the process that analyses it): those
    of its step threads overlapping its steps' span [lo, hi), and the earlier ones that
    overlap the start of one of those, in the export's order. host.outermost_calls over
    them chooses, among those overlapping [lo, hi), the calls it chooses over every call."""

    blocks: OsCallBlocks
    lo: int
    hi: int
    tids: np.ndarray

    def __call__(self) -> pd.DataFrame:
        calls = self.blocks.read(self.lo, self.hi, self.tids)
        starts = calls[START_NS].to_numpy()
        if len(starts) and int(starts.min()) < self.lo:
            # A call begun before lo is nested in an earlier one when that ends after its
            # start: the calls ending in (its start, lo], not read yet.
            reached = int(starts.min())
            before = self.blocks.read(reached, self.lo, self.tids, ends_by=self.lo)
            calls = pd.concat([calls, before], ignore_index=True)
        calls = calls.iloc[np.argsort(calls[ROW_ID].to_numpy(), kind="stable")]
        at = np.searchsorted(self.blocks.name_ids, calls["name_id"].to_numpy())
        names = self.blocks.names
        return pd.DataFrame(
            {
                START_NS: calls[START_NS].to_numpy(),
                END_NS: calls[END_NS].to_numpy(),
                GLOBAL_TID: calls[GLOBAL_TID].to_numpy(),
                NAME: pd.Categorical.from_codes(names.codes[at], dtype=names.dtype),
            }
        )[list(OS_CALL_COLUMNS)]


_READ = {**OS_CALL_READ, ROW_ID: "int64"}


class MappedOsCalls:
    """RowSources.os_calls_near of an open export: OsCallBlocks.near, the table mapped on a
    thread of its own from when this is made (SQLite scans it without the GIL while the head
    is read and the steps are cut), or, early False, when a window first asks. An error met
    mapping (NeedsWholeTrace) is raised there."""

    def __init__(self, path: Path, tables: tuple[str, ...], *, early: bool) -> None:
        self._path = path
        self._tables = tables
        self._stop = threading.Event()
        self._mapped: OsCallBlocks | BaseException | None = None
        self._thread: threading.Thread | None = None
        if early:
            self._thread = threading.Thread(
                target=self._map, name="trace-gaps OS calls", daemon=True
            )
            self._thread.start()

    def __call__(self, lo: int, hi: int, tids: np.ndarray) -> OsCallWindow:
        return self.mapped()(lo, hi, tids)

    def mapped(self) -> Callable[[int, int, np.ndarray], OsCallWindow]:
        """The map's own near (it pickles: for workers that read their own windows)."""
        if self._thread is not None:
            self._thread.join()
        elif self._mapped is None:
            self._map()
        if isinstance(self._mapped, BaseException):
            raise self._mapped
        assert self._mapped is not None
        return self._mapped.near

    def close(self) -> None:
        """Stop mapping (the export is closing), and wait for the thread to end; not while a
        signal stops the process (read_ahead.ReadAhead.close says why)."""
        self._stop.set()
        if self._thread is not None and not stopping():
            self._thread.join()

    def _map(self) -> None:
        try:
            with open_export(self._path, values=False) as connection, reading_export(self._path):
                self._mapped = map_os_calls(connection, self._path, self._tables, self._stop)
        except BaseException as error:  # noqa: BLE001 - raised where a window asks
            self._mapped = error


def map_os_calls(
    connection: sqlite3.Connection,
    path: Path,
    tables: tuple[str, ...],
    stop: threading.Event | None = None,
) -> OsCallBlocks:
    """The map of the export's OS calls (one scan; stop: give up between blocks, raising
    NeedsWholeTrace). Raises NeedsWholeTrace where a name id is not an integer, or a
    block's least or greatest value is not (text or a BLOB is the greatest): read whole,
    the calls are refused or read as before. A REAL between them reads as when whole."""
    if queries.OS_CALL_TABLE not in tables:
        return _no_blocks(path)
    low, high = query_row(connection, queries.OS_CALL_ROWIDS) or (None, None)
    if low is None or high is None:
        return _no_blocks(path)
    blocks = list(range(int(low), int(high) + 1, BLOCK_ROWS))
    pieces = _pieces(blocks, min(usable_cores(), MAX_SCANNERS))
    firsts, earliest, latest = [], [], []
    ids: set[int] = set()
    for piece in threaded_map(_map_piece, [(path, piece, stop) for piece in pieces]):
        firsts += piece.firsts
        earliest += piece.earliest
        latest += piece.latest
        ids |= piece.ids
    name_ids = np.array(sorted(ids), dtype=np.int64)
    return OsCallBlocks(
        path,
        np.array(firsts, dtype=np.int64),
        np.array(earliest, dtype=np.int64),
        np.array(latest, dtype=np.int64),
        name_ids,
        os_call_names(connection, name_ids),
    )


@dataclass(slots=True)
class _Mapped:
    """The map of some blocks: each one's first rowid, earliest start, latest end; the ids."""

    firsts: list[int]
    earliest: list[int]
    latest: list[int]
    ids: set[int]


def _map_piece(path: Path, blocks: list[int], stop: threading.Event | None) -> _Mapped:
    """The map of these blocks, read on a connection of its own (a scanning thread's)."""
    with open_export(path, values=False) as connection, reading_export(path):
        return _map_blocks(connection, blocks, stop)


def _map_blocks(
    connection: sqlite3.Connection, blocks: list[int], stop: threading.Event | None
) -> _Mapped:
    mapped = _Mapped([], [], [], set())
    for first in blocks:
        if stop is not None and stop.is_set():
            raise NeedsWholeTrace("the export closed while its OS calls were mapped")
        row = query_row(connection, queries.OS_CALL_BLOCK, (first, first + BLOCK_ROWS))
        count, named, start, last_start, end, tid, names = row or (0, 0, None, None, None, None, "")
        if not count:
            continue
        block_ids = str(names).split(",")
        # A value the readers refuse, or one the block's bounds cannot hold: read whole.
        if named != count or not all(i.isdigit() for i in block_ids):
            raise NeedsWholeTrace("OSRT_API holds a name id that is not an integer")
        if not all(type(v) is int for v in (start, last_start, end, tid)):
            raise NeedsWholeTrace("OSRT_API holds a time or thread that is not an integer")
        mapped.firsts.append(first)
        mapped.earliest.append(start)
        mapped.latest.append(end)
        mapped.ids.update(int(i) for i in block_ids)
    return mapped


# Blocks a scanning thread takes at least; the map is scanned by up to MAX_SCANNERS threads,
# each on its own connection (SQLite steps without the GIL), in consecutive pieces.
MIN_BLOCKS_A_SCANNER = 64
MAX_SCANNERS = 8


def _pieces(blocks: list[int], scanners: int) -> list[list[int]]:
    """The blocks in up to `scanners` consecutive pieces of MIN_BLOCKS_A_SCANNER at least."""
    count = max(1, min(scanners, len(blocks) // MIN_BLOCKS_A_SCANNER))
    cuts = np.linspace(0, len(blocks), count + 1).round().astype(int)
    return [blocks[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _no_blocks(path: Path) -> OsCallBlocks:
    empty = np.zeros(0, dtype=np.int64)
    return OsCallBlocks(path, empty, empty, empty, empty, pd.Categorical([]))


def _row_ranges(firsts: np.ndarray) -> list[tuple[int, int]]:
    """Blocks that follow one another, as one rowid range [first, last) each."""
    if not len(firsts):
        return []
    breaks = np.flatnonzero(np.diff(firsts) != BLOCK_ROWS) + 1
    starts = firsts[np.r_[0, breaks]]
    ends = firsts[np.r_[breaks - 1, len(firsts) - 1]] + BLOCK_ROWS
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
