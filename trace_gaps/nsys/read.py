"""The one reader of an export's queries: their rows in typed chunks, through Arrow or sqlite3.

pandas over the standard sqlite3 module reads by default. With the `fast` extra
(adbc-driver-sqlite + pyarrow) installed, and TRACE_GAPS_NO_ARROW unset, the ADBC SQLite
driver reads instead: several times faster, and its rows are the same. It hands over only
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

import pandas as pd

from trace_gaps.nsys import queries
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


def read_frame(path: Path, sql: str, dtypes: dict[str, str]) -> pd.DataFrame:
    """The query's rows as one frame (read_chunks concatenated)."""
    chunks = list(read_chunks(path, sql, dtypes))
    return chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)


def _sqlite_chunks(
    path: Path, sql: str, dtypes: dict[str, str], params: tuple[int, ...], *, skip: int
) -> Iterator[pd.DataFrame]:
    with open_export(path, values=False) as connection:
        rows = pd.read_sql_query(
            queries.rows_from(sql) if skip else sql,
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
