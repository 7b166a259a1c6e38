"""Drawing spans on a lane: merge what is narrower than a pixel, one artist per colour."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba

LANE_HEIGHT = 0.8
CHAR_PX = 6.0  # width of one character of the lane labels (fontsize 7.5), in pixels
MAX_LABELS_PER_LANE = 60
MIN_LABEL_CHARS = 8  # a shorter stub ("fla…") says nothing


def merge_spans(
    starts: np.ndarray, ends: np.ndarray, min_ns: float
) -> tuple[np.ndarray, np.ndarray]:
    """Merge spans that overlap or lie closer than min_ns; widen the rest to min_ns.

    At a given zoom, min_ns is one pixel: what merges could not be told apart anyway.
    """
    if len(starts) == 0:
        return starts.astype(float), ends.astype(float)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order].astype(float), ends[order].astype(float)
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1] + min_ns])
    merged_starts = starts[first]
    merged_ends = np.maximum.reduceat(ends, first)
    return merged_starts, np.maximum(merged_ends, merged_starts + min_ns)


def draw_lane(
    ax: Axes,
    lane: float,
    starts: np.ndarray,
    ends: np.ndarray,
    colours: np.ndarray,
    *,
    min_ns: float,
    height: float = LANE_HEIGHT,
    alpha: float = 1.0,
) -> None:
    """Draw one lane: one broken_barh per colour, spans merged at pixel resolution."""
    for colour in np.unique(colours):
        mask = colours == colour
        merged_starts, merged_ends = merge_spans(starts[mask], ends[mask], min_ns)
        ax.broken_barh(
            list(zip(merged_starts.tolist(), (merged_ends - merged_starts).tolist(), strict=True)),
            (lane - height / 2, height),
            facecolors=str(colour),
            edgecolors="none",
            alpha=alpha,
            linewidth=0,
        )


def label_lane(
    ax: Axes,
    lane: float,
    starts: np.ndarray,
    ends: np.ndarray,
    names: np.ndarray,
    *,
    ns_per_px: float,
    faces: np.ndarray,
) -> None:
    """Write each span's name inside it where at least a few characters fit; widest first.

    faces: each span's fill colour; the text is white on dark fills, black on light ones.
    """
    width_px = (ends - starts) / ns_per_px
    fits = np.flatnonzero(width_px >= (MIN_LABEL_CHARS + 1) * CHAR_PX)
    widest = fits[np.argsort(-width_px[fits], kind="stable")][:MAX_LABELS_PER_LANE]
    for at in widest:
        chars = int((width_px[at] - CHAR_PX) // CHAR_PX)
        text = _elide(str(names[at]), chars)
        if not text:
            continue
        ax.text(
            (starts[at] + ends[at]) / 2,
            lane,
            text,
            ha="center",
            va="center",
            fontsize=7.5,
            color=text_colour(str(faces[at])),
            clip_on=True,
        )


def text_colour(face: str) -> str:
    """White on a dark fill, black on a light one (relative luminance, sRGB weights)."""
    red, green, blue, _ = to_rgba(face)
    return "white" if 0.2126 * red + 0.7152 * green + 0.0722 * blue < 0.5 else "black"


def _elide(name: str, chars: int) -> str:
    if len(name) <= chars:
        return name
    return name[: chars - 1] + "…" if chars >= MIN_LABEL_CHARS else ""
