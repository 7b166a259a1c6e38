"""An export's op and call tables as typed, cleaned chunks: read (nsys/read.py), left without
their untimed rows, impossible times and copies (nsys/cleaning.py, each counted in a Tally),
their names made categoricals shared by every chunk. The stream reads each table whole (nsys/stream.py), a
window worker the rowid ranges of its span (nsys/spans.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import (
    API_CALL_COLUMNS,
    CALL_CATEGORY,
    DEVICE_ID,
    GLOBAL_TID,
    GPU_OP_COLUMNS,
    NAME,
    OP_KIND,
    PID,
    CallCategory,
    OpKind,
)
from trace_gaps.nsys import queries
from trace_gaps.nsys.calls import classify_call, is_cuda_call_name
from trace_gaps.nsys.cleaning import Cleaner, StreamCheck, Tally
from trace_gaps.nsys.head import CALL_ROW_KEY, OP_ROW_KEY, table_columns
from trace_gaps.nsys.names import UNKNOWN, Names, codes_by_id, unique_index
from trace_gaps.nsys.read import read_table_chunks
from trace_gaps.nsys.read_ahead import Readers

_OP_INTS = {n: d for n, d in GPU_OP_COLUMNS.items() if d not in ("category", "object")}
# The columns of queries.RUNTIME_CALLS (the pid comes after: with_pid).
CALL_READ = {
    **{n: d for n, d in API_CALL_COLUMNS.items() if d not in ("category", "object") and n != PID},
    "name_id": "int64",
}


_OP_KINDS = {
    queries.KERNEL_TABLE: OpKind.KERNEL,
    queries.MEMCPY_TABLE: OpKind.MEMCPY,
    queries.MEMSET_TABLE: OpKind.MEMSET,
    queries.GRAPH_TRACE_TABLE: OpKind.GRAPH,
}


def op_queries(
    connection: sqlite3.Connection, tables: tuple[str, ...]
) -> list[tuple[str, tuple[str, OpKind]]]:
    """Each op table's query and the kind of its ops, in queries.OP_TABLES order."""
    found = []
    for table in queries.OP_TABLES:
        if table not in tables:
            continue
        kind = _OP_KINDS[table]
        sql = {
            queries.MEMCPY_TABLE: queries.MEMCPYS,
            queries.MEMSET_TABLE: queries.MEMSETS,
            queries.GRAPH_TRACE_TABLE: queries.GRAPH_TRACES,
        }.get(table)
        if sql is None:
            # Exports older than graph-node tracing have no graphNodeId column.
            has_nodes = "graphNodeId" in table_columns(connection, table)
            sql = queries.KERNELS if has_nodes else queries.KERNELS_WITHOUT_GRAPH_NODES
        found.append((table, (sql, kind)))
    return found


def with_pid(calls: pd.DataFrame) -> pd.DataFrame:
    """The calls with their pid, from the upper bits of their global thread id (as nsys
    packs them): derived here, not in the query (queries.RUNTIME_CALLS)."""
    pids = (calls[GLOBAL_TID].to_numpy() >> 24) & 0xFFFFFF
    return calls.assign(**{PID: pids})


def op_chunks(
    path: Path,
    query: tuple[str, OpKind],
    names: Names,
    tally: Tally,
    capture: tuple[int | None, int | None],  # its duration and stop (ANALYSIS_DETAILS)
    readers: Readers,
    pieces: Pieces | None = None,
) -> Callable[[], Iterator[pd.DataFrame]]:
    """A function that starts reading the op table and returns its chunks (pieces: those of
    these rowid ranges, one after the other, each counted in its tally; None: every row,
    counted in tally)."""
    sql, kind = query
    pieces = [(None, tally)] if pieces is None else pieces

    def start() -> Iterator[pd.DataFrame]:
        categories = names.op_categories()
        by_id = (
            codes_by_id(names.strings(queries.KERNEL_NAMES), categories)
            if kind is OpKind.KERNEL
            else None
        )
        dtypes = {**_OP_INTS, "name_id": "int64"} if by_id else _OP_INTS
        # Read and decoded on a thread of their own (the names above are looked up here,
        # on the main connection).
        return readers.start(
            lambda: decoded(_read_pieces(path, sql, dtypes, pieces), categories, by_id)
        )

    def decoded(
        read: Iterator[tuple[pd.DataFrame, Tally]],
        categories: pd.Index,
        by_id: Callable[[np.ndarray], np.ndarray] | None,
    ) -> Iterator[pd.DataFrame]:
        kinds = pd.CategoricalDtype([k.value for k in OpKind])
        kind_code = list(OpKind).index(kind)
        unknown = int(categories.get_indexer(pd.Index([UNKNOWN]))[0])
        cleaned = Cleaner(capture, OP_ROW_KEY, calls=False)
        checked = StreamCheck()

        def possible() -> Iterator[tuple[pd.DataFrame, Tally]]:
            for chunk, tally in read:
                # Values are checked as they are read (typed_frame in read_table_chunks).
                yield from checked(cleaned(chunk, tally), tally)
            yield from checked.flush()

        for chunk, tally in possible():
            if by_id is not None:
                codes = by_id(chunk.pop("name_id").to_numpy())
                unresolved = int(np.count_nonzero(codes == unknown))
                if unresolved:
                    with tally.lock:
                        tally.unresolved_kernels += unresolved
            else:
                codes = categories.get_indexer(pd.Index(chunk.pop(NAME).tolist(), dtype=object))
            chunk[NAME] = pd.Categorical.from_codes(codes, categories=categories)
            # Codes, not a string per row: this thread holds the GIL the analysis wants.
            chunk[OP_KIND] = pd.Categorical.from_codes(
                np.full(len(chunk), kind_code, dtype=np.int8), dtype=kinds, validate=False
            )
            counts = _ops_per_device(chunk)
            with tally.lock:
                tally.device_ops.append(counts.assign(**{OP_KIND: kind.value}))
            yield chunk[list(GPU_OP_COLUMNS)]

    return start


