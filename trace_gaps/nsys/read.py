"""The one reader of an export's queries: their rows in typed chunks, through Arrow or sqlite3.

The standard sqlite3 module reads by default: the big integer tables packed
(read_table_chunks: SQLite writes each chunk's columns as text, numpy parses it), the rest
through pandas. With the `fast` extra (adbc-driver-sqlite + pyarrow) installed, and
TRACE_GAPS_NO_ARROW unset, the ADBC SQLite driver reads instead: faster still, and its rows
are the same. It hands over only
chunks it read exactly as sqlite3 would. At the first it cannot read so (a driver error, a
NULL in a number column, a BLOB or invalid UTF-8 where text belongs), sqlite3 reads the rest
of the query from that row. So there is one policy for bad values, whichever reader is
installed: sqlite3 decodes text with replacement, and typed_frame names the table, column
and rows of a NULL or text where nsys always writes a number.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.nsys import queries_chunked
from trace_gaps.nsys.export import export_uri, open_export, reading_export
from trace_gaps.nsys.sql import typed_frame

# Set to 1 to read through sqlite3 even when the Arrow driver is installed.
ARROW_READER_ENV = "TRACE_GAPS_NO_ARROW"

CHUNK_ROWS = 100_000


def arrow_driver_present() -> bool:
    """Whether the `fast` extra (adbc-driver-sqlite and pyarrow) is installed."""
    return all(
        importlib.util.find_spec(name) is not None for name in ("adbc_driver_sqlite", "pyarrow")
    )


def arrow_installed() -> bool:
    """Whether reads go through Arrow (the `fast` extra, not turned off)."""
    return not os.environ.get(ARROW_READER_ENV) and arrow_driver_present()


def read_chunks(
    path: Path, sql: str, dtypes: dict[str, str], params: tuple[int, ...] = ()
) -> Iterator[pd.DataFrame]:
    """The query's rows (params: its `?` values), CHUNK_ROWS at a time in the order SQLite
    gives them, with these dtypes; at least one chunk (an empty result is one empty chunk
    with the query's columns).

    Each query reads on a connection of its own, so this may run on a read-ahead thread.
    """
    done = 0
    if arrow_installed():
        frames = _arrow_frames(path, sql, params)
        try:
            for frame in frames:
                with reading_export(path):
                    chunk = typed_frame(frame, dtypes, sql)
                done += len(chunk)
                yield chunk
            if done:
                return
            # No rows: sqlite3 gives the empty result its columns.
        except _NotExact:
            pass  # sqlite3 reads on from the row reached
        finally:
            frames.close()
    yield from _sqlite_chunks(path, sql, dtypes, params, skip=done)


def read_table_chunks(
    path: Path,
    sql: str,
    dtypes: dict[str, str],
    rows: tuple[int, int] | None = None,
    params: tuple[int, ...] = (),
) -> Iterator[pd.DataFrame]:
    """The rows of one of the reader's table queries (of one table; params: its own `?`s),
    those of rowids [lo, hi) when given, as read_chunks gives them.

    Through sqlite3, a query whose every column is an integer is read packed
    (queries_chunked.packed_rows): SQLite writes each chunk's columns as text, one string a column,
    and numpy parses them; no Python object is made per value, and SQLite's part runs
    without Python's lock, beside the analysis. A chunk that cannot be read so exactly (a
    NULL, text, a BLOB or a REAL value, rows out of rowid order) is read row by row as
    before, so bad values meet the same checks and the same words.
    """
    if arrow_installed() or not all(str(d).startswith("int") for d in dtypes.values()):
        if rows is None:
            return read_chunks(path, sql, dtypes, params)
        return read_chunks(path, queries_chunked.in_rowids(sql), dtypes, (*params, *rows))
    return _packed_chunks(path, sql, dtypes, rows, params)


def _packed_chunks(
    path: Path,
    sql: str,
    dtypes: dict[str, str],
    rows: tuple[int, int] | None,
    params: tuple[int, ...],
) -> Iterator[pd.DataFrame]:
    # Rowids [lo, last]: SQLite's rowids are 64-bit signed integers.
    lo, last = (rows[0], rows[1] - 1) if rows is not None else (-(2**63), 2**63 - 1)
    exact = queries_chunked.in_rowids_through(sql)
    with open_export(path, values=False) as connection:
        with reading_export(path):
            described = connection.execute(f"{sql} LIMIT 0", params).description
        columns = [d[0] for d in described]
        if set(columns) != set(dtypes):  # not a query of integers alone: row by row
            yield from _sqlite_chunks(path, exact, dtypes, (*params, lo, last), skip=0)
            return
        packed = queries_chunked.packed_rows(sql, columns)
        empty = True
        while lo <= last:
            bounds = (*params, lo, last, CHUNK_ROWS)
            with reading_export(path):
                row = connection.execute(packed, bounds).fetchone()
            if not row[0]:
                break
            unpacked = _unpacked(row, columns)
            if unpacked is None:  # this chunk row by row, as sqlite3 reads any query
                with reading_export(path):
                    end = connection.execute(
                        queries_chunked.packed_chunk_end(sql), bounds
                    ).fetchone()[0]
                chunks = _sqlite_chunks(path, exact, dtypes, (*params, lo, end), skip=0)
            else:
                end, frame = unpacked
                with reading_export(path):
                    chunks = iter([typed_frame(frame, dtypes, sql)])
            for chunk in chunks:
                empty = False
                yield chunk
            if end == 2**63 - 1:
                break
            lo = end + 1
        if empty:
            nothing = pd.DataFrame({c: np.array([], np.int64) for c in columns})
            yield typed_frame(nothing, dtypes, sql)


def _unpacked(row: tuple[object, ...], columns: list[str]) -> tuple[int, pd.DataFrame] | None:
    """The last rowid and the frame of a packed chunk (queries_chunked.packed_rows), None when it
    cannot be read exactly so."""
    count, zero = row[0], row[-1]
    if not isinstance(zero, int):  # a REAL value, or none at all
        return None
    values: dict[str, np.ndarray] = {}
    for at, name in enumerate([queries_chunked.PACKED_ROW_ID, *columns]):
        text, largest = row[1 + 2 * at], row[2 + 2 * at]
        if not isinstance(text, str) or not isinstance(largest, int):  # NULL, text or BLOB
            return None
        try:
            parsed = np.fromstring(text, dtype=np.int64, sep=",")
        except ValueError:  # where numpy's warnings are errors: not all of it is numbers
            return None
        if len(parsed) != count:  # a NULL skipped, or a value that is not all digits
            return None
        values[name] = parsed
    rowids = values.pop(queries_chunked.PACKED_ROW_ID)
    if len(rowids) > 1 and not bool((rowids[1:] > rowids[:-1]).all()):
        return None
    return int(rowids[-1]), pd.DataFrame(values, copy=False)


def read_frame(path: Path, sql: str, dtypes: dict[str, str]) -> pd.DataFrame:
    """The query's rows as one frame (read_chunks concatenated)."""
    chunks = list(read_chunks(path, sql, dtypes))
    return chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)


