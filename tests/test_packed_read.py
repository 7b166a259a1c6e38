"""The sqlite3 path reads the big integer tables packed (nsys/read.read_table_chunks:
SQLite writes each chunk's columns as text, numpy parses them). Whatever the table holds,
it gives what the row-by-row read gives: the same rows, values and dtypes, or the same
one-line error; on real captures and on tables made awkward (NULLs, text, REALs, BLOBs,
sparse rowids, SQLite's largest rowid, empty ranges, chunks cut small)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import sample_trace_paths
from trace_gaps.errors import TraceGapsError
from trace_gaps.nsys import queries, queries_chunked, read
from trace_gaps.nsys.chunks import CALL_READ
from trace_gaps.nsys.os_calls import _READ as OS_READ

KERNEL_READ = {
    c: "int64"
    for c in (
        "start_ns",
        "end_ns",
        "pid",
        "device_id",
        "stream_id",
        "correlation_id",
        "graph_node_id",
        "name_id",
    )
}
LARGEST_ROWID = 2**63 - 1
QUICK = {"spec_eager", "spec_graph_node", "hf_assisted", "serving_vllm_scopes"}
SAMPLES = [
    p if p.stem in QUICK else pytest.param(p, marks=pytest.mark.thorough)
    for p in sample_trace_paths()
]


@pytest.fixture(autouse=True)
def sqlite3_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(read.ARROW_READER_ENV, "1")


def packed(
    path: Path, sql: str, dtypes: dict[str, str], rows=None, params=()
) -> pd.DataFrame | str:
    """The rows read packed, as one frame (or the error's words); every chunk of at most
    CHUNK_ROWS rows, and at least one."""
    try:
        chunks = list(read.read_table_chunks(path, sql, dtypes, rows, params))
    except TraceGapsError as error:
        return str(error)
    assert chunks, "at least one chunk, an empty one for no rows"
    assert all(len(c) <= read.CHUNK_ROWS for c in chunks)
    return pd.concat(chunks, ignore_index=True)


def row_by_row(
    path: Path, sql: str, dtypes: dict[str, str], rows=None, params=()
) -> pd.DataFrame | str:
    """The rows as sqlite3 reads any query, one Python row at a time."""
    query = sql if rows is None else queries_chunked.in_rowids(sql)
    try:
        chunks = list(read._sqlite_chunks(path, query, dtypes, (*params, *(rows or ())), skip=0))
    except TraceGapsError as error:
        return str(error)
    return pd.concat(chunks, ignore_index=True)


def assert_same(path: Path, sql: str, dtypes: dict[str, str], rows=None, params=()) -> None:
    got = packed(path, sql, dtypes, rows, params)
    want = row_by_row(path, sql, dtypes, rows, params)
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
    else:
        pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: Path(str(p)).stem)
def test_real_captures_read_packed_as_row_by_row(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "CHUNK_ROWS", 997)  # many chunks, edges anywhere
    with sqlite3.connect(path) as connection:
        tables = {r[0] for r in connection.execute(queries.TABLES)}
        has_nodes = "graphNodeId" in {
            r[0] for r in connection.execute(queries.TABLE_COLUMNS, (queries.KERNEL_TABLE,))
        }
    kernels = queries.KERNELS if has_nodes else queries.KERNELS_WITHOUT_GRAPH_NODES
    for table, sql, dtypes in (
        (queries.RUNTIME_TABLE, queries.RUNTIME_CALLS, CALL_READ),
        (queries.KERNEL_TABLE, kernels, KERNEL_READ),
    ):
        if table in tables:
            assert_same(path, sql, dtypes)
            assert_same(path, sql, dtypes, (3, 5_000))
            assert_same(path, sql, dtypes, (10**9, 10**9 + 5))  # no rows there
    if queries.OS_CALL_TABLE in tables:  # a query with a WHERE and `?`s of its own
        with sqlite3.connect(path) as connection:
            lo, hi = connection.execute(
                f'SELECT MIN(start), MAX("end") FROM {queries.OS_CALL_TABLE}'
            ).fetchone()
        for rows in (None, (2, 4_000)):
            for span in ((hi, lo), ((lo + hi) // 2, (lo + hi) // 3)):
                assert_same(path, queries.OS_CALLS_OVERLAPPING, OS_READ, rows, span)


def test_the_packed_read_is_taken_on_a_real_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the same answer: the answer of the packed read (no chunk fell back)."""
    fallbacks: list[object] = []
    by_rows = read._sqlite_chunks
    monkeypatch.setattr(
        read, "_sqlite_chunks", lambda *a, **k: fallbacks.append(a) or by_rows(*a, **k)
    )
    path = next(p for p in sample_trace_paths() if p.stem == "spec_eager")
    frame = packed(path, queries.RUNTIME_CALLS, CALL_READ)
    assert isinstance(frame, pd.DataFrame) and len(frame) > 20_000
    calls = packed(path, queries.OS_CALLS_OVERLAPPING, OS_READ, (0, 10**9), (2**62, 0))
    assert isinstance(calls, pd.DataFrame) and len(calls) > 5_000
    assert fallbacks == []


@pytest.fixture
def export(tmp_path: Path) -> Path:
    copy = tmp_path / "copy.sqlite"
    path = next(p for p in sample_trace_paths() if p.stem == "spec_eager")
    shutil.copyfile(path, copy)
    with sqlite3.connect(copy) as connection:  # a copy of the table without its NOT NULLs
        table = queries.RUNTIME_TABLE
        connection.execute(f"ALTER TABLE {table} RENAME TO Original")
        connection.execute(f"CREATE TABLE {table} AS SELECT * FROM Original ORDER BY rowid")
        connection.execute("DROP TABLE Original")
    connection.close()
    return copy


@pytest.mark.parametrize(
    "value",
    [None, "text", "12", " 13", "1,2", "", 1.5, 3.0, b"\x01\x02", b"12", -(2**63), 2**63 - 1],
    ids=repr,
)
@pytest.mark.parametrize("column", ["start", "correlationId", "nameId", "globalTid"])
def test_an_odd_value_reads_as_row_by_row(
    value: object, column: str, export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "CHUNK_ROWS", 5_000)
    with sqlite3.connect(export) as connection:
        connection.execute(
            f"UPDATE {queries.RUNTIME_TABLE} SET {column} = ? WHERE rowid = 7777", (value,)
        )
    assert_same(export, queries.RUNTIME_CALLS, CALL_READ)


def test_sparse_rowids_and_the_largest_rowid_read_as_row_by_row(
    export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read, "CHUNK_ROWS", 1_000)
    with sqlite3.connect(export) as connection:
        table = queries.RUNTIME_TABLE
        connection.execute(f"DELETE FROM {table} WHERE rowid % 7 = 0 OR rowid BETWEEN 900 AND 2500")
        connection.execute(
            f'INSERT INTO {table} (rowid, start, "end", globalTid, correlationId, nameId) '
            'SELECT ?, start, "end", globalTid, correlationId, nameId FROM '
            f"{table} WHERE rowid = 1",
            (LARGEST_ROWID,),
        )
    frame = packed(export, queries.RUNTIME_CALLS, CALL_READ)
    assert isinstance(frame, pd.DataFrame)
    assert_same(export, queries.RUNTIME_CALLS, CALL_READ)
    assert_same(export, queries.RUNTIME_CALLS, CALL_READ, (2_000, 2_600))
    tail = packed(export, queries.RUNTIME_CALLS, CALL_READ, (10**12, LARGEST_ROWID))
    assert isinstance(tail, pd.DataFrame) and len(tail) == 0  # [lo, hi): the largest left out


def test_an_empty_table_is_one_empty_chunk_with_the_dtypes(export: Path) -> None:
    with sqlite3.connect(export) as connection:
        connection.execute(f"DELETE FROM {queries.RUNTIME_TABLE}")
    chunks = list(read.read_table_chunks(export, queries.RUNTIME_CALLS, CALL_READ))
    assert len(chunks) == 1 and chunks[0].empty
    assert dict(chunks[0].dtypes.astype(str)) == CALL_READ
    assert_same(export, queries.RUNTIME_CALLS, CALL_READ)


ODD = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(alphabet="0123456789-, .ae", max_size=4),
    st.binary(max_size=3),
)
CELL = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**6), ODD)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(st.integers(1, 400), st.lists(CELL, min_size=5, max_size=5)), max_size=40
    ),
    chunk=st.integers(1, 9),
    lo=st.integers(-5, 450),
    width=st.integers(0, 500),
)
def test_any_table_reads_packed_as_row_by_row(rows, chunk, lo, width) -> None:
    """A CUDA API table of any rowids and values (most integers, some anything SQLite
    holds): the packed read equals the row-by-row read, whole and over a rowid range."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.sqlite"
        with sqlite3.connect(path) as connection:
            connection.execute(
                f'CREATE TABLE {queries.RUNTIME_TABLE} (start INTEGER, "end" INTEGER, '
                "globalTid INTEGER, correlationId INTEGER, nameId INTEGER)"
            )
            connection.executemany(
                f"INSERT OR REPLACE INTO {queries.RUNTIME_TABLE} "
                '(rowid, start, "end", globalTid, correlationId, nameId) VALUES (?, ?, ?, ?, ?, ?)',
                [(rowid, *cells) for rowid, cells in rows],
            )
        connection.close()
        saved = read.CHUNK_ROWS
        read.CHUNK_ROWS = chunk
        try:
            assert_same(path, queries.RUNTIME_CALLS, CALL_READ)
            assert_same(path, queries.RUNTIME_CALLS, CALL_READ, (lo, lo + width))
        finally:
            read.CHUNK_ROWS = saved
