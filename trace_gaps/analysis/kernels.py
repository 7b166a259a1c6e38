"""The kernel summary (`analyze --kernels`): the GPU ops of the analysed steps by name, stage
and kind, with their count, total, mean, p50 and p90 — nsys's cuda_gpu_kern_sum, but over the
analysed steps only, copies and graph replays included.

An op belongs to the analysed steps when its launching call starts in one (as in the stage
table's top kernels). Percentiles must be exact however the steps are cut into windows, so
a window keeps its ops' durations as value counts (how many ops of each (pid, stage, kind,
from graph, name) ran exactly d ns): they merge by addition, and the percentiles are read
off the merged counts. They hold at most one row per op, and far fewer where durations
repeat (GPU timestamps tick in tens of ns: 9,284 ops are 1,051 rows on spec_eager).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from trace_gaps.analysis.grouped import is_one_of, summed_by
from trace_gaps.analysis.stages import LAUNCH_CATEGORY, STAGE
from trace_gaps.model import END_NS, NAME, OP_KIND, PID, START_NS, CallCategory, OpKind
from trace_gaps.records.report import KernelRow, KernelSummary

DURATION_NS = "duration_ns"
OPS = "ops"
FROM_GRAPH = "from_graph"  # launched by a graph launch: a node of a replay, or the replay
DURATION_COLUMNS = [PID, STAGE, OP_KIND, FROM_GRAPH, NAME, DURATION_NS, OPS]
GROUP_COLUMNS = DURATION_COLUMNS[:5]
KERNEL_SUMMARY_COLUMNS = [
    *GROUP_COLUMNS,
    OPS,
    "total_ns",
    "mean_ns",
    "p50_ns",
    "p90_ns",
    "min_ns",
    "max_ns",
]

_KINDS = pd.CategoricalDtype([kind.value for kind in OpKind])  # in OpKind's order


def op_durations(analysed_ops: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, stage, kind, from graph, name, duration): how many of the ops ran that long
    (DURATION_COLUMNS). From graph: a graph launch ran it (a graph-level replay row, or a
    kernel or memset node of a replay traced with --cuda-graph-trace=node)."""
    ops = pd.DataFrame(
        {
            PID: analysed_ops[PID].to_numpy(),
            STAGE: analysed_ops[STAGE].to_numpy(),
            OP_KIND: analysed_ops[OP_KIND].astype(_KINDS).array,
            FROM_GRAPH: is_one_of(analysed_ops[LAUNCH_CATEGORY], {CallCategory.LAUNCH_GRAPH.value}),
            NAME: analysed_ops[NAME].array,  # categorical: no string per row
            DURATION_NS: analysed_ops[END_NS].to_numpy() - analysed_ops[START_NS].to_numpy(),
        }
    )
    return summed_by(ops, DURATION_COLUMNS[:-1], {}, OPS)


def merge_op_durations(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The windows' value counts added up, sorted by group (names as text) then duration."""
    parts = [part for part in parts if len(part)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in DURATION_COLUMNS})
    # Each window's names are categories of its own: their union, sorted, groups by text.
    names = union_categoricals([part[NAME].array for part in parts], sort_categories=True)
    merged = pd.concat(parts, ignore_index=True).assign(**{NAME: names})
    return summed_by(merged, DURATION_COLUMNS[:-1], {OPS: merged[OPS].to_numpy()}, None)


def summarise_op_durations(durations: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, stage, kind, from graph, name): ops, total, mean (rounded), p50, p90, min
    and max ns (KERNEL_SUMMARY_COLUMNS), from value counts sorted by group then duration.

    Percentiles are numpy's "nearest": the value of rank round((n - 1) x q), half to even,
    as the step wall time's.
    """
    if durations.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in KERNEL_SUMMARY_COLUMNS})
    values = durations[DURATION_NS].to_numpy()
    counts = durations[OPS].to_numpy()
    changes = np.zeros(len(values) - 1, dtype=bool)
    for key in GROUP_COLUMNS:
        column = durations[key].to_numpy()
        changes |= column[1:] != column[:-1]
    first = np.flatnonzero(np.r_[True, changes])
    last = np.r_[first[1:], len(values)] - 1
    ends = np.cumsum(counts)  # ops up to and including each row, over every group
    before = ends[first] - counts[first]
    ops = ends[last] - before
    totals = np.add.reduceat(values * counts, first)

    def percentile(q: float) -> np.ndarray:
        rank = before + np.rint((ops - 1) * q).astype(np.int64)
        found: np.ndarray = values[np.searchsorted(ends, rank, side="right")]
        return found

    summary = durations.iloc[first][GROUP_COLUMNS].reset_index(drop=True)
    return summary.assign(
        **{
            OPS: ops,
            "total_ns": totals,
            "mean_ns": np.rint(totals / ops).astype(np.int64),
            "p50_ns": percentile(0.5),
            "p90_ns": percentile(0.9),
            "min_ns": values[first],
            "max_ns": values[last],
        }
    )


def kernel_summary(
    durations: pd.DataFrame, pid: int, stage_names: tuple[str, ...], steps_analysed: int
) -> KernelSummary:
    """One process's KernelSummary from the merged OP_DURATIONS: every (stage, kind, name)
    row, most GPU time first (then stage and name)."""
    summary = summarise_op_durations(durations[durations[PID].to_numpy() == pid])
    summary = summary.assign(stage=np.asarray(stage_names, dtype=object)[summary[STAGE]])
    summary = summary.sort_values(
        ["total_ns", "stage", NAME, OP_KIND, FROM_GRAPH],
        ascending=[False, True, True, True, True],
        kind="stable",
    )
    total, count, steps = int(summary["total_ns"].sum()), int(summary[OPS].sum()), steps_analysed
    rows = [
        KernelRow(
            name=str(row[NAME]),
            stage=str(row["stage"]),
            kind=str(row[OP_KIND]),
            from_graph=bool(row[FROM_GRAPH]),
            count=int(row[OPS]),
            count_per_step=round(int(row[OPS]) / steps, 2) if steps else 0.0,
            total_ns=int(row["total_ns"]),
            ns_per_step=round(int(row["total_ns"]) / steps) if steps else 0,
            mean_ns=int(row["mean_ns"]),
            p50_ns=int(row["p50_ns"]),
            p90_ns=int(row["p90_ns"]),
            min_ns=int(row["min_ns"]),
            max_ns=int(row["max_ns"]),
            share_pct=round(100 * int(row["total_ns"]) / total, 2) if total else 0.0,
        )
        for row in summary.to_dict("records")
    ]
    return KernelSummary(steps_analysed=steps, count=count, total_ns=total, rows=rows)
