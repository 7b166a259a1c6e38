"""A Trace held in memory as row sources: its ops and calls in sorted chunks, as a streamed
export gives them (analyse_trace)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from trace_gaps.model import (
    CALL_CATEGORY,
    DEVICE_ID,
    END_NS,
    GLOBAL_TID,
    NAME,
    OP_KIND,
    PID,
    START_NS,
    ChunkSource,
    RowSources,
    Trace,
)


def memory_sources(trace: Trace, chunk_rows: int | None) -> RowSources:
    """A Trace's ops and calls as sorted chunks, as a streamed export would give them."""
    ops = trace.gpu_ops.sort_values(START_NS, kind="stable", ignore_index=True)
    calls = trace.api_calls.sort_values(START_NS, kind="stable", ignore_index=True)

    def chunks(frame: pd.DataFrame) -> ChunkSource:
        size = chunk_rows or max(len(frame), 1)
        return lambda: (frame.iloc[i : i + size] for i in range(0, len(frame), size))

    def trace_start() -> int:
        starts = [int(f[START_NS].iloc[0]) for f in (ops, calls) if len(f)]
        return min(starts) if starts else np.iinfo(np.int64).max

    def device_ops() -> pd.DataFrame:
        counts = trace.gpu_ops.groupby([PID, DEVICE_ID, OP_KIND], observed=True).size()
        return counts.rename("ops").reset_index()

    def known_pids() -> list[int]:
        return sorted(int(p) for p in set(trace.gpu_ops[PID]) | set(trace.api_calls[PID]))

    return RowSources(
        ops=(("GPU ops", chunks(ops)),),
        calls=chunks(calls),
        rows=len(ops) + len(calls),
        module_loads=lambda until_ns: trace.api_calls[trace.api_calls[START_NS] <= until_ns],
        device_ops=device_ops,
        trace_start_ns=trace_start,
        known_pids=known_pids,
        collectives=lambda chooser: _chosen_ops(trace.gpu_ops, chooser),
        launches_per_thread=lambda from_ns, until_ns: _launches(calls, from_ns, until_ns),
        gpu_metrics=trace.gpu_metrics,
    )


def _launches(calls: pd.DataFrame, from_ns: int, until_ns: int) -> pd.DataFrame:
    starts = calls[START_NS].to_numpy()
    launching = calls[CALL_CATEGORY].astype(str).str.startswith("launch").to_numpy()
    picked = calls.loc[launching & (starts >= from_ns) & (starts <= until_ns)]
    counts: pd.DataFrame = picked.groupby([PID, GLOBAL_TID]).size().rename("launches").reset_index()
    return counts.astype("int64")


def _chosen_ops(ops: pd.DataFrame, chooser: Callable[[pd.Index], np.ndarray]) -> pd.DataFrame:
    """The ops whose names `chooser` picks, the names as text (chooser sees each name once)."""
    category = ops[NAME].astype("category")
    picked = np.flatnonzero(chooser(pd.Index(category.cat.categories.astype(str))))
    chosen = ops.loc[
        np.isin(category.cat.codes.to_numpy(), picked), [START_NS, END_NS, PID, DEVICE_ID]
    ]
    return chosen.assign(**{NAME: category[chosen.index].astype(str)})
