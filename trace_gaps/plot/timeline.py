"""The step timeline: the step and its stages, CUDA calls, GPU streams and idle causes as lanes.

    step          [decode_step #12 .........................................]
    stages        [draft ........][verify .............................][acc]
    CUDA API        | || |  |        |||||||||||     [sync ..........]
    GPU 0 str 7        [k][k]  [k]     [k][k][k][k]...                     [k]
    GPU metrics      ▁▂▅▇▇▅▂▁        ▂▅▇▇▇▇▇▅▂                         (with GPU metrics)
    GPU idle      ho  la  qu            host                sync

Everything drawn comes from Report.timelines; the x axis is ms from the first step's start.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter
from matplotlib.transforms import blended_transform_factory

from trace_gaps.errors import TraceGapsError
from trace_gaps.output import LITERAL_TEXT
from trace_gaps.plot.lanes import LANE_HEIGHT, draw_lane, label_lane
from trace_gaps.plot.metrics_lane import (
    DRAM_COLOUR,
    METRICS_LANE,
    SM_COLOUR,
    draw_metrics,
    has_metrics,
)
from trace_gaps.plot.palette import (
    CALL_COLOURS,
    CALL_KINDS,
    CAUSE_COLOURS,
    call_kinds,
    colours_of,
    legend_label,
    legend_name,
    stage_colour_array,
    stage_colours,
)
from trace_gaps.plot.titles import timeline_title
from trace_gaps.records.report import Report
from trace_gaps.records.timeline import Spans, StepTimeline
from trace_gaps.units import NS_PER_MS, NS_PER_S, format_duration
from trace_gaps.vocabulary import CAUSE_ORDER

FIGURE_WIDTH_IN = 16.0
DPI = 100
PLOT_FRACTION = 0.78  # share of the figure width the axes get, for the pixel size
STEP_COLOUR = "#3b3b3b"
WAIT_HATCH = "xxx"
WAITING = "waiting in a collective"  # marks, in `used`, that some op waited
IDLE_SHADE_ALPHA = 0.13
SATURATED = "saturated at this zoom: zoom in with --from/--to"


@rc_context(LITERAL_TEXT)
def plot_timeline(
    report: Report, view: str | None = None, *, window_ns: tuple[int, int] | None = None
) -> Figure:
    """Draw the timelines of one view (default: the first in the report) as lanes.

    window_ns: draw only this part of the x axis (ns from the first step's start), at the
    pixel size of that part: what is saturated over the whole step can be told apart there.
    """
    timelines = [t for t in report.timelines if view is None or t.view == view]
    if view is None and timelines:
        timelines = [t for t in timelines if t.view == timelines[0].view]
    if not timelines:
        raise TraceGapsError(f"the report has no timeline{f' {view!r}' if view else ''} to draw.")
    first = timelines[0]
    # One block of lanes per process (with --ranks, several), all on one time axis whose 0 is
    # the earliest step start drawn: a rank that starts its step late starts right of 0.
    pids = sorted({t.pid for t in timelines}, key=lambda pid: (pid != first.pid, pid))
    origin_ns = min(t.start_offset_ns for t in timelines)
    span_ns = max(t.start_offset_ns - origin_ns + t.wall_ns for t in timelines)
    lane_names, blocks = _lane_blocks(timelines, pids)
    fig = Figure(
        figsize=(FIGURE_WIDTH_IN, 1.9 + 0.42 * len(lane_names)), dpi=DPI, layout="constrained"
    )
    ax = fig.add_subplot()
    low_ns, high_ns = (0, span_ns) if window_ns is None else window_ns
    high_ns = min(high_ns, span_ns)
    if low_ns >= high_ns:
        raise TraceGapsError(
            f"--from/--to: the window {low_ns / NS_PER_MS:g}–{high_ns / NS_PER_MS:g} ms is "
            f"empty; the steps drawn last {span_ns / NS_PER_MS:g} ms."
        )
    ns_per_px = (high_ns - low_ns) / (FIGURE_WIDTH_IN * DPI * PLOT_FRACTION)
    colours = stage_colours(report)
    used: dict[str, set[str]] = {"stages": set(), "calls": set(), "causes": set(), "metrics": set()}
    for group, streams, top in blocks:
        shifts = [t.start_offset_ns - origin_ns for t in group]
        drawn = _draw(ax, group, shifts, streams, colours, ns_per_px, (low_ns, high_ns), top)
        for key, names in drawn.items():
            used[key] |= names
        if top:
            ax.axhline(top - 0.5, color="#888888", linewidth=0.8)

    ax.set_yticks(range(len(lane_names)), lane_names, fontsize=8.5)
    ax.set_ylim(len(lane_names) - 0.5, -0.5)
    ax.set_xlim(low_ns, high_ns)
    # Seconds once the span is long enough for ms ticks to read like 17500.
    unit, ns_per_unit = ("s", NS_PER_S) if high_ns >= 10 * NS_PER_S else ("ms", NS_PER_MS)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda ns, _: f"{ns / ns_per_unit:g}"))
    origin = "the step start" if len(timelines) == 1 else "the first step's start"
    if len(pids) > 1:
        origin = "the earliest step start drawn"
    ax.set_xlabel(f"{unit} from {origin}")
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(timeline_title(report, timelines), fontsize=10, loc="left")
    _add_legends(fig, *_legend(colours, used))
    return fig


# Per process drawn: its timelines, its (device, stream) lanes, and its first lane's row.
_Block = tuple[list[StepTimeline], list[tuple[int, int]], int]


def _lane_blocks(timelines: list[StepTimeline], pids: list[int]) -> tuple[list[str], list[_Block]]:
    """The lanes' names, top to bottom, and one block of lanes per process (pids' order)."""
    lane_names: list[str] = []
    blocks: list[_Block] = []
    for pid in pids:
        group = [t for t in timelines if t.pid == pid]
        streams = sorted({(s.device_id, s.stream_id) for t in group for s in t.streams})
        blocks.append((group, streams, len(lane_names)))
        who = f"{pid} · " if len(pids) > 1 else ""
        lane_names += [
            f"{who}step",
            f"{who}stages (thread {group[0].thread})",
            f"{who}CUDA API (thread {group[0].thread})",
            *[f"{who}GPU {device} stream {stream}" for device, stream in streams],
            *([f"{who}{METRICS_LANE}"] if has_metrics(group) else []),
            f"{who}GPU idle: cause",
        ]
    return lane_names, blocks


def _add_legends(fig: Figure, stage_handles: list[Patch], call_handles: list[Patch]) -> None:
    """The calls' and causes' legend at the right, the stages' below (if any stage shows)."""
    fig.legend(
        handles=call_handles,
        loc="outside right upper",
        fontsize=8,
        frameon=False,
        title="CUDA call / GPU idle cause\n(idle time has the colour\nof the call behind it)",
        title_fontsize=8,
        alignment="left",
    )
    if stage_handles:
        fig.legend(
            handles=stage_handles,
            loc="outside lower center",
            ncol=min(4, len(stage_handles)),
            fontsize=8,
            frameon=False,
            title="stage (colours the stage lane and the ops it launched)",
            title_fontsize=8,
        )


