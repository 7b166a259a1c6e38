"""The timeline's GPU metrics lane: the GPU's samples over the step, DRAM read % filled, SM
active % a line."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes

from trace_gaps.plot.lanes import LANE_HEIGHT
from trace_gaps.records.timeline import StepTimeline

DRAM_COLOUR = "#1f77b4"
SM_COLOUR = "#d62728"
METRICS_LANE = "GPU metrics: DRAM read %, SM active % (0–100)"


def has_metrics(timelines: list[StepTimeline]) -> bool:
    """Whether any of the timelines carries GPU metric samples."""
    return any(t.gpu_metrics is not None and t.gpu_metrics.start_ns for t in timelines)


def draw_metrics(
    ax: Axes,
    row: int,
    timelines: list[StepTimeline],
    shifts: list[int],
    window_ns: tuple[int, int],
) -> None:
    """The GPU's samples as steps in one lane, 0 % at its bottom and 100 % at its top: DRAM
    read filled, SM active a line (each sample holds its value over its period)."""
    low_ns, high_ns = window_ns
    bottom, height = row + LANE_HEIGHT / 2, LANE_HEIGHT  # the y axis runs downwards
    for timeline, shift in zip(timelines, shifts, strict=True):
        lane = timeline.gpu_metrics
        if lane is None or not lane.start_ns:
            continue
        starts = np.array(lane.start_ns, dtype=np.int64) + shift
        ends = np.array(lane.end_ns, dtype=np.int64) + shift
        keep = (ends > low_ns) & (starts < high_ns)
        if not keep.any():
            continue
        # Each sample's value from its start to its end: x doubled, values repeated.
        x = np.column_stack([np.maximum(starts[keep], low_ns), np.minimum(ends[keep], high_ns)])
        x = x.ravel()
        for values, filled, colour in (
            (lane.dram_read_pct, True, DRAM_COLOUR),
            (lane.sm_active_pct, False, SM_COLOUR),
        ):
            y = bottom - height * np.repeat(np.array(values)[keep], 2) / 100
            if filled:
                ax.fill_between(x, bottom, y, color=colour, alpha=0.55, linewidth=0)
            else:
                ax.plot(x, y, color=colour, linewidth=0.8)
    ax.axhline(bottom - height, color="#cccccc", linewidth=0.4, zorder=0)
    ax.axhline(bottom, color="#cccccc", linewidth=0.4, zorder=0)
