"""Names of ops and calls: string ids to categoricals shared by every chunk of a stream."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import NAME
from trace_gaps.nsys import queries
from trace_gaps.nsys.calls import strip_version_suffix
from trace_gaps.nsys.export import reading_export
from trace_gaps.nsys.head import name_text, read_strings
from trace_gaps.nsys.sql import query_rows, query_value

# Resolve names from the whole string table when it is at most this long (one quick read);
# longer tables are searched for the ids in use.
WHOLE_STRING_TABLE = 500_000

# The CUDA API's longest names have some 50 characters.
CALL_NAME_CHARACTERS = 256

UNKNOWN = "?"  # the name of an op or call whose name id is not in StringIds
_MEMCPY_NAMES = ("memcpy HtoD", "memcpy DtoH", "memcpy DtoD", "memcpy PtoP", "memcpy")


class Names:
    """Name ids to the categorical names of ops and calls, shared by every chunk."""

    def __init__(self, connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]) -> None:
        self.connection = connection
        self.path = path
        self.tables = tables
        self._strings: pd.Series | None = None

    def strings(self, ids_in_use: str) -> pd.Series:
        """Text by string id: the whole table when short, else the ids the query lists."""
        with reading_export(self.path):
            if self._strings is None:
                largest = query_value(self.connection, queries.largest_string_id())
                if int(largest or 0) <= WHOLE_STRING_TABLE:
                    self._strings = string_series(self.connection, queries.ALL_STRINGS)
            if self._strings is not None:
                return self._strings
            return string_series(self.connection, ids_in_use)

    def op_categories(self) -> pd.Index:
        kernel_names: list[object] = (
            self.strings(queries.KERNEL_NAMES).tolist()
            if queries.KERNEL_TABLE in self.tables
            else []
        )
        graphs = (
            [row[0] for row in query_rows(self.connection, queries.GRAPH_NAMES)]
            if queries.GRAPH_TRACE_TABLE in self.tables
            else []
        )
        extra = [*_MEMCPY_NAMES, "memset", *graphs, UNKNOWN]
        return unique_index([*kernel_names, *extra])

    def call_names(self) -> pd.Series:
        return self.strings(queries.RUNTIME_NAMES).map(call_name)


def call_name(name: str) -> str:
    """A CUDA API name without its version suffix. One longer than any API's (a damaged or
    hostile export: a 1 MB name made every search of the calls' names 18x slower) is cut at
    CALL_NAME_CHARACTERS and ends in '…'."""
    if len(name) > CALL_NAME_CHARACTERS:
        return name[: CALL_NAME_CHARACTERS - 1] + "…"
    return strip_version_suffix(name)


def string_series(connection: sqlite3.Connection, sql: str) -> pd.Series:
    frame = read_strings(connection, sql)
    return frame.set_index("name_id")[NAME].map(name_text).astype(object)


def unique_index(values: list[object]) -> pd.Index:
    """The values, first occurrence of each, as an Index (categories)."""
    return pd.Index(list(dict.fromkeys(values)), dtype=object)


def codes_by_id(strings: pd.Series, categories: pd.Index) -> Callable[[np.ndarray], np.ndarray]:
    """A function from string ids to category codes (ids not in strings get '?')."""
    unknown = int(categories.get_indexer(pd.Index([UNKNOWN]))[0])
    ids = strings.index.to_numpy().astype(np.int64)
    codes = categories.get_indexer(pd.Index(strings.tolist(), dtype=object))
    if not len(ids):  # an empty StringIds: every name is unknown

        def unknown_only(wanted: np.ndarray) -> np.ndarray:
            return np.full(len(wanted), unknown, dtype=np.int64)

        return unknown_only
    table = np.full(int(ids.max(initial=-1)) + 2, unknown, dtype=np.int64)
    if len(ids) and ids.min() >= 0 and ids.max() < 4 * len(ids) + 1_000_000:
        table[ids] = codes

        def from_table(wanted: np.ndarray) -> np.ndarray:
            inside = (wanted >= 0) & (wanted < len(table))
            result: np.ndarray = np.where(
                inside, table[np.clip(wanted, 0, len(table) - 1)], unknown
            )
            return result

        return from_table
    order = pd.Index(ids)

    def from_index(wanted: np.ndarray) -> np.ndarray:
        at = order.get_indexer(pd.Index(wanted))
        result: np.ndarray = np.where(at >= 0, codes[np.maximum(at, 0)], unknown)
        return result

    return from_index
