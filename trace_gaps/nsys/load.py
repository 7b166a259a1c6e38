"""The whole export at once: the stream's chunks of each table concatenated into a Trace.

For analyses that need every row together (an export whose rows break the stream's
assumptions, tests that compare against the whole). The chunks are read and checked as
when streamed (nsys/stream.py); what the stream can only do per chunk, because it relies
on start order, is done here on the whole: copies, exact or shifted, and ops that hold the
next op of their stream are found among all the rows (a table appended to out of start
order hides them from the stream).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import API_CALL_COLUMNS, CALL_CATEGORY, NAME, OP_KIND, Trace, empty_frame
from trace_gaps.nsys.cleaning import holding_next, shifted_copies
from trace_gaps.nsys.export import list_tables, no_timed_ops_error, open_export
from trace_gaps.nsys.head import CALL_ROW_KEY, OP_ROW_KEY
from trace_gaps.nsys.stream import stream_export


def load_trace(path: Path) -> Trace:
    """Read the columns the analysis needs from an export into a Trace."""
    with stream_export(path, read_now=True, windowed=False) as stream:
        op_chunks = [chunk for _, source in stream.sources.ops for chunk in source()]
        call_chunks = list(stream.sources.calls())
        trace = replace(
            stream.trace(), os_calls=stream.os_calls(), gpu_metrics=stream.sources.gpu_metrics
        )
    ops = pd.concat(op_chunks, ignore_index=True)
    calls = (
        pd.concat(call_chunks, ignore_index=True) if call_chunks else empty_frame(API_CALL_COLUMNS)
    )
    repeated_ops = ops.duplicated(OP_ROW_KEY).to_numpy()
    repeated_calls = calls.duplicated(CALL_ROW_KEY).to_numpy()
    ops = ops.loc[~repeated_ops].reset_index(drop=True)
    copied, impossible = _impossible_ops(ops)
    ops = ops.loc[~(copied | impossible)].reset_index(drop=True)
    calls = calls.loc[~repeated_calls].reset_index(drop=True)
    if ops.empty:
        with open_export(path) as connection:
            tables = list_tables(connection, path)
            raise no_timed_ops_error(connection, path, tables, trace.info.untimed_events)
    ops[NAME] = _present_sorted(ops[NAME], "str")
    calls[NAME] = _present_sorted(calls[NAME], "object")
    calls[CALL_CATEGORY] = _present_sorted(calls[CALL_CATEGORY], "object")
    info = replace(
        trace.info,
        duplicated_ops=trace.info.duplicated_ops + int(repeated_ops.sum()) + int(copied.sum()),
        impossible_ops=trace.info.impossible_ops + int(impossible.sum()),
        duplicated_calls=trace.info.duplicated_calls + int(repeated_calls.sum()),
    )
    return replace(trace, info=info, gpu_ops=ops, api_calls=calls)


def _impossible_ops(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the shifted copies, and of the ops that hold the next op of their stream,
    table by table as the stream finds them (nsys/cleaning.StreamCheck)."""
    copied = np.zeros(len(ops), dtype=bool)
    impossible = np.zeros(len(ops), dtype=bool)
    for _, kind in ops.groupby(OP_KIND, observed=True, sort=False):
        at = kind.index.to_numpy()
        copies = shifted_copies(kind)
        copied[at[copies]] = True
        rest = kind.loc[~copies]
        impossible[rest.index.to_numpy()[holding_next(rest)[0]]] = True
    return copied, impossible


def _present_sorted(values: pd.Series, dtype: str) -> pd.Series:
    """Categories of only the values present, sorted, held in an Index of this dtype: the
    categoricals load_trace has always returned (the stream's chunks share categories for
    every name in the export)."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype("category")
    used = values.cat.remove_unused_categories()
    return used.cat.reorder_categories(pd.Index(sorted(used.cat.categories), dtype=dtype))
