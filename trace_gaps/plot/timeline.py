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
from trace_gaps.model import CAUSE_ORDER
from trace_gaps.plot.lanes import LANE_HEIGHT, draw_lane, label_lane
from trace_gaps.plot.palette import (
    CALL_COLOURS,
    CALL_KINDS,
    CAUSE_COLOURS,
    LITERAL_TEXT,
    call_kinds,
    colours_of,
    legend_label,
    legend_name,
    stage_colour_array,
    stage_colours,
    title_name,
)
from trace_gaps.records import Report, Spans, StepTimeline
from trace_gaps.report.timeline import finding_words
from trace_gaps.units import NS_PER_MS, NS_PER_S, format_duration

FIGURE_WIDTH_IN = 16.0
DPI = 100
PLOT_FRACTION = 0.78  # share of the figure width the axes get, for the pixel size
STEP_COLOUR = "#3b3b3b"
WAIT_HATCH = "xxx"
WAITING = "waiting in a collective"  # marks, in `used`, that some op waited
IDLE_SHADE_ALPHA = 0.13
DRAM_COLOUR = "#1f77b4"  # the metrics lane: DRAM read % filled, SM active % a line
SM_COLOUR = "#d62728"
METRICS_LANE = "GPU metrics: DRAM read %, SM active % (0–100)"
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
    lane_names: list[str] = []
    blocks: list[tuple[list[StepTimeline], list[tuple[int, int]], int]] = []
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
            *([f"{who}{METRICS_LANE}"] if _has_metrics(group) else []),
            f"{who}GPU idle: cause",
        ]
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
    ax.set_title(_title(report, timelines), fontsize=10, loc="left")
    stage_handles, call_handles = _legend(colours, used)
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
    return fig


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
    steps = Spans(
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
    steps = _clip(steps, low_ns, high_ns)
    stages = _clip(_concat([t.stages for t in timelines], shifts), low_ns, high_ns)
    calls = _clip(_concat([t.api_calls for t in timelines], shifts), low_ns, high_ns)
    idle = _clip(_concat([t.idle for t in timelines], shifts), low_ns, high_ns)
    lanes = {key: row for row, key in enumerate(streams, start=top + 3)}
    metrics_lane = top + 3 + len(streams) if _has_metrics(timelines) else None
    idle_lane = top + 3 + len(streams) + (metrics_lane is not None)
    saturated: list[int] = []

    def draw(
        row: float, starts: np.ndarray, ends: np.ndarray, faces: np.ndarray, **kw: float
    ) -> None:
        if draw_lane(ax, row, starts, ends, faces, min_ns=ns_per_px, origin_ns=low_ns, **kw):
            saturated.append(int(row))

    step_starts, step_ends = np.array(steps.start_ns), np.array(steps.end_ns)
    step_faces = np.full(len(step_starts), STEP_COLOUR, dtype=object)
    draw(top, step_starts, step_ends, step_faces, height=0.5)
    label_lane(
        ax, top, step_starts, step_ends, np.array(steps.name), ns_per_px=ns_per_px, faces=step_faces
    )

    stage_names = np.array(stages.group, dtype=object)
    stage_starts, stage_ends = np.array(stages.start_ns), np.array(stages.end_ns)
    stage_colour = stage_colour_array(colours, stage_names)
    draw(top + 1, stage_starts, stage_ends, stage_colour)
    label_lane(
        ax, top + 1, stage_starts, stage_ends, stage_names, ns_per_px=ns_per_px, faces=stage_colour
    )

    kinds = call_kinds(calls.group)
    call_starts, call_ends = np.array(calls.start_ns), np.array(calls.end_ns)
    call_colour = colours_of(CALL_COLOURS, kinds, "black")
    draw(top + 2, call_starts, call_ends, call_colour)
    label_lane(
        ax,
        top + 2,
        call_starts,
        call_ends,
        np.array(calls.name, dtype=object),
        ns_per_px=ns_per_px,
        faces=call_colour,
    )

    op_stages: set[str] = set()
    for key, row in lanes.items():
        lane = [
            (stream, shift)
            for t, shift in zip(timelines, shifts, strict=True)
            for stream in t.streams
            if (stream.device_id, stream.stream_id) == key
        ]
        ops = _clip_concat(
            [stream.ops for stream, _ in lane], [shift for _, shift in lane], window_ns
        )
        starts, ends = np.array(ops.start_ns), np.array(ops.end_ns)
        op_colour = stage_colour_array(colours, ops.group)
        draw(row, starts, ends, op_colour)
        label_lane(
            ax,
            row,
            starts,
            ends,
            np.array(ops.name, dtype=object),
            ns_per_px=ns_per_px,
            faces=op_colour,
        )
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

    if metrics_lane is not None:
        _draw_metrics(ax, metrics_lane, timelines, shifts, window_ns)

    causes = np.array(idle.group, dtype=object)
    idle_starts, idle_ends = np.array(idle.start_ns), np.array(idle.end_ns)
    cause_colour = colours_of(CAUSE_COLOURS, causes, "black")
    draw(idle_lane, idle_starts, idle_ends, cause_colour)
    label_lane(
        ax, idle_lane, idle_starts, idle_ends, causes, ns_per_px=ns_per_px, faces=cause_colour
    )
    if lanes:
        # Shade the device's idle time across its stream lanes.
        band = len(lanes) - 1 + LANE_HEIGHT
        draw_lane(
            ax,
            top + 3 + (len(lanes) - 1) / 2,
            idle_starts,
            idle_ends,
            cause_colour,
            min_ns=ns_per_px,
            height=band,
            alpha=IDLE_SHADE_ALPHA,
            origin_ns=low_ns,
        )
    for row in saturated:
        ax.text(
            0.999,
            row,
            SATURATED,
            transform=blended_transform_factory(ax.transAxes, ax.transData),
            ha="right",
            va="center",
            fontsize=7,
            style="italic",
            bbox={"facecolor": "white", "edgecolor": "#888888", "linewidth": 0.5, "pad": 1.5},
            clip_on=False,
        )
    return {
        "stages": {legend_name(colours, s) for s in set(stage_names) | op_stages - {WAITING}}
        | ({WAITING} & op_stages),
        "calls": set(kinds),
        "causes": set(causes),
        "metrics": {METRICS_LANE} if metrics_lane is not None else set(),
    }


def _has_metrics(timelines: list[StepTimeline]) -> bool:
    return any(t.gpu_metrics is not None and t.gpu_metrics.start_ns for t in timelines)


def _draw_metrics(
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


def _title(report: Report, timelines: list[StepTimeline]) -> str:
    pids = sorted({t.pid for t in timelines}, key=lambda pid: (pid != timelines[0].pid, pid))
    if len(pids) > 1:
        return _ranks_title(report, timelines, pids)
    first, last = timelines[0], timelines[-1]
    process = next((p for p in report.processes if p.pid == first.pid), None)
    who = f"process {first.pid}" + (
        f" ({title_name(process.name)})" if process and process.name else ""
    )
    name = title_name(first.step_name or "whole process")
    if len(timelines) == 1:
        which = {"median": "median step", "worst": "slowest step"}.get(first.view, "step")
        steps = f"{which}: {name} #{first.step_index}" + (" (warm-up)" if first.is_warmup else "")
        if first.finding:
            steps = f"{name} #{first.step_index}, the step {finding_words(first)}"
        wall = f"wall {format_duration(first.wall_ns)}"
    else:
        steps = f"steps {name} #{first.step_index}–#{last.step_index}"
        wall = (
            "walls "
            + ", ".join(format_duration(t.wall_ns) for t in timelines[:6])
            + (", …" if len(timelines) > 6 else "")
        )
    if process is not None and process.steps.steps_analysed:
        p50 = format_duration(process.steps.wall.p50_ns)
        wall += f" (p50 of {process.steps.steps_analysed} analysed: {p50})"
    return f"{report.export.file} — {who}, thread {first.thread}\n{steps} — {wall}"


def _ranks_title(report: Report, timelines: list[StepTimeline], pids: list[int]) -> str:
    """Which processes and steps, and how late each process starts them after the first."""
    first = timelines[0]
    name = title_name(first.step_name or "whole process")
    indices = sorted({t.step_index for t in timelines})
    which = f"#{indices[0]}" if len(indices) == 1 else f"#{indices[0]}–#{indices[-1]}"
    per_pid = {pid: sorted({t.step_index for t in timelines if t.pid == pid}) for pid in pids}
    if len(indices) > 1 and all(len(found) == 1 for found in per_pid.values()):
        # The same step of each rank (paired by time across exports), numbered by each.
        which = "(" + ", ".join(f"{pid} #{found[0]}" for pid, found in per_pid.items()) + ")"
    starts = {pid: min(t.start_offset_ns for t in timelines if t.pid == pid) for pid in pids}
    skews = ", ".join(f"{pid} {_signed_ms(starts[pid] - starts[first.pid])}" for pid in pids[1:])
    return (
        f"{report.export.file} — processes {', '.join(map(str, pids))} on one time axis\n"
        f"{name} {which} of each process — step start after {first.pid}: {skews}"
    )


def _signed_ms(ns: int) -> str:
    return ("+" if ns >= 0 else "−") + format_duration(abs(ns))


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
