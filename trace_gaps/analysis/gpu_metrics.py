"""GPU metric samples integrated over each stage's GPU busy time (the speed of light per stage).

A sample averages its whole period, idle time included: a stage of 5 µs kernels shares a
50 µs sample with launch gaps. So a sample's traffic (its % x its length) is charged only to
the time some op ran in it, and shared among the stages by their busy time there:

    sample i   [t_i ................................ e_i)   DRAM read 30 %
    ops           [stage A ]        [ stage B     ]         busy_i = 40 % of the period
    rate while busy: 30 % x (e_i - t_i) / busy_i = 75 %, for A's and B's time alike

A stage's figure is the integral of that rate over its busy intervals (the ledger's, within
the analysed steps), per metric; a rate is capped at 100 % (a sample with a sliver of busy
time and a rounded 1 % would otherwise claim more than the GPU can do). The clock is not a
share of the work: it is the plain mean over the stage's busy time. Metrics are per GPU:
every op of the window (every process) counts in busy_i, and another process's traffic in
a sample shared with this one is charged to this one's stages (the report says which
processes share the GPU).

Streamed a window at a time, busy_i must still be the whole trace's: a sample at a window's
edge also covers ops the window does not hold. Before: the ops that ended before the window
and were dropped with the window before it (DroppedBusy carries their busy time, as far
back as a sample can begin); after: the ops the window reads ahead, as far as a sample can
reach past its steps (sample_reach_ns; windows.py reads and keeps them):

    windows          ... w-1 ][ w ........................ ][ w+1 ...
    samples        [ i                ]   ...   [ j               ]
    ops held by w    x x ][ x x x x .......... x x x x ][ x x x
                     ^ dropped: DroppedBusy     read ahead ^
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trace_gaps.analysis.ledger import busy_intervals
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import IS_WARMUP
from trace_gaps.figures.inputs import StageGpuInputs
from trace_gaps.model import END_NS, PID, START_NS, GpuMetric, GpuMetricSource, GpuSamples
from trace_gaps.units import Ns

SAMPLED_NS = "sampled_ns"  # busy time with a sample
# Per metric, the integral of its rate over the busy time, in ns at 100 % (the clock: MHz x ns).
METRIC_NS = {
    GpuMetric.DRAM_READ: "dram_read_ns",
    GpuMetric.DRAM_WRITE: "dram_write_ns",
    GpuMetric.SM_ACTIVE: "sm_active_ns",
    GpuMetric.SM_ISSUE: "sm_issue_ns",
    GpuMetric.TENSOR_ACTIVE: "tensor_active_ns",
    GpuMetric.GPC_CLOCK: "gpc_clock_mhz_ns",
}
GPU_METRIC_COLUMNS = [PID, STAGE, SAMPLED_NS, *METRIC_NS.values()]
_SHARES = [m for m in METRIC_NS if m is not GpuMetric.GPC_CLOCK]


@dataclass(frozen=True, slots=True)
class DroppedBusy:
    """The GPU busy time (disjoint intervals, in time order) of the ops dropped before a
    window, from where its first sample can begin on (module docstring)."""

    starts_ns: np.ndarray
    ends_ns: np.ndarray

    @classmethod
    def none(cls) -> DroppedBusy:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    def adding(self, dropped_ops: pd.DataFrame, *, since_ns: Ns) -> DroppedBusy:
        """This busy time and that of the ops now dropped, cut to after since_ns."""
        starts, ends = _union(
            np.r_[self.starts_ns, dropped_ops[START_NS].to_numpy(dtype=np.int64)],
            np.r_[self.ends_ns, dropped_ops[END_NS].to_numpy(dtype=np.int64)],
        )
        after = ends > since_ns
        return DroppedBusy(np.maximum(starts[after], since_ns), ends[after])


def sample_reach_ns(source: GpuMetricSource | None) -> Ns:
    """How far a sample reaches past a time it covers (0 without metrics): a window holds
    the ops this far past its steps, and their busy time this far before its start."""
    return 0 if source is None else source.longest_sample_ns


@dataclass(frozen=True, slots=True)
class GpuMetricTotals:
    """Per (pid, stage) the integrals over the analysed steps (GPU_METRIC_COLUMNS), and the
    GPU's peak bandwidth and sampling period."""

    totals: pd.DataFrame
    peak_bytes_per_s: int
    period_ns: int


