"""SQL that reads one of the reader's table queries in chunks: over rowid ranges, from a row
number on, or packed as one row of text per chunk (nsys/read.py). Every other statement is in
queries.py; these only wrap its table queries, never input."""

from __future__ import annotations


def rows_from(sql: str) -> str:
    """A query (of the reader's, none with a LIMIT) from its row number `?` on, in the same
    order: where sqlite3 reads on after the Arrow driver stopped."""
    return f"{sql} LIMIT -1 OFFSET ?"


def in_rowids(sql: str) -> str:
    """One of the reader's table queries over rowids [?, ?) (its own `?`s, if any, first)."""
    return f"{sql.rstrip()} {_and_or_where(sql)} rowid >= ? AND rowid < ?"


def in_rowids_through(sql: str) -> str:
    """As in_rowids, over rowids [?, ?] (SQLite's largest rowid has no rowid after it)."""
    return f"{sql.rstrip()} {_and_or_where(sql)} rowid >= ? AND rowid <= ?"


def _and_or_where(sql: str) -> str:
    return "AND" if "WHERE" in sql.split() else "WHERE"


# A table query's row id, among its columns when read packed (packed_rows).
PACKED_ROW_ID = "packed_row_id"


def packed_chunk(sql: str) -> str:
    """The rows of one of the reader's table queries (of one table) in one chunk, numbered by
    their rowid (PACKED_ROW_ID): after its own `?`s, at most ? of them from rowid ? through
    rowid ?, in rowid order."""
    assert sql.lstrip().startswith("SELECT ")
    numbered = sql.replace("SELECT ", f"SELECT rowid AS {PACKED_ROW_ID}, ", 1)
    return f"{in_rowids_through(numbered)} ORDER BY rowid LIMIT ?"


def packed_rows(sql: str, columns: list[str]) -> str:
    """A chunk of one of the reader's table queries (packed_chunk; every column an integer)
    as one row: how many rows; then per column (the rowid first) its values as text joined
    by commas and its largest value (text or a BLOB sorts after every number in SQLite, so
    a largest value that is no integer shows one); last the sum of each value less itself
    (a REAL value makes it a REAL: SUM of integers alone is an integer). SQLite formats the
    text without holding Python's lock; numpy parses it (nsys/read.py)."""
    every = [PACKED_ROW_ID, *columns]
    texts = ", ".join(f"GROUP_CONCAT({c}), MAX({c})" for c in every)
    zero = " + ".join(f"({c} - {c})" for c in every)
    return f"SELECT COUNT(*), {texts}, SUM({zero}) FROM ({packed_chunk(sql)})"


def packed_chunk_end(sql: str) -> str:
    """The last rowid of a chunk (packed_chunk's parameters)."""
    return f"SELECT MAX({PACKED_ROW_ID}) FROM ({packed_chunk(sql)})"
