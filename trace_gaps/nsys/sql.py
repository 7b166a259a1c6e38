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
from typing import Any

import pandas as pd

from trace_gaps.errors import NotAnExportError


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
    """The frame with these dtypes; a NULL or text where a number belongs raises a
    NotAnExportError naming the table, the column and how many rows hold it."""
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
            nulls = int(values.isna().sum())
            text = int((pd.to_numeric(values, errors="coerce").isna() & values.notna()).sum())
            if nulls or text:
                what = f"NULL in {nulls:,}" if nulls else f"text in {text:,}"
                raise NotAnExportError(
                    f"has {what} rows of {_source_column(sql, column)}, where nsys always "
                    "writes a number; the export is damaged or from an unsupported nsys "
                    "version: re-export it, and report it with the nsys version if that does "
                    "not help"
                ) from error
        raise


def _source_column(sql: str, alias: str) -> str:
    """TABLE.column behind a query's `column AS alias` (the alias when it is an expression)."""
    table = re.search(r"\bFROM\s+(\w+)", sql)
    column = re.search(rf"([\w.\"]+)\s+AS\s+{re.escape(alias)}\b", sql)
    name = column.group(1).split(".")[-1].strip('"') if column else alias
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        name = alias
    return f"{table.group(1)}.{name}" if table else name
