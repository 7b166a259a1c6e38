"""Every step as a stacked bar of its ledger: busy (solid) and idle (hatched) per stage.

Warm-up steps are drawn faded, so outliers and drift among the analysed steps stand out.
One panel per process, in the report's order. Past MAX_BARS steps a bar would be
narrower than a pixel: each (stage, busy|idle) is then one stacked band over the steps.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from trace_gaps.errors import TraceGapsError
from trace_gaps.output import LITERAL_TEXT
from trace_gaps.plot.palette import (
    OTHER_STAGES,
    legend_label,
    stage_colours,
    title_name,
)
from trace_gaps.plot.titles import exports_named
from trace_gaps.records.report import ProcessReport, Report
from trace_gaps.units import NS_PER_MS
from trace_gaps.vocabulary import Bucket

WARMUP_ALPHA = 0.3
IDLE_HATCH = "////"
WAIT_HATCH = "xxx"  # GPU held by a collective waiting for a peer process
P50_COLOUR = "#444444"
MAX_TICKS = 25
HEADROOM = 1.15  # the y axis ends this much above the tallest steady step
STEADY_FACTOR = 3.0  # a step longer than this many times the median wall is not steady
MIN_SLOTS = 3
MAX_BARS = 400  # more steps than this: stacked bands instead of bars
LEGEND_COLUMN_IN = 3.2  # an entry of LEGEND_CHARS characters at fontsize 8


@rc_context(LITERAL_TEXT)
def plot_steps(report: Report) -> Figure:
    """Draw one stacked bar per step (warm-up ones faded), one panel per process."""
    processes = [p for p in report.processes if p.step_rows]
    if not processes:
        raise TraceGapsError("the report has no steps to draw.")
    most_steps = max(len(p.step_rows) for p in processes)
    width = min(
        14.0, max(10.0, 3.0 + 0.3 * most_steps)
    )  # a few steps: narrow figure, no empty panel
    fig = Figure(figsize=(width, 1.4 + 3.6 * len(processes)), dpi=100, layout="constrained")
    axes = fig.subplots(len(processes), 1, squeeze=False)[:, 0]
    colours = stage_colours(report)
    used: set[str] = set()
    has_warmup = False
    for ax, process in zip(axes, processes, strict=True):
        used |= _draw_process(ax, process, colours)
        has_warmup |= any(row.is_warmup for row in process.step_rows)
    fig.suptitle(
        f"{exports_named(report)} — step wall time by stage: GPU busy (solid) and idle (hatched)",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    handles = [
        Patch(facecolor=c, label=legend_label(name)) for name, c in colours.items() if name in used
    ]
    handles += [
        Patch(facecolor="white", edgecolor="#555555", label="busy", linewidth=0.6),
        Patch(
            facecolor="white",
            edgecolor="#555555",
            hatch=IDLE_HATCH,
            label="GPU idle",
            linewidth=0.6,
        ),
    ]
    if any(e.bucket == Bucket.WAIT.value for p in report.processes for e in p.step_ledger):
        handles.append(
            Patch(
                facecolor="white",
                edgecolor="#555555",
                hatch=WAIT_HATCH,
                label="GPU waiting in collectives",
                linewidth=0.6,
            )
        )
    if has_warmup:
        handles.append(
            Patch(facecolor=to_rgba("#555555", WARMUP_ALPHA), label="warm-up step (skipped)")
        )
    columns = min(len(handles), int(width // LEGEND_COLUMN_IN))
    fig.legend(handles=handles, loc="outside lower center", ncol=columns, fontsize=8, frameon=False)
    return fig


def _draw_process(ax: Axes, process: ProcessReport, colours: dict[str, str]) -> set[str]:
    """Stack the process's steps; return the legend names of the stages drawn."""
    rows, table, stages = _step_table(process, colours)
    warm = rows["is_warmup"].to_numpy()
    _stack(ax, table, stages, warm, colours)
    if len(rows) > MAX_BARS:
        _fade_warmup_bands(ax, warm)
    p50_note = ""
    if (~warm).any():
        p50 = process.steps.wall.p50_ns / NS_PER_MS
        ax.axhline(p50, color=P50_COLOUR, linewidth=0.8, linestyle="--")
        p50_note = f"; dashed line: p50 of the analysed steps, {p50:.2f} ms"
    _clip_to_steady(ax, rows["wall"].to_numpy() / NS_PER_MS)
    ticks = np.arange(0, len(rows), _tick_step(len(rows)))
    ax.set_xticks(ticks, [str(i) for i in rows["index"].to_numpy()[ticks]])
    # A lone step stays a bar, not a block filling the panel.
    ax.set_xlim(-0.6, max(len(rows), MIN_SLOTS) - 0.4)
    ax.set_xlabel("step index (time order)")
    ax.set_ylabel("ms")
    name = f" ({title_name(process.name)})" if process.name else ""
    name += f" of {process.export_file}" if process.export_file else ""
    step = title_name(process.steps.name or "whole process")
    ax.set_title(
        f"process {process.pid}{name} — {step}: {process.steps.steps_analysed} analysed, "
        f"{process.steps.steps_skipped} warm-up{p50_note}",
        fontsize=9,
        loc="left",
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return set(stages)


def _step_table(
    process: ProcessReport, colours: dict[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the steps in time order, ns per (stage, bucket) row and step column, the stages in
    stacking order): biggest at the bottom, "other stages" (no colour of its own) last."""
    rows = pd.DataFrame(
        {
            "step_id": [r.step_id for r in process.step_rows],
            "index": [r.step_index for r in process.step_rows],
            "is_warmup": [r.is_warmup for r in process.step_rows],
            "start": [r.start_offset_ns for r in process.step_rows],
            "wall": [r.wall_ns for r in process.step_rows],
        }
    ).sort_values(["start", "step_id"], kind="stable")
    ledger = pd.DataFrame(
        {
            "step_id": [e.step_id for e in process.step_ledger],
            "stage": [e.stage for e in process.step_ledger],
            "bucket": [e.bucket for e in process.step_ledger],
            "duration_ns": [e.duration_ns for e in process.step_ledger],
        }
    )
    # Stages without a colour of their own stack as one "other stages" block.
    ledger["stage"] = ledger["stage"].where(ledger["stage"].isin(list(colours)), OTHER_STAGES)
    table = (
        ledger.groupby(["stage", "bucket", "step_id"])["duration_ns"]
        .sum()
        .unstack("step_id", fill_value=0)
        .reindex(columns=rows["step_id"], fill_value=0)
    )
    # Biggest stages at the bottom, busy under idle within a stage; "other stages" last.
    order = (
        table.groupby(level="stage").sum().sum(axis=1).sort_values(ascending=False, kind="stable")
    )
    stages = [s for s in order.index if s != OTHER_STAGES] + [
        s for s in order.index if s == OTHER_STAGES
    ]
    return rows, table, stages


def _stack(
    ax: Axes, table: pd.DataFrame, stages: list[str], warm: np.ndarray, colours: dict[str, str]
) -> None:
    """Stack each (stage, bucket)'s ms per step: bars, warm-up faded; bands past MAX_BARS."""
    x = np.arange(len(warm))
    bottom = np.zeros(len(warm))
    for stage in stages:
        for bucket in (Bucket.BUSY.value, Bucket.WAIT.value, Bucket.IDLE.value):
            if (stage, bucket) not in table.index:
                continue
            row = cast(pd.Series, table.loc[(stage, bucket)])  # one (stage, bucket) row
            height = row.to_numpy() / NS_PER_MS
            hatch = {Bucket.IDLE.value: IDLE_HATCH, Bucket.WAIT.value: WAIT_HATCH}.get(bucket)
            if len(warm) > MAX_BARS:
                ax.fill_between(
                    x,
                    bottom,
                    bottom + height,
                    step="mid",
                    facecolor=colours[stage],
                    linewidth=0,
                    hatch=hatch,
                    edgecolor="white" if hatch else None,
                    label=f"{stage} {bucket}",
                )
            else:
                face = np.where(
                    warm[:, None],
                    [to_rgba(colours[stage], WARMUP_ALPHA)],
                    [to_rgba(colours[stage])],
                )
                ax.bar(
                    x,
                    height,
                    bottom=bottom,
                    width=0.85,
                    color=face,
                    linewidth=0,
                    hatch=hatch,
                    edgecolor="white" if hatch else None,
                    label=f"{stage} {bucket}",
                )
            bottom += height


def _fade_warmup_bands(ax: Axes, warm: np.ndarray) -> None:
    """Fade the warm-up steps of a band plot: a white veil over each run of them."""
    edges = np.diff(np.r_[0, warm.astype(np.int8), 0])
    for first, stop in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        ax.axvspan(
            first - 0.5, stop - 0.5, color="white", alpha=1 - WARMUP_ALPHA, linewidth=0, zorder=3
        )


def _tick_step(n: int) -> int:
    """1, 2, 5, 10, 20, 50, ...: the smallest that leaves at most MAX_TICKS ticks."""
    step = 1
    while n / step > MAX_TICKS:
        step = step * 5 // 2 if str(step).startswith("2") else step * 2
    return step


def _clip_to_steady(ax: Axes, wall_ms: np.ndarray) -> None:
    """Scale the axis to the steady steps; write the height of each bar cut off.

    Steady: at most STEADY_FACTOR times the median wall of all steps, whatever the skip
    rule marked as warm-up. A first step that compiles kernels can be 40x the others and
    would flatten them all, also when every step was skipped.
    """
    if len(wall_ms) == 0:
        return
    steady = wall_ms <= STEADY_FACTOR * float(np.median(wall_ms))
    top = float(wall_ms[steady].max()) * HEADROOM
    if top <= 0 or not (wall_ms > top).any():
        return
    ax.set_ylim(0, top)
    for x in np.flatnonzero(wall_ms > top):
        ax.text(
            float(x),
            top,
            f"{wall_ms[x]:.0f} ms ↑",
            ha="center",
            va="top",
            fontsize=7.5,
            color=P50_COLOUR,
            rotation=90,
        )