# Rowid ranges [lo, hi) of a table (None: every row), each with the tally its rows count in.
Pieces = list[tuple[tuple[int, int] | None, Tally]]


def _read_pieces(
    path: Path, sql: str, dtypes: dict[str, str], pieces: Pieces
) -> Iterator[tuple[pd.DataFrame, Tally]]:
    """The chunks of each piece's rows, in turn, each with the tally it counts in."""
    for rows, tally in pieces:
        for chunk in read_table_chunks(path, sql, dtypes, rows):
            yield chunk, tally


def _ops_per_device(chunk: pd.DataFrame) -> pd.DataFrame:
    """pid, device_id, ops: the chunk's ops per (pid, device), from one sort of a combined
    key (a pandas group-by per chunk cost the analysis thread its GIL)."""
    pids, devices = chunk[PID].to_numpy(), chunk[DEVICE_ID].to_numpy()
    if len(pids) and devices.min() >= 0 and devices.max() < 2**16 and pids.min() >= 0:
        keys, counts = np.unique((pids << 16) | devices, return_counts=True)
        return pd.DataFrame(
            {PID: keys >> 16, DEVICE_ID: keys & 0xFFFF, "ops": counts.astype(np.int64)}
        )
    return chunk.groupby([PID, DEVICE_ID]).size().rename("ops").reset_index()


def call_chunks(
    path: Path,
    tables: tuple[str, ...],
    names: Names,
    tally: Tally,
    capture: tuple[int | None, int | None],  # its duration and stop (ANALYSIS_DETAILS)
    readers: Readers,
    pieces: Pieces | None = None,
) -> Callable[[], Iterator[pd.DataFrame]]:
    """A function that starts reading the CUDA API table and returns its chunks (pieces: as
    op_chunks')."""
    pieces = [(None, tally)] if pieces is None else pieces

    def start() -> Iterator[pd.DataFrame]:
        if queries.RUNTIME_TABLE not in tables:
            return iter(())
        call_names = names.call_names()
        categories = unique_index([*call_names.tolist(), UNKNOWN])
        by_id = codes_by_id(call_names, categories)
        kinds = [c.value for c in CallCategory]
        category_of = np.array([kinds.index(classify_call(n).value) for n in categories])
        read = _read_pieces(path, queries.RUNTIME_CALLS, CALL_READ, pieces)
        # Read and decoded on a thread of their own (the names above are looked up here).
        # Unresolved: a name id not in StringIds ('?'), or a name no CUDA call has ('', NULL
        # or other text: a damaged string table).
        unresolved = np.array([not is_cuda_call_name(str(n)) for n in categories], dtype=bool)
        return readers.start(
            lambda: decoded(read, categories, by_id, kinds, category_of, unresolved)
        )

    def decoded(
        read: Iterator[tuple[pd.DataFrame, Tally]],
        categories: pd.Index,
        by_id: Callable[[np.ndarray], np.ndarray],
        kinds: list[str],
        category_of: np.ndarray,
        unresolved_name: np.ndarray,
    ) -> Iterator[pd.DataFrame]:
        cleaned = Cleaner(capture, CALL_ROW_KEY, calls=True)
        for chunk, tally in read:
            chunk = with_pid(cleaned(chunk, tally))
            codes = by_id(chunk.pop("name_id").to_numpy())
            unresolved = int(np.count_nonzero(unresolved_name[codes]))
            if unresolved:
                with tally.lock:
                    tally.unresolved_calls += unresolved
            chunk[NAME] = pd.Categorical.from_codes(codes, categories=categories)
            chunk[CALL_CATEGORY] = pd.Categorical.from_codes(
                category_of[codes], categories=pd.Index(kinds)
            )
            yield chunk[list(API_CALL_COLUMNS)]

    return start
