"""An export's GPU metric samples (`nsys profile --gpu-metrics-devices=...`), read a window at
a time by time range.

nsys writes GPU_METRICS as (timestamp, typeId, metricId, value) rows, one row per metric per
sample, in time order (rowid order is time order on every capture here), and the metrics'
names in TARGET_INFO_GPU_METRICS. A window's samples are found by a binary search of the
rowids on their timestamps (a b-tree descent each), then read by rowid range: no scan of
the table, which holds millions of rows at 200 kHz.

Measured on the H100 captures of sample_traces/corpus/gm_*.sqlite (nsys 2025.3.2, 20 kHz):
a sample at time t is the mean over [t, t + period) (GR Active against the kernels' busy
share fits best at no shift; tests/test_gpu_metrics.py holds it); throughput metrics are
whole percents; the clock metrics are named [MHz] but hold Hz. Only one GPU's metrics are
read: an export with several GPUs' metrics (several typeIds) or GPUs of different peak
bandwidths gets None, as one without metrics (their samples cannot yet be tied to a device).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.model import GpuMetric, GpuSamples
from trace_gaps.nsys import queries
from trace_gaps.nsys.export import open_export, reading_export
from trace_gaps.nsys.read import read_table_chunks
from trace_gaps.nsys.sql import query_row, query_rows, query_value

# Each metric's name, as nsys writes it before the " [unit]" (Hopper, nsys 2025.3; Ampere
# and Ada use the same names for these).
METRIC_NAMES: dict[GpuMetric, str] = {
    GpuMetric.DRAM_READ: "DRAM Read Bandwidth",
    GpuMetric.DRAM_WRITE: "DRAM Write Bandwidth",
    GpuMetric.SM_ACTIVE: "SMs Active",
    GpuMetric.SM_ISSUE: "SM Issue",
    GpuMetric.TENSOR_ACTIVE: "Tensor Active",
    GpuMetric.GPC_CLOCK: "GPC Clock Frequency",
}
_DTYPES = {"time_ns": "int64", "metric_id": "int64", "value": "int64"}


@dataclass(frozen=True, slots=True)
class GpuMetricTable:
    """One export's GPU_METRICS, mapped: which metric ids to read, its rowids, the period and
    the GPU's peak DRAM bandwidth (GpuMetricSource; it pickles)."""

    path: Path
    metric_ids: tuple[tuple[GpuMetric, int], ...]
    first_row: int
    last_row: int
    period_ns: int
    peak_bytes_per_s: int

    @property
    def longest_sample_ns(self) -> int:
        """No sample lasts longer (_pivot): a window's samples reach this far past its time."""
        return 2 * self.period_ns

    def samples(self, lo: int, hi: int) -> GpuSamples:
        """The samples whose period overlaps [lo, hi), in time order."""
        # The sample across lo began at most this long before it; a sample before hi ends
        # at the next one's time only if it was read (at most this long after it).
        margin = self.longest_sample_ns
        with open_export(self.path) as connection, reading_export(self.path):
            first = _first_row_at(connection, lo - margin, self.first_row, self.last_row)
            stop = _first_row_at(connection, hi + margin, first, self.last_row)
        frames = list(
            read_table_chunks(self.path, queries.GPU_METRIC_SAMPLES, _DTYPES, (first, stop))
        )
        rows = (
            pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(_DTYPES))
        )
        return _pivot(rows, self.metric_ids, self.period_ns, lo, hi)


def open_gpu_metrics(
    connection: sqlite3.Connection, path: Path, tables: tuple[str, ...]
) -> GpuMetricTable | None:
    """The export's GPU metrics, or None: no such tables, no sample, several GPUs' metrics,
    no peak bandwidth, or none of the DRAM metrics."""
    if queries.GPU_METRICS_TABLE not in tables or queries.GPU_METRIC_NAMES_TABLE not in tables:
        return None
    names = query_rows(connection, queries.GPU_METRIC_NAMES)
    if len({type_id for type_id, _, _ in names}) != 1:
        return None
    by_name = {str(name).split(" [")[0]: int(metric_id) for _, metric_id, name in names}
    ids = tuple((metric, by_name[name]) for metric, name in METRIC_NAMES.items() if name in by_name)
    if not any(metric is GpuMetric.DRAM_READ for metric, _ in ids):
        return None
    peaks = {int(bw) for _, bw in query_rows(connection, queries.GPU_PEAK_BANDWIDTH) if bw}
    rowids = query_row(connection, queries.GPU_METRIC_ROWIDS)
    if len(peaks) != 1 or rowids is None or rowids[0] is None:
        return None
    first, last = int(rowids[0]), int(rowids[1])
    period = _period(connection, first, last, len(names))
    if period <= 0:
        return None
    return GpuMetricTable(path, ids, first, last + 1, period, peaks.pop())


def _period(connection: sqlite3.Connection, first: int, last: int, per_sample: int) -> int:
    """The median spacing of the first samples' times (one read of a few hundred rows)."""
    times = [
        int(t)
        for (t,) in query_rows(
            connection,
            queries.GPU_METRIC_TIMES,
            (first, min(last + 1, first + 200 * max(per_sample, 1))),
        )
    ]
    spacing = np.diff(np.unique(np.asarray(times, dtype=np.int64)))
    return int(np.median(spacing)) if len(spacing) else 0


def _first_row_at(connection: sqlite3.Connection, time_ns: int, lo: int, hi: int) -> int:
    """The first rowid in [lo, hi) whose timestamp is at least time_ns (hi when none): a
    binary search, rowid order being time order."""
    while lo < hi:
        mid = (lo + hi) // 2
        at = query_value(connection, queries.GPU_METRIC_TIME_AT_ROWID, (mid,))
        if at is None or int(at) >= time_ns:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _pivot(
    rows: pd.DataFrame,
    metric_ids: tuple[tuple[GpuMetric, int], ...],
    period_ns: int,
    lo: int,
    hi: int,
) -> GpuSamples:
    """One entry per sample time, each metric's value (NaN where the sample lacks it).

    A sample lasts until the next one, or one period where the next comes more than two
    periods later (samples lost, or the last one): so its end is the same whichever range
    was read (samples reads two periods past it), and a window knows how far its samples
    reach (GpuMetricTable.longest_sample_ns)."""
    times, at = np.unique(rows["time_ns"].to_numpy(dtype=np.int64), return_inverse=True)
    ids, values = rows["metric_id"].to_numpy(), rows["value"].to_numpy(dtype=np.float64)
    columns: dict[GpuMetric, np.ndarray] = {}
    for metric, metric_id in metric_ids:
        column = np.full(len(times), np.nan)
        mine = ids == metric_id
        column[at[mine]] = values[mine]
        columns[metric] = column
    if len(times):
        close = np.r_[np.diff(times) <= 2 * period_ns, False]
        ends = np.where(close, np.r_[times[1:], times[-1:]], times + period_ns)
    else:
        ends = times
    keep = (ends > lo) & (times < hi)
    return GpuSamples(
        time_ns=times[keep],
        ends_ns=ends[keep],
        values={metric: column[keep] for metric, column in columns.items()},
    )
