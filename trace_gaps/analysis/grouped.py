"""Sums and counts per group of key columns, in numpy: a window's metrics group its
hundreds of thousands of ops and calls by (pid, stage, name) several times, and a pandas
group-by spends most of its time building the groups' index. Here the keys' codes are
combined into one integer, and the sums are one bincount over it.

The result is `frame.groupby(keys, observed=True).agg(...).reset_index()`'s: one row per
group present, sorted by the keys (categorical keys in their categories' order, others by
value), rows with a missing key left out, the keys' dtypes kept, sums and counts int64.
tests/test_properties.py compares the two on random frames.

is_one_of answers a membership question the same way, once per category, not per row.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

# A bin per possible combination of key codes, up to this many beyond the rows' count;
# wider combinations (many distinct names in a small frame) take np.unique's sort instead.
DENSE_SLACK = 1 << 20
_EXACT_FLOAT = 1 << 53  # float64 sums of int64 values below this are exact
COMBINED_MAX = 1 << 62  # key-code combinations beyond this are grouped by pandas


def summed_by(
    frame: pd.DataFrame, keys: list[str], sums: Mapping[str, np.ndarray], count: str | None
) -> pd.DataFrame:
    """Per group of the key columns: the sum of each int64 array of sums (parallel to the
    frame's rows) and, when count is named, the number of rows."""
    codes: list[np.ndarray] = []
    levels: list[pd.Index | pd.Categorical] = []
    present = np.ones(len(frame), dtype=bool)
    for key in keys:
        column = frame[key]
        if isinstance(column.dtype, pd.CategoricalDtype):
            code = column.cat.codes.to_numpy().astype(np.int64)
            levels.append(column.cat.categories)
        else:
            code, uniques = _sorted_codes(column.to_numpy())
            levels.append(pd.Index(uniques))
        present &= code >= 0  # a missing key (code -1) leaves its row out
        codes.append(code)
    sizes = [max(len(level), 1) for level in levels]
    span = int(np.prod(sizes, dtype=object))
    if span >= COMBINED_MAX:  # the codes would not fit one int64: pandas groups them
        return _pandas_summed_by(frame, keys, sums, count)
    combined = np.zeros(len(frame), dtype=np.int64)
    for code, size in zip(codes, sizes, strict=True):
        combined = combined * size + code
    combined = combined[present]
    if span <= len(combined) + DENSE_SLACK:
        counts = np.bincount(combined, minlength=span)
        groups = np.flatnonzero(counts)
        inverse = None
    else:
        groups, inverse = np.unique(combined, return_inverse=True)
        counts = np.bincount(inverse, minlength=len(groups))
    bins = combined if inverse is None else inverse
    columns: dict[str, object] = {}
    remainder = groups.copy()
    key_codes: list[np.ndarray] = []
    for size in reversed(sizes):
        key_codes.append(remainder % size)
        remainder //= size
    for key, level, code in zip(keys, levels, reversed(key_codes), strict=True):
        column = frame[key]
        if isinstance(column.dtype, pd.CategoricalDtype):
            columns[key] = pd.Categorical.from_codes(code, dtype=column.dtype)
        elif isinstance(column.dtype, np.dtype):
            columns[key] = np.asarray(level)[code].astype(column.dtype, copy=False)
        else:  # an extension dtype (pandas' str): numpy cannot cast to it
            columns[key] = pd.array(np.asarray(level)[code], dtype=column.dtype)
    for name, values in sums.items():
        columns[name] = _sums(
            bins, values[present], len(counts), groups if inverse is None else None
        )
    if count is not None:
        columns[count] = (counts[groups] if inverse is None else counts).astype(np.int64)
    return pd.DataFrame(columns)


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize(values, sort=True), codes as int64. Integers within a narrow range (a
    window's pids, stages, steps) are coded by their offset from the smallest, with no hash;
    others are hashed, then the few distinct values sorted."""
    if values.dtype.kind in "iu" and len(values):
        low, high = int(values.min()), int(values.max())
        if high - low <= 4 * len(values) + 65_536:
            offset = values - low
            present = np.bincount(offset, minlength=high - low + 1) > 0
            rank = np.cumsum(present) - 1
            return rank[offset].astype(np.int64), (np.flatnonzero(present) + low).astype(
                values.dtype
            )
    code, uniques = pd.factorize(values, sort=True)
    return code.astype(np.int64), uniques


def _sums(
    bins: np.ndarray, values: np.ndarray, length: int, groups: np.ndarray | None
) -> np.ndarray:
    """Per bin, the sum of the int64 values; only the groups' bins when given."""
    values = values.astype(np.int64, copy=False)
    if len(values) and int(np.abs(values).max()) * len(values) >= _EXACT_FLOAT:
        exact = np.zeros(length, dtype=np.int64)
        np.add.at(exact, bins, values)
    else:
        exact = np.bincount(bins, weights=values, minlength=length).astype(np.int64)
    return exact if groups is None else exact[groups]


def _pandas_summed_by(
    frame: pd.DataFrame, keys: list[str], sums: Mapping[str, np.ndarray], count: str | None
) -> pd.DataFrame:
    values = pd.DataFrame({name: np.asarray(v, dtype=np.int64) for name, v in sums.items()})
    data = pd.concat([frame[keys].reset_index(drop=True), values], axis=1)
    grouped = data.groupby(keys, observed=True, sort=True)
    result = grouped[list(sums)].sum() if sums else grouped.size().to_frame()[[]]
    if count is not None:
        result[count] = grouped.size().astype(np.int64)
    return result.reset_index()


def sums_per_bin(bins: np.ndarray, values: np.ndarray | None, length: int) -> np.ndarray:
    """Per bin 0..length-1: the sum of the int64 values of its rows (their count when
    values is None), int64 and exact."""
    if values is None:
        return np.bincount(bins, minlength=length).astype(np.int64)
    return _sums(bins, values, length, None)


def is_one_of(column: pd.Series, values: Collection[str]) -> np.ndarray:
    """Per row, whether its value is one of `values` (missing: no). A categorical column
    is judged per category, then each row by its code: no string compared per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        chosen = column.cat.categories.astype(str).isin(list(values))
        # Code -1 (no category) reads the appended False.
        flags: np.ndarray = np.r_[chosen, False][column.cat.codes.to_numpy()]
        return flags
    return np.asarray(column.astype(str).isin(list(values)) & column.notna(), dtype=bool)
