"""Read one span of an export's op and call tables on a process of its own: a window worker
that reads its own rows (analysis/engine/spans.analyse_in_spans), so that reading, the largest
part of the main process's work, is shared by every core.

A worker analysing windows [a, b) needs the rows the windows' own stream would hold there:
those starting from the time window a owns on, and, read first and left out again by the
windows' own drop rule (the warm-up, window a - 1), those of window a - 1 and any op or call
still running into it. No row lasts longer than the export's longest op or call, so the
worker reads from lo(a - 1) - longest - CALL_LEAD_NS, up to its last window's read limit
(and the calls' lead past it): in every table the rows between the rowids whose rows start
there (the tables are in start order, found by binary search on rowid; the worker's stream
checks the order of every row it reads, and every pair of neighbouring rows is read by some
worker, so an export out of order is still refused).

Each row is counted once, in the tally of the worker whose own time [lo(a), lo(b)) holds
its start (by rowid: the span's own rows lie between the first rowids starting at lo(a)
and at lo(b)); the rows read before and after are cleaned the same way, counted nowhere.
The main process adds the workers' tallies up in place of its own (ExportSpans.settle).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trace_gaps.model import NeedsWholeTrace
from trace_gaps.nsys import queries
from trace_gaps.nsys.chunks import Pieces, call_chunks, op_chunks, op_queries
from trace_gaps.nsys.cleaning import Tally
from trace_gaps.nsys.export import list_tables, open_export, reading_export
from trace_gaps.nsys.head import LATEST_POSSIBLE_NS, capture_duration, capture_stop
from trace_gaps.nsys.names import Names
from trace_gaps.nsys.os_calls import MappedOsCalls
from trace_gaps.nsys.read_ahead import Readers, Started
from trace_gaps.nsys.sql import query_row, query_value
from trace_gaps.parallel import threaded_map

_NEVER = np.iinfo(np.int64).max
_EARLIEST = np.iinfo(np.int64).min
_SCAN_PIECES = 4  # pieces of each table scanned at once for the longest row


@dataclass(frozen=True, slots=True)
class SpanRows:
    """One span's chunks, per op table and for the calls, and its tally once read."""

    ops: list[tuple[str, Iterator[pd.DataFrame]]]
    calls: Iterator[pd.DataFrame]
    counts: Callable[[], dict[str, object]]


@dataclass(frozen=True, slots=True)
class SpanReader:
    """What a worker needs to read a span of an export (sent to it: a path and a flag)."""

    path: Path
    read_ahead: bool = True

    @contextmanager
    def rows(
        self, read_from_ns: int, own_from_ns: int, own_until_ns: int, read_until_ns: int
    ) -> Iterator[SpanRows]:
        """The rows starting in [read_from_ns, read_until_ns) (as the stream asks for them),
        the ones starting in [own_from_ns, own_until_ns) counted in the span's tally."""
        path = self.path
        with open_export(path, values=False) as connection:
            tables = list_tables(connection, path)
            with reading_export(path):
                capture = (capture_duration(connection, tables), capture_stop(connection, tables))
                queried = op_queries(connection, tables)
                times = (read_from_ns, own_from_ns, own_until_ns, read_until_ns)
                bounds = {
                    table: _rowid_bounds(connection, table, times)
                    for table in [*(t for t, _ in queried), queries.RUNTIME_TABLE]
                    if table in tables
                }
            names = Names(connection, path, tables)
            tally, elsewhere = Tally(), Tally()
            readers = Readers(threads=self.read_ahead)

            def pieces(table: str) -> Pieces:
                read, own, until, end = bounds.get(table, (0, 0, 0, 0))
                return [((read, own), elsewhere), ((own, until), tally), ((until, end), elsewhere)]

            try:
                ops = [
                    (table, op_chunks(path, sql, names, tally, capture, readers, pieces(table))())
                    for table, sql in queried
                ]
                calls = call_chunks(
                    path, tables, names, tally, capture, readers, pieces(queries.RUNTIME_TABLE)
                )()
                yield SpanRows(ops, calls, tally.snapshot)
            finally:
                readers.close()


def _rowid_bounds(
    connection: sqlite3.Connection, table: str, times: tuple[int, int, int, int]
) -> tuple[int, int, int, int]:
    """The first rowid starting at or after each time (the earliest time: rowid 0, the
    latest: past the last row)."""
    end = int(query_value(connection, queries.largest_rowid(table)) or 0) + 1
    found = [
        0
        if time == _EARLIEST
        else end
        if time == _NEVER
        else _first_rowid_from(connection, table, time, end)
        for time in times
    ]
    read, own, until, last = (int(r) for r in np.maximum.accumulate(found))
    return read, own, until, last  # an export out of order is refused as it is read


