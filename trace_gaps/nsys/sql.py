"""Every statement run on an export's connection, and the one policy for bad values.

The streamed tables are read in chunks by nsys/read.py; the small tables and the scalar
questions (a setting, a count, a binary search by rowid) are asked here. Either way a
frame gets its dtypes through typed_frame: a NULL or text where nsys always writes a number
is an error that names the table, the column and the rows, never a pandas traceback or a
silent NaN.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from typing import Any

import pandas as pd

from trace_gaps.errors import NotAnExportError
from trace_gaps.nsys.queries import bad_values


def query_frame(
    connection: sqlite3.Connection,
    sql: str,
    dtypes: dict[str, str] | None = None,
    params: Sequence[Any] = (),
) -> pd.DataFrame:
    """The statement's rows as a frame, its columns of `dtypes` typed by typed_frame."""
    frame = pd.read_sql_query(sql, connection, params=tuple(params) or None)
    return typed_frame(frame, dtypes, sql) if dtypes else frame


def query_rows(
    connection: sqlite3.Connection, sql: str, params: Sequence[Any] = ()
) -> list[tuple[Any, ...]]:
    """Every row of the statement (for small results: tables, settings, GPUs)."""
    return connection.execute(sql, tuple(params)).fetchall()


def query_row(
    connection: sqlite3.Connection, sql: str, params: Sequence[Any] = ()
) -> tuple[Any, ...] | None:
    """The statement's first row, None when it has none; the rest are never read."""
    row: tuple[Any, ...] | None = connection.execute(sql, tuple(params)).fetchone()
    return row


def query_value(connection: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the statement's first row (None when it has no row)."""
    row = query_row(connection, sql, params)
    return row[0] if row else None


def typed_frame(frame: pd.DataFrame, dtype: dict[str, str], sql: str) -> pd.DataFrame:
    """The frame with these dtypes; a NULL, text or a BLOB where a number belongs raises
    BadValues naming the export's table and column and how many rows of the chunk hold it
    (reading_export counts them in the whole table)."""
    # Only the columns not already of their dtype (Arrow's integers mostly are): astype
    # on a whole chunk costs the GIL that the analysis thread waits for.
    have = frame.dtypes
    differ = {c: d for c, d in dtype.items() if c in have.index and str(have[c]) != d}
    try:
        return frame.astype(differ) if differ else frame
    except (ValueError, TypeError, OverflowError) as error:
        for column in dtype:
            if column not in frame.columns or dtype[column] in ("object", "category"):
                continue
            values = frame[column]
            blobs = values.map(lambda v: isinstance(v, bytes | bytearray)).astype(bool)
            other = pd.to_numeric(values.mask(blobs), errors="coerce").isna() & values.notna()
            kinds = (("NULL", values.isna()), ("a BLOB", blobs), ("text", other & ~blobs))
            for kind, rows in kinds:
                if rows.any():
                    table, name = source_column(sql, column)
                    raise BadValues(kind, table, name, int(rows.sum())) from error
        raise


class BadValues(NotAnExportError):
    """A NULL, text or a BLOB in rows of an export's column where nsys always writes a number.

    table is None when the query's column is no column of one table (its alias is named)."""

    def __init__(self, kind: str, table: str | None, column: str, rows: int) -> None:
        self.kind, self.table, self.column, self.rows = kind, table, column, rows
        where = f"{table}.{column}" if table else column
        super().__init__(
            f"has {kind} in {rows:,} rows of {where}, where nsys always writes a number; the "
            "export is damaged or from an unsupported nsys version: re-export it, and report "
            "it with the nsys version if that does not help"
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (BadValues, (self.kind, self.table, self.column, self.rows))

    def counted(self, uri: str) -> BadValues:
        """The same error with its rows counted in the export's whole table (a chunk's count
        otherwise); itself when they cannot be counted."""
        if self.table is None:
            return self
        try:
            with closing(sqlite3.connect(uri, uri=True)) as connection:
                row = connection.execute(bad_values(self.table, self.column, self.kind))
                rows = int(row.fetchone()[0])
        except (sqlite3.Error, TypeError, ValueError):
            return self
        return BadValues(self.kind, self.table, self.column, max(rows, self.rows))


# Words a select item's expression holds that name no column.
_SQL_WORDS = frozenset(
    {"AS", "AND", "OR", "NOT", "NULL", "IS", "CASE", "WHEN", "THEN", "ELSE", "END", "CAST", "IN"}
)


def source_column(sql: str, alias: str) -> tuple[str | None, str]:
    """(TABLE, column) behind a query's `expression AS alias`: the first column the
    expression reads (`(globalPid >> 24) & 16777215 AS pid` reads globalPid), in the table
    its prefix names or the query's first FROM table; (None, alias) when none is found."""
    item = re.search(
        rf"(?:SELECT|,)\s*((?:[^,()]|\((?:[^()]|\([^()]*\))*\))+?)\s+AS\s+{re.escape(alias)}\b",
        sql,
        re.IGNORECASE,
    )
    expression = item.group(1) if item else alias
    # A quoted name is a column whatever it spells ("end").
    for prefix, quote, name, call in re.findall(
        r'(?:(\w+)\.)?("?)([A-Za-z_]\w*)"?(\s*\()?', expression
    ):
        if call or (not quote and name.upper() in _SQL_WORDS):
            continue
        table = re.search(rf"\b(\w+)\s+AS\s+{prefix}\b", sql) if prefix else None
        first = re.search(r"\bFROM\s+([A-Za-z_]\w*)", sql)
        named = table.group(1) if table else first.group(1) if first else None
        return named, name
    return None, alias
