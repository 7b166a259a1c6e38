"""A metric: its declaration (a name, how a window computes it, how windows merge) and the merge rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import pandas as pd

from trace_gaps.analysis.engine.frames import WindowFrames

Part = TypeVar("Part")  # what one window computes
Merged = TypeVar("Merged")  # what the windows' parts merge to


@dataclass(frozen=True, slots=True)
class Metric(Generic[Part, Merged]):
    """One per-window result: computed from each window's frames, merged over the windows."""

    name: str
    compute: Callable[[WindowFrames], Part]
    merge: Callable[[list[Part]], Merged]


_DECLARED: list[Metric[Any, Any]] = []


def declare(
    name: str,
    compute: Callable[[WindowFrames], Part],
    merge: Callable[[list[Part]], Merged],
) -> Metric[Part, Merged]:
    """Declare a metric: every window computes it, and the analysis merges it (METRICS)."""
    metric = Metric(name, compute, merge)
    if any(declared.name == name for declared in _DECLARED):
        raise ValueError(f"metric {name} is declared twice")
    _DECLARED.append(metric)
    return metric


def declared() -> tuple[Metric[Any, Any], ...]:
    """Every metric declared so far, in the order of declaration."""
    return tuple(_DECLARED)


@dataclass(frozen=True, slots=True)
class MergedMetrics:
    """Every declared metric merged over the windows; index it with the metric."""

    by_name: Mapping[str, object]

    def __getitem__(self, metric: Metric[Any, Merged]) -> Merged:
        return cast(Merged, self.by_name[metric.name])


def merge_parts(
    metrics: tuple[Metric[Any, Any], ...], parts: Mapping[str, list[Any]]
) -> MergedMetrics:
    """Merge each metric's per-window parts by its rule."""
    return MergedMetrics({metric.name: metric.merge(parts[metric.name]) for metric in metrics})


# Merge rules. Each drops empty parts and gives int64 columns when every part is empty.


def concatenated(columns: list[str]) -> Callable[[list[pd.DataFrame]], pd.DataFrame]:
    """The parts' rows, window after window."""

    def merge(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [frame for frame in frames if len(frame)]
        if not frames:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})
        return pd.concat(frames, ignore_index=True)

    return merge


def summed(keys: list[str], values: list[str]) -> Callable[[list[pd.DataFrame]], pd.DataFrame]:
    """The parts' values added up per key, sorted by key (categorical keys as text)."""

    def merge(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [frame for frame in frames if len(frame)]
        if not frames:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in [*keys, *values]})
        frame = pd.concat(frames, ignore_index=True)
        for key in keys:
            if isinstance(frame[key].dtype, pd.CategoricalDtype):
                frame[key] = frame[key].astype(str)
        return frame.groupby(keys, sort=True)[values].sum().reset_index()

    return merge


def top_of(
    merge: Callable[[list[pd.DataFrame]], pd.DataFrame],
    top: Callable[[pd.DataFrame], pd.DataFrame],
) -> Callable[[list[pd.DataFrame]], pd.DataFrame]:
    """The top rows (by `top`) of the parts merged by `merge`."""
    return lambda frames: top(merge(frames))
