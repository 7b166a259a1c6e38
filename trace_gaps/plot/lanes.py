"""Drawing spans on a lane: spans narrower than a pixel by their share of each pixel column."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba

from trace_gaps.intervals import covered_before, label_runs, merge_overlapping

LANE_HEIGHT = 0.8
CHAR_PX = 6.0  # width of one character of the lane labels (fontsize 7.5), in pixels
MAX_LABELS_PER_LANE = 60
MIN_LABEL_CHARS = 8  # a shorter stub ("fla…") says nothing
DENSE_PX = 2.0  # spans narrower than this are drawn by their share of each pixel column
SHARE_STEPS = 50  # a column's shares are drawn to 1/50 of the lane's height
# A lane is saturated at this zoom when several spans under a pixel wide share a column in
# at least this many columns, and in this share of the columns it fills.
SATURATED_COLUMNS = 3
SATURATED_SHARE = 0.1


def merge_spans(
    starts: np.ndarray, ends: np.ndarray, min_ns: float
) -> tuple[np.ndarray, np.ndarray]:
    """Merge spans that overlap or lie closer than min_ns; widen the rest to min_ns.

    At a given zoom, min_ns is one pixel: what merges could not be told apart anyway.
    """
    merged_starts, merged_ends = merge_overlapping(
        starts.astype(float), ends.astype(float), within=min_ns
    )
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
    origin_ns: float = 0.0,
) -> bool:
    """Draw one lane, one artist per colour; return whether it is saturated at this zoom.

    min_ns is one pixel. Spans at least DENSE_PX pixels wide are drawn as they are. Narrower
    spans are drawn by pixel column: in each column (from origin_ns), each colour fills the
    share of the lane's height that its spans cover of the column's time, stacked from the
    lane's bottom, the colour with the most time first. A column a tenth busy is a tenth
    full, whatever was drawn last. The lane is saturated when several spans under a pixel
    share a column often enough (SATURATED_COLUMNS, SATURATED_SHARE): single spans cannot
    be told apart there.
    """
    starts, ends = starts.astype(float), ends.astype(float)
    wide = ends - starts >= DENSE_PX * min_ns
    bottom = lane + height / 2  # the y axis is inverted: the lane's bottom is its larger y
    faces = colours.astype(str)
    for colour in np.unique(faces[wide]):
        mask = wide & (faces == colour)
        merged_starts, merged_ends = merge_spans(starts[mask], ends[mask], 0.0)
        ax.broken_barh(
            list(zip(merged_starts.tolist(), (merged_ends - merged_starts).tolist(), strict=True)),
            (lane - height / 2, height),
            facecolors=colour,
            edgecolors="none",
            alpha=alpha,
            linewidth=0,
        )
    narrow = ~wide
    if not narrow.any():
        return False
    columns = ColumnShares.of(starts[narrow], ends[narrow], faces[narrow], min_ns, origin_ns)
    filled = np.zeros(len(columns.left_ns))
    for colour, shares in zip(columns.colours, columns.shares, strict=True):
        heights = np.round(shares * SHARE_STEPS) / SHARE_STEPS * height
        tops = bottom - filled - heights
        filled = filled + heights
        rectangles = _runs(columns.left_ns, min_ns, tops, heights)
        if rectangles:
            ax.add_collection(
                PolyCollection(
                    rectangles, facecolors=colour, edgecolors="none", alpha=alpha, linewidth=0
                )
            )
    ax.autoscale_view()
    crowded = np.count_nonzero(columns.spans >= 2)
    occupied = min((ends - starts).sum(), ends.max() - starts.min()) / min_ns  # columns drawn
    return bool(crowded >= max(SATURATED_COLUMNS, SATURATED_SHARE * occupied))


@dataclass(frozen=True, slots=True)
class ColumnShares:
    """Per pixel column, the share of its time each colour's spans cover (0 to 1)."""

    left_ns: np.ndarray  # each column's left edge
    colours: list[str]  # most time first
    shares: list[np.ndarray]  # per colour, per column; the column sums are at most 1
    spans: np.ndarray  # per column, how many spans under a pixel wide touch it

    @staticmethod
    def of(
        starts: np.ndarray, ends: np.ndarray, faces: np.ndarray, min_ns: float, origin_ns: float
    ) -> ColumnShares:
        first = np.floor((starts.min() - origin_ns) / min_ns)
        last = np.ceil((ends.max() - origin_ns) / min_ns)
        edges = origin_ns + np.arange(first, last + 1) * min_ns
        per_colour = {
            str(colour): np.diff(
                covered_before(starts[faces == colour], ends[faces == colour], edges)
            )
            for colour in np.unique(faces)
        }
        colours = sorted(per_colour, key=lambda c: (-per_colour[c].sum(), c))
        covered = np.array([per_colour[c] for c in colours]) / min_ns
        total = covered.sum(axis=0)
        covered = covered / np.maximum(total, 1.0)  # overlapping spans: the column is full
        # Spans under a pixel touch at most two columns: count each in both.
        sub_pixel = ends - starts < min_ns
        first_column = np.floor((starts[sub_pixel] - origin_ns) / min_ns) - first
        last_column = np.ceil((ends[sub_pixel] - origin_ns) / min_ns) - first - 1
        spans = np.zeros(len(edges) - 1, dtype=np.int64)
        np.add.at(spans, first_column.astype(np.int64), 1)
        later = last_column > first_column
        np.add.at(spans, last_column[later].astype(np.int64), 1)
        return ColumnShares(edges[:-1], colours, list(covered), spans)


def _runs(
    left_ns: np.ndarray, width_ns: float, tops: np.ndarray, heights: np.ndarray
) -> list[np.ndarray]:
    """Rectangles of columns with a height, neighbours of equal top and height merged."""
    drawn = np.flatnonzero(heights > 0)
    first, last = label_runs(drawn, tops[drawn], heights[drawn])
    rectangles = []
    for first_column, last_column in zip(drawn[first].tolist(), drawn[last].tolist(), strict=True):
        x0, x1 = left_ns[first_column], left_ns[last_column] + width_ns
        y0, y1 = tops[first_column], tops[first_column] + heights[first_column]
        rectangles.append(np.array([[x0, y0], [x0, y1], [x1, y1], [x1, y0]]))
    return rectangles


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