def _first_rowid_from(connection: sqlite3.Connection, table: str, time_ns: int, end: int) -> int:
    """The smallest rowid from which the first row with a real start starts at or after
    time_ns, in a table sorted by start (binary search, one b-tree descent a probe)."""
    lo, hi = -1, end  # the answer lies in (lo, hi]
    probe = queries.timed_start_from_rowid(table)
    while hi - lo > 1:
        middle = (lo + hi) // 2
        row = query_row(connection, probe, (middle,))
        if row is not None and not (type(row[0]) is int and type(row[1]) is int):
            # A time that is not an integer: the stream, reading every row, decides.
            raise NeedsWholeTrace(f"{table} holds a start that is not an integer")
        if row is None or row[1] >= time_ns:
            hi = middle
        else:
            lo = int(row[0])  # every rowid up to the row found starts before time_ns
            if lo >= hi:
                lo = hi - 1
    return hi


class ExportSpans:
    """RowSources.spans of an open export: the reader its workers use, the longest row the
    warm-up must reach back for, and the workers' tallies taken in (settle)."""

    def __init__(
        self,
        path: Path,
        tables: tuple[str, ...],
        tally: Tally,
        readers: Readers,
        os_calls: MappedOsCalls,
        started: list[Started],
        *,
        read_ahead: bool,
        early: bool = False,
    ) -> None:
        """started: this process's own early reads, stopped when spans take over
        (stop_reading); early: scan for the longest row now, on threads (longest_row_ns
        waits for it)."""
        self.reader = SpanReader(path, read_ahead)
        self._os_calls = os_calls
        self._path = path
        self._tables = tables
        self._tally = tally
        self._readers = readers
        self._started = started
        self._longest: int | BaseException | None = None
        self._scan: threading.Thread | None = None
        if early:
            self._scan = threading.Thread(target=self._find_longest, daemon=True)
            self._scan.start()

    def _find_longest(self) -> None:
        try:
            self._longest = _longest_row(self._path, self._tables)
        except BaseException as error:  # noqa: BLE001 - raised where it is asked for
            self._longest = error

    def longest_row_ns(self) -> int:
        """The longest op or call of the export (impossible durations left out), scanned
        in pieces on threads, inside SQLite."""
        if self._scan is not None:
            self._scan.join()
        elif self._longest is None:
            self._find_longest()
        if isinstance(self._longest, BaseException):
            raise self._longest
        assert self._longest is not None
        return self._longest

    def os_calls_near(self) -> Callable[[int, int, np.ndarray], Callable[[], pd.DataFrame]]:
        """The OS-call map itself, for the workers (each window reads its own calls)."""
        return self._os_calls.mapped()

    def stop_reading(self) -> None:
        """Stop this process's own reading, before the workers read their spans: no thread
        of it runs on (the workers can be forked from this process), and what it counted is
        forgotten (a stream started again, if the spans are refused, counts every row)."""
        for early in self._started:
            early.discard()
        self._readers.close()
        self._tally.restore(Tally().snapshot())

    def settle(self, counts: list[dict[str, object]]) -> None:
        """Take the workers' tallies as the export's."""
        self._tally.restore(_merged_counts(counts))


def _merged_counts(counts: list[dict[str, Any]]) -> dict[str, object]:
    total = Tally()
    for part in counts:
        total.device_ops.extend(part["device_ops"])
        total.earliest = min(total.earliest, part["earliest"])
        total.untimed += part["untimed"]
        total.unresolved_calls += part["unresolved_calls"]
        total.unresolved_kernels += part["unresolved_kernels"]
        for name in ("op_rows", "call_rows"):
            mine, theirs = getattr(total, name), part[name]
            setattr(
                total,
                name,
                replace(
                    mine,
                    read=mine.read + theirs.read,
                    impossible=mine.impossible + theirs.impossible,
                    duplicated=mine.duplicated + theirs.duplicated,
                ),
            )
    return total.snapshot()


def _longest_row(path: Path, tables: tuple[str, ...]) -> int:
    with open_export(path, values=False) as connection, reading_export(path):
        longest_possible = capture_duration(connection, tables) or LATEST_POSSIBLE_NS
        scans: list[tuple[str, int, int]] = []
        for table in [*queries.OP_TABLES, queries.RUNTIME_TABLE]:
            if table not in tables:
                continue
            end = int(query_value(connection, queries.largest_rowid(table)) or 0) + 1
            cuts = np.linspace(0, end, _SCAN_PIECES + 1).astype(np.int64)
            scans.extend(
                (table, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a
            )
    tasks = [(path, table, lo, hi, longest_possible) for table, lo, hi in scans]
    return max(threaded_map(_longest_in, tasks), default=0)


def _longest_in(path: Path, table: str, lo: int, hi: int, longest_possible: int) -> int:
    """The longest row of a table's rowids [lo, hi), on a connection of its own."""
    with open_export(path, values=False) as connection, reading_export(path):
        value = query_value(connection, queries.longest_row(table), (lo, hi, longest_possible))
    if value is not None and type(value) is not int:
        raise NeedsWholeTrace(f"{table} holds a time that is not an integer")
    return value or 0