def _sqlite_chunks(
    path: Path, sql: str, dtypes: dict[str, str], params: tuple[int, ...], *, skip: int
) -> Iterator[pd.DataFrame]:
    with open_export(path, values=False) as connection:
        rows = pd.read_sql_query(
            queries_chunked.rows_from(sql) if skip else sql,
            connection,
            params=(*params, skip) if skip else (params or None),
            chunksize=CHUNK_ROWS,
        )
        while True:
            with reading_export(path):
                read = next(rows, None)
                if read is not None:
                    read = typed_frame(read, dtypes, sql)
            if read is None:
                return
            yield read


class _NotExact(Exception):
    """Arrow cannot read the query on as sqlite3 would."""


def _arrow_frames(
    path: Path, sql: str, params: tuple[int, ...]
) -> Generator[pd.DataFrame, None, None]:
    """The query's non-empty chunks through ADBC's SQLite driver; _NotExact where it stops."""
    import adbc_driver_sqlite
    import adbc_driver_sqlite.dbapi as adbc_sqlite
    import pyarrow as pa  # type: ignore[import-untyped]

    batch_rows = adbc_driver_sqlite.StatementOptions.BATCH_ROWS.value
    try:
        connection = adbc_sqlite.connect(export_uri(path))
    except Exception as error:  # noqa: BLE001 - any driver trouble: sqlite3 reads it
        raise _NotExact from error
    with connection, connection.cursor() as cursor:
        try:
            cursor.adbc_statement.set_options(**{batch_rows: str(CHUNK_ROWS)})
            cursor.execute(sql, params or None)
            reader = cursor.fetch_record_batch()
        except Exception as error:  # noqa: BLE001 - any driver trouble: sqlite3 reads it
            raise _NotExact from error
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except Exception as error:  # noqa: BLE001 - a damaged row: sqlite3 reads on
                    raise _NotExact from error
                if not _exact(batch, pa):
                    raise _NotExact
                if batch.num_rows:
                    yield batch.to_pandas()
        finally:
            reader.close()


def _exact(batch: object, pa: object) -> bool:
    """Whether a batch holds what sqlite3 would give: text as valid UTF-8, no NULL elsewhere."""
    types = pa.types  # type: ignore[attr-defined]
    for column in batch.columns:  # type: ignore[attr-defined]
        if types.is_binary(column.type) or types.is_large_binary(column.type):
            return False  # a BLOB where text belongs: sqlite3 decodes it as text
        if types.is_string(column.type) or types.is_large_string(column.type):
            try:
                column.validate(full=True)
            except Exception:  # noqa: BLE001 - invalid UTF-8: sqlite3 decodes it with replacement
                return False
        elif column.null_count:
            return False  # NULL where a value belongs: sqlite3 reads it and typed_frame names it
    return True