def measure_gpu_metrics(
    ops: pd.DataFrame,
    steps: pd.DataFrame,
    source: GpuMetricSource | None,
    dropped: DroppedBusy,
) -> GpuMetricTotals | None:
    """Each stage's integrals over its busy time in the analysed steps (module docstring).

    ops: the window's projected ops (every process's: metrics are per GPU), those a sample
    reaches past its steps included; steps: the window's steps; dropped: the busy time of
    the ops dropped before it. None without a source."""
    if source is None:
        return None
    analysed = steps[~steps[IS_WARMUP].to_numpy()]
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in GPU_METRIC_COLUMNS})
    if analysed.empty or ops.empty:
        return GpuMetricTotals(empty, source.peak_bytes_per_s, source.period_ns)
    lo, hi = int(analysed[START_NS].min()), int(analysed[END_NS].max())
    samples = source.samples(lo, hi)
    rates = _rates_while_busy(samples, ops, dropped)
    parts = [_integrals(pid, ops, analysed, samples, rates) for pid in np.unique(analysed[PID])]
    parts = [part for part in parts if len(part)]
    totals = pd.concat(parts, ignore_index=True) if parts else empty
    return GpuMetricTotals(totals, source.peak_bytes_per_s, source.period_ns)


def merge_gpu_metrics(parts: list[GpuMetricTotals | None]) -> GpuMetricTotals | None:
    """The windows' integrals added up per (pid, stage)."""
    present = [part for part in parts if part is not None]
    if not present:
        return None
    frames = [part.totals for part in present if len(part.totals)]
    totals = present[0].totals
    if frames:
        frame = pd.concat(frames, ignore_index=True)
        totals = frame.groupby([PID, STAGE], sort=True)[GPU_METRIC_COLUMNS[2:]].sum().reset_index()
    return GpuMetricTotals(totals, present[0].peak_bytes_per_s, present[0].period_ns)