class _Lanes:
    """Draws spans into the lanes of one axes at one zoom, noting the lanes saturated there."""

    def __init__(self, ax: Axes, ns_per_px: float, low_ns: int) -> None:
        self.ax, self.ns_per_px, self.low_ns = ax, ns_per_px, low_ns
        self.saturated: list[int] = []

    def draw(
        self,
        row: float,
        starts: np.ndarray,
        ends: np.ndarray,
        faces: np.ndarray,
        labels: np.ndarray,
        **kw: float,
    ) -> None:
        """Draw the spans in lane `row`, then their labels where they fit."""
        ax, ns_per_px = self.ax, self.ns_per_px
        if draw_lane(ax, row, starts, ends, faces, min_ns=ns_per_px, origin_ns=self.low_ns, **kw):
            self.saturated.append(int(row))
        label_lane(ax, row, starts, ends, labels, ns_per_px=ns_per_px, faces=faces)

    def mark_saturated(self) -> None:
        """Say "saturated at this zoom" at the right end of each saturated lane."""
        for row in self.saturated:
            self.ax.text(
                0.999,
                row,
                SATURATED,
                transform=blended_transform_factory(self.ax.transAxes, self.ax.transData),
                ha="right",
                va="center",
                fontsize=7,
                style="italic",
                bbox={"facecolor": "white", "edgecolor": "#888888", "linewidth": 0.5, "pad": 1.5},
                clip_on=False,
            )


