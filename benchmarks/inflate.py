"""Inflate a real export: repeat its timed rows N times, shifted in time, with fresh correlation ids.

    python benchmarks/inflate.py REAL.sqlite --factor N -o BIG.sqlite [--gap-ns G]

The output keeps the schema of the input (the file is copied first). Every table with a
`start` or `timestamp` column (kernels, memcpys, memsets, graph trace, runtime API, NVTX
events, profiler overhead, syncs, ...) gets N - 1 more copies of its original rows; copy k
(1 ≤ k < N) has its times shifted by k × (span of the original + gap) and its correlation
ids by k × (max correlationId + 1), so launches still join to their own ops and to nothing
else; the capture's stop and duration (ANALYSIS_DETAILS) move past the last copy. Rows
CUPTI could not time (start = end = 0, or timestamp 0) stay untimed. The work
runs inside SQLite (INSERT ... SELECT), with no Python loop per row.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from pathlib import Path

TIME_COLUMNS = ("start", "end", "timestamp")
CORRELATION = "correlationId"
DEFAULT_GAP_NS = 1_000_000
ANALYSIS_TABLE = "ANALYSIS_DETAILS"  # the capture's start, stop and duration


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(connection: sqlite3.Connection) -> list[str]:
    rows = connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    )
    return [row[0] for row in rows]


def _columns(connection: sqlite3.Connection, table: str) -> list[tuple[str, int]]:
    """(name, pk) of each column."""
    return [(row[1], row[5]) for row in connection.execute(f"PRAGMA table_info({_quote(table)})")]


def timed_tables(connection: sqlite3.Connection) -> list[str]:
    """Tables with a start or timestamp column: the ones whose rows are events."""
    return [
        table
        for table in _tables(connection)
        if {"start", "timestamp"} & {name for name, _ in _columns(connection, table)}
    ]


def span_and_max_correlation(
    connection: sqlite3.Connection, tables: list[str]
) -> tuple[int, int, int]:
    """(first timed ns, last timed ns, max correlation id) over the given tables."""
    first, last, max_corr = None, None, 0
    for table in tables:
        names = {name for name, _ in _columns(connection, table)}
        q = _quote(table)
        if "start" in names:
            end = '"end"' if "end" in names else '"start"'
            lo, hi = connection.execute(
                f'SELECT MIN("start"), MAX(COALESCE({end}, "start")) FROM {q} '
                f'WHERE NOT ("start" = 0 AND COALESCE({end}, 0) = 0)'
            ).fetchone()
        else:
            lo, hi = connection.execute(
                f'SELECT MIN("timestamp"), MAX("timestamp") FROM {q} WHERE "timestamp" > 0'
            ).fetchone()
        if lo is not None:
            first = lo if first is None else min(first, lo)
            last = hi if last is None else max(last, hi)
        if CORRELATION in names:
            value = connection.execute(f"SELECT MAX({_quote(CORRELATION)}) FROM {q}").fetchone()[0]
            max_corr = max(max_corr, int(value or 0))
    return int(first or 0), int(last or 0), max_corr


def _select_expressions(columns: list[tuple[str, int]]) -> list[str]:
    names = {name for name, _ in columns}
    untimed = '(s."start" = 0 AND COALESCE(s."end", 0) = 0)' if "start" in names else "0"
    expressions = []
    for name, pk in columns:
        col = f"s.{_quote(name)}"
        if pk:
            expressions.append("NULL")  # let SQLite assign a fresh key
        elif name in ("start", "end"):
            expressions.append(f"CASE WHEN {untimed} THEN {col} ELSE {col} + k.i * :shift END")
        elif name == "timestamp":
            expressions.append(f"CASE WHEN {col} = 0 THEN {col} ELSE {col} + k.i * :shift END")
        elif name == CORRELATION:
            expressions.append(f"{col} + k.i * :corr_stride")
        else:
            expressions.append(col)
    return expressions


def _stretch_capture(connection: sqlite3.Connection, copies: int, shift: int) -> None:
    """Move the capture's stop (and its duration) past the last copy: trace-gaps leaves out,
    as impossible, rows that end after the capture stopped, and would drop every copy."""
    columns = {name for name, _ in _columns(connection, ANALYSIS_TABLE)}
    for column in ("stopTime", "duration"):
        if column in columns:
            connection.execute(
                f"UPDATE {ANALYSIS_TABLE} SET {column} = {column} + ? WHERE {column} > 0",
                (copies * shift,),
            )


def inflate(
    source: Path, output: Path, factor: int, *, gap_ns: int = DEFAULT_GAP_NS
) -> dict[str, int]:
    """Write `output`: `source` with its event rows repeated `factor` times. Returns rows per table."""
    if factor < 1:
        raise ValueError("factor must be >= 1")
    if output.resolve() == source.resolve():
        raise ValueError("output must differ from the source")
    shutil.copyfile(source, output)
    connection = sqlite3.connect(output)
    try:
        connection.execute("PRAGMA journal_mode = OFF")
        connection.execute("PRAGMA synchronous = OFF")
        connection.execute("PRAGMA temp_store = MEMORY")
        tables = timed_tables(connection)
        first, last, max_corr = span_and_max_correlation(connection, tables)
        params = {"shift": (last - first) + gap_ns, "corr_stride": max_corr + 1, "n": factor - 1}
        counts: dict[str, int] = {}
        for table in tables:
            columns = _columns(connection, table)
            q = _quote(table)
            connection.execute("DROP TABLE IF EXISTS temp._inflate_source")
            connection.execute(f"CREATE TEMP TABLE _inflate_source AS SELECT * FROM main.{q}")
            if factor > 1:
                names = ", ".join(_quote(name) for name, _ in columns)
                connection.execute(
                    "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < :n) "
                    f"INSERT INTO main.{q} ({names}) "
                    f"SELECT {', '.join(_select_expressions(columns))} "
                    "FROM k CROSS JOIN temp._inflate_source AS s",
                    params,
                )
            connection.execute("DROP TABLE temp._inflate_source")
            counts[table] = int(connection.execute(f"SELECT COUNT(*) FROM main.{q}").fetchone()[0])
        _stretch_capture(connection, factor - 1, params["shift"])
        connection.commit()
    finally:
        connection.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a real nsys SQLite export")
    parser.add_argument("--factor", type=int, required=True, help="how many copies of the rows")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the inflated export")
    parser.add_argument(
        "--gap-ns", type=int, default=DEFAULT_GAP_NS, help="idle time between copies"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    counts = inflate(args.source, args.output, args.factor, gap_ns=args.gap_ns)
    elapsed = time.perf_counter() - started
    for table, count in counts.items():
        print(f"{table:40s} {count:>12,d}")
    size = args.output.stat().st_size
    print(f"wrote {args.output} ({size / 1e9:.2f} GB) in {elapsed:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