def _rates_while_busy(
    samples: GpuSamples, ops: pd.DataFrame, dropped: DroppedBusy
) -> dict[GpuMetric, np.ndarray]:
    """Per sample, each metric's rate while some op (held or dropped) ran (capped at 100 %;
    0 where none ran), and the clock in MHz as sampled."""
    starts, ends = _union(
        np.r_[dropped.starts_ns, ops[START_NS].to_numpy(dtype=np.int64)],
        np.r_[dropped.ends_ns, ops[END_NS].to_numpy(dtype=np.int64)],
    )
    covered = np.r_[0, np.cumsum(ends - starts)]
    busy = _covered_before(samples.ends_ns, starts, ends, covered) - _covered_before(
        samples.time_ns, starts, ends, covered
    )
    length = (samples.ends_ns - samples.time_ns).astype(np.float64)
    rates: dict[GpuMetric, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(busy > 0, length / np.maximum(busy, 1), 0.0)
    for metric in _SHARES:
        values = samples.values.get(metric)
        if values is None:
            continue
        rates[metric] = np.clip(np.nan_to_num(values) * scale, 0.0, 100.0)
    clock = samples.values.get(GpuMetric.GPC_CLOCK)
    if clock is not None:
        rates[GpuMetric.GPC_CLOCK] = np.nan_to_num(clock) / 1e6
    return rates


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint ones, in time order."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.r_[True, starts[1:] > reach[:-1]]
    group = np.cumsum(new) - 1
    union_ends = np.zeros(int(new.sum()), dtype=np.int64)
    np.maximum.at(union_ends, group, ends)
    return starts[new], union_ends


def _covered_before(
    times: np.ndarray, starts: np.ndarray, ends: np.ndarray, covered: np.ndarray
) -> np.ndarray:
    """Per time, how much of the disjoint intervals lies before it (covered: their cumsum)."""
    at = np.searchsorted(starts, times, side="right")  # intervals starting at or before
    last = np.maximum(at - 1, 0)
    beyond = np.where(at > 0, np.maximum(ends[last] - times, 0), 0) if len(ends) else 0
    return covered[at] - beyond


def _integrals(
    pid: int,
    ops: pd.DataFrame,
    steps: pd.DataFrame,
    samples: GpuSamples,
    rates: dict[GpuMetric, np.ndarray],
) -> pd.DataFrame:
    """One process's integrals per stage: its busy intervals cut to its analysed steps."""
    starts, ends, stages = busy_intervals(ops[ops[PID].to_numpy() == pid])
    mine = steps[steps[PID].to_numpy() == pid]
    step_starts, step_ends = mine[START_NS].to_numpy(), mine[END_NS].to_numpy()
    # The intervals overlapping each step: ends after its start, starts before its end.
    first = np.searchsorted(ends, step_starts, side="right")
    stop = np.searchsorted(starts, step_ends, side="left")
    counts = np.maximum(stop - first, 0)
    if not counts.sum():
        return pd.DataFrame()
    step_of = np.repeat(np.arange(len(mine)), counts)
    at = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    interval = np.repeat(first, counts) + at
    a = np.maximum(starts[interval], step_starts[step_of])
    b = np.minimum(ends[interval], step_ends[step_of])
    keep = b > a
    a, b, stage = a[keep], b[keep], stages[interval[keep]]
    sampled = np.isfinite(samples.values[GpuMetric.DRAM_READ]).astype(np.float64)
    columns: dict[str, np.ndarray] = {SAMPLED_NS: _integral(samples, sampled, a, b)}
    for metric, name in METRIC_NS.items():
        rate = rates.get(metric)
        columns[name] = (
            _integral(samples, rate, a, b) / (100.0 if metric in _SHARES else 1.0)
            if rate is not None
            else np.zeros(len(a))
        )
    pieces = pd.DataFrame({STAGE: stage, **columns})
    # Unrounded: the windows' parts are added up first (merge_gpu_metrics), rounded once
    # (stage_gpu_inputs), so that any cut into windows gives the same figures.
    summed = pieces.groupby(STAGE, sort=True).sum().reset_index()
    return summed.assign(**{PID: pid})[GPU_METRIC_COLUMNS]


def _integral(samples: GpuSamples, rate: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The integral of the piecewise-constant rate (rate[i] over sample i) over each [a, b)."""
    times, ends = samples.time_ns, samples.ends_ns
    if not len(times):
        return np.zeros(len(a))
    cumulative = np.r_[0.0, np.cumsum(rate * (ends - times))]

    def upto(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(times, x, side="right") - 1, 0, len(times) - 1)
        inside = np.clip(x, times[i], ends[i]) - times[i]
        before = np.where(x < times[0], 0.0, cumulative[i] + rate[i] * inside)
        found: np.ndarray = np.asarray(before, dtype=np.float64)
        return found

    difference: np.ndarray = upto(b) - upto(a)
    return difference


def stage_gpu_inputs(
    totals: GpuMetricTotals | None, pid: int, stage_names: np.ndarray
) -> dict[str, StageGpuInputs] | None:
    """One process's integrals per stage name (None without GPU metrics)."""
    if totals is None:
        return None
    mine = totals.totals[totals.totals[PID].to_numpy() == pid]
    names = stage_names[mine[STAGE].to_numpy()]
    return {
        str(name): StageGpuInputs(
            {
                column: int(round(value))
                for column, value in zip(GPU_METRIC_COLUMNS[2:], row, strict=True)
            },
            totals.peak_bytes_per_s,
            totals.period_ns,
        )
        for name, row in zip(names, mine[GPU_METRIC_COLUMNS[2:]].to_numpy().tolist(), strict=True)
    }


def gpu_inputs_of(by_stage: dict[str, StageGpuInputs] | None, stage: str) -> StageGpuInputs | None:
    """A stage's integrals (None without GPU metrics, or for a stage without GPU time)."""
    return None if by_stage is None else by_stage.get(stage)