def _draw(
    ax: Axes,
    timelines: list[StepTimeline],
    shifts: list[int],
    streams: list[tuple[int, int]],
    colours: dict[str, str],
    ns_per_px: float,
    window_ns: tuple[int, int],
    top: int = 0,
) -> dict[str, set[str]]:
    """Draw every lane; return the stages, call kinds and causes that appear.

    Only what falls in window_ns is drawn, clipped to it. A lane where several spans share
    a pixel column is marked "saturated at this zoom".
    """
    low_ns, high_ns = window_ns
    lanes = _Lanes(ax, ns_per_px, low_ns)
    steps = _clip(_step_spans(timelines, shifts), low_ns, high_ns)
    stages = _clip(_concat([t.stages for t in timelines], shifts), low_ns, high_ns)
    calls = _clip(_concat([t.api_calls for t in timelines], shifts), low_ns, high_ns)
    idle = _clip(_concat([t.idle for t in timelines], shifts), low_ns, high_ns)
    rows = {key: row for row, key in enumerate(streams, start=top + 3)}
    metrics_lane = top + 3 + len(streams) if has_metrics(timelines) else None
    idle_lane = top + 3 + len(streams) + (metrics_lane is not None)

    step_starts, step_ends = np.array(steps.start_ns), np.array(steps.end_ns)
    step_faces = np.full(len(step_starts), STEP_COLOUR, dtype=object)
    lanes.draw(top, step_starts, step_ends, step_faces, np.array(steps.name), height=0.5)
    stage_names = np.array(stages.group, dtype=object)
    stage_colour = stage_colour_array(colours, stage_names)
    lanes.draw(
        top + 1, np.array(stages.start_ns), np.array(stages.end_ns), stage_colour, stage_names
    )
    kinds = call_kinds(calls.group)
    call_colour = colours_of(CALL_COLOURS, kinds, "black")
    call_names = np.array(calls.name, dtype=object)
    lanes.draw(top + 2, np.array(calls.start_ns), np.array(calls.end_ns), call_colour, call_names)
    op_stages = _draw_streams(ax, lanes, rows, timelines, shifts, colours, window_ns)
    if metrics_lane is not None:
        draw_metrics(ax, metrics_lane, timelines, shifts, window_ns)

    causes = np.array(idle.group, dtype=object)
    idle_starts, idle_ends = np.array(idle.start_ns), np.array(idle.end_ns)
    cause_colour = colours_of(CAUSE_COLOURS, causes, "black")
    lanes.draw(idle_lane, idle_starts, idle_ends, cause_colour, causes)
    if rows:
        # Shade the device's idle time across its stream lanes.
        band = len(rows) - 1 + LANE_HEIGHT
        draw_lane(
            ax,
            top + 3 + (len(rows) - 1) / 2,
            idle_starts,
            idle_ends,
            cause_colour,
            min_ns=ns_per_px,
            height=band,
            alpha=IDLE_SHADE_ALPHA,
            origin_ns=low_ns,
        )
    lanes.mark_saturated()
    return {
        "stages": {legend_name(colours, s) for s in set(stage_names) | op_stages - {WAITING}}
        | ({WAITING} & op_stages),
        "calls": set(kinds),
        "causes": set(causes),
        "metrics": {METRICS_LANE} if metrics_lane is not None else set(),
    }


def _step_spans(timelines: list[StepTimeline], shifts: list[int]) -> Spans:
    """Each step as one span on the shared axis, named with its index and wall."""
    return Spans(
        [s for s in shifts],
        [s + t.wall_ns for s, t in zip(shifts, timelines, strict=True)],
        ["step"] * len(timelines),
        [
            f"{t.step_name or 'whole process'} #{t.step_index}"
            + (" (warm-up)" if t.is_warmup else "")
            + f" · {format_duration(t.wall_ns)}"
            for t in timelines
        ],
    )


def _draw_streams(
    ax: Axes,
    lanes: _Lanes,
    rows: dict[tuple[int, int], int],
    timelines: list[StepTimeline],
    shifts: list[int],
    colours: dict[str, str],
    window_ns: tuple[int, int],
) -> set[str]:
    """Draw each GPU stream's ops in its lane, a collective's wait hatched over; return the
    stages of the ops drawn (WAITING too, if some op waited)."""
    op_stages: set[str] = set()
    for key, row in rows.items():
        lane = [
            (stream, shift)
            for t, shift in zip(timelines, shifts, strict=True)
            for stream in t.streams
            if (stream.device_id, stream.stream_id) == key
        ]
        ops = _clip_concat(
            [stream.ops for stream, _ in lane], [shift for _, shift in lane], window_ns
        )
        op_colour = stage_colour_array(colours, ops.group)
        op_names = np.array(ops.name, dtype=object)
        lanes.draw(row, np.array(ops.start_ns), np.array(ops.end_ns), op_colour, op_names)
        op_stages.update(ops.group)
        waits = _clip_concat(
            [stream.waits for stream, _ in lane], [shift for _, shift in lane], window_ns
        )
        if waits.start_ns:
            # A collective waiting for a peer: its op's colour, hatched over.
            ax.broken_barh(
                [(a, b - a) for a, b in zip(waits.start_ns, waits.end_ns, strict=True)],
                (row - LANE_HEIGHT / 2, LANE_HEIGHT),
                facecolors="none",
                edgecolors="white",
                hatch=WAIT_HATCH,
                linewidth=0,
            )
            op_stages.add(WAITING)
    return op_stages


def _concat(spans: list[Spans], shifts: list[int]) -> Spans:
    """Spans of several steps on one axis: each shifted by its step's offset."""
    starts = [
        np.array(s.start_ns, dtype=np.int64) + shift for s, shift in zip(spans, shifts, strict=True)
    ]
    ends = [
        np.array(s.end_ns, dtype=np.int64) + shift for s, shift in zip(spans, shifts, strict=True)
    ]
    return Spans(
        np.concatenate(starts).tolist() if starts else [],
        np.concatenate(ends).tolist() if ends else [],
        list(chain.from_iterable(s.group for s in spans)),
        list(chain.from_iterable(s.name for s in spans)),
    )


def _clip(spans: Spans, low_ns: int, high_ns: int) -> Spans:
    """The spans that overlap [low_ns, high_ns], cut to it."""
    starts, ends = np.array(spans.start_ns, dtype=np.int64), np.array(spans.end_ns, dtype=np.int64)
    keep = np.flatnonzero((ends > low_ns) & (starts < high_ns))
    return Spans(
        np.maximum(starts[keep], low_ns).tolist(),
        np.minimum(ends[keep], high_ns).tolist(),
        [spans.group[i] for i in keep],
        [spans.name[i] for i in keep],
    )


def _clip_concat(spans: list[Spans], shifts: list[int], window_ns: tuple[int, int]) -> Spans:
    return _clip(_concat(spans, shifts), *window_ns)


def _legend(colours: dict[str, str], used: dict[str, set[str]]) -> tuple[list[Patch], list[Patch]]:
    stages = [
        Patch(facecolor=c, label=legend_label(name))
        for name, c in colours.items()
        if name in used["stages"]
    ]
    calls = [
        Patch(facecolor=CALL_COLOURS[kind], label=f"call: {kind}")
        for kind in CALL_KINDS
        if kind in used["calls"]
    ]
    causes = [
        Patch(facecolor=CAUSE_COLOURS[c.value], label=f"idle: {c.value}")
        for c in CAUSE_ORDER
        if c.value in used["causes"]
    ]
    if WAITING in used["stages"]:
        causes.append(
            Patch(facecolor="#777777", edgecolor="white", hatch=WAIT_HATCH, label=f"GPU {WAITING}")
        )
    if used.get("metrics"):
        causes += [
            Patch(facecolor=DRAM_COLOUR, alpha=0.55, label="GPU DRAM read % of peak"),
            Patch(facecolor=SM_COLOUR, label="GPU SMs active %"),
        ]
    return stages, calls + causes
