"""Colours shared by every figure: one per stage, per CUDA call kind and per idle cause."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from trace_gaps.model import CallCategory
from trace_gaps.records.report import Report
from trace_gaps.vocabulary import BETWEEN_STEPS, NO_LAUNCH_CALL, NO_STAGE, OTHER_THREAD, IdleCause

OTHER_STAGES = "other stages"


# Greys for the stages that are not NVTX ranges, dark enough to read as ops on white.
_SPECIAL_COLOURS = {
    NO_STAGE: "#b0b0b0",
    BETWEEN_STEPS: "#e6e6e6",
    OTHER_THREAD: "#cccccc",
    NO_LAUNCH_CALL: "#303030",
    OTHER_STAGES: "#707070",
}

# Kinds of CUDA call on the API lane, and the categories in each.
CALL_KINDS: dict[str, tuple[CallCategory, ...]] = {
    "launch": (
        CallCategory.LAUNCH_KERNEL,
        CallCategory.LAUNCH_GRAPH,
        CallCategory.LAUNCH_MEMCPY,
        CallCategory.LAUNCH_MEMSET,
    ),
    "sync": (CallCategory.SYNC,),
    "setup (load/alloc/capture)": (
        CallCategory.MODULE_LOAD,
        CallCategory.ALLOC,
        CallCategory.GRAPH_SETUP,
    ),
    "other": (CallCategory.OTHER, CallCategory.LOOKUP),  # a lookup loads nothing
}
CALL_COLOURS = {
    "launch": "#08519c",
    "sync": "#cb181d",
    "setup (load/alloc/capture)": "#ec7014",
    "other": "#a3a3a3",  # light: thin launches (navy) and other calls must not blur together
}

# An idle cause has the colour of the call that explains it.
CAUSE_COLOURS = {
    IdleCause.LAUNCH.value: CALL_COLOURS["launch"],
    IdleCause.SYNC.value: CALL_COLOURS["sync"],
    IdleCause.API.value: CALL_COLOURS["other"],
    IdleCause.QUEUED.value: "#6a51a3",
    IdleCause.HOST.value: "#b8860b",
}


_KIND_OF_CATEGORY = {
    category.value: kind for kind, categories in CALL_KINDS.items() for category in categories
}


def call_kinds(categories: list[str]) -> np.ndarray:
    """The API-lane kind of each CallCategory value."""
    return (
        pd.Series(categories, dtype=object)
        .map(_KIND_OF_CATEGORY)
        .fillna("other")
        .to_numpy(dtype=object)
    )


def colours_of(mapping: dict[str, str], keys: list[str] | np.ndarray, default: str) -> np.ndarray:
    """The colour of each key (a stage, call kind or cause), default where it has none."""
    return pd.Series(keys, dtype=object).map(mapping).fillna(default).to_numpy(dtype=object)


def stage_colours(report: Report) -> dict[str, str]:
    """A colour per stage, derived from its name: the same in every figure, every process
    and both sides of a diff.

    The stages that take most time in the analysed steps (busy + idle per step, summed over
    processes; then those seen only in warm-up steps) get a colour each, at most
    the palette's size; the rest share OTHER_STAGES' grey. A stage's colour comes from its
    name (colours_by_name).
    """
    analysed: dict[str, int] = {}
    for process in report.processes:
        for stage in process.stages:
            total = stage.busy_ns_per_step + stage.idle_ns_per_step
            analysed[stage.name] = analysed.get(stage.name, 0) + total
    every_step: dict[str, int] = {}
    for process in report.processes:
        for entry in process.step_ledger:
            every_step[entry.stage] = every_step.get(entry.stage, 0) + entry.duration_ns
    ranked = sorted(analysed, key=lambda name: (-analysed[name], name))
    ranked += sorted(set(every_step) - set(analysed), key=lambda name: (-every_step[name], name))
    ranked = [name for name in ranked if name not in _SPECIAL_COLOURS][: len(_STAGE_COLOURS)]
    return colours_by_name(ranked) | _SPECIAL_COLOURS


# tab20 without its reds and greys (sync, "no stage") and without the blues and purples
# nearest the launch and queued causes, so that a stage never reads as an idle cause.
_STAGE_COLOURS = (
    "#ff7f0e",
    "#2ca02c",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#ffbb78",
    "#98df8a",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#1f9e89",
    "#e7969c",
)


def colours_by_name(names: list[str]) -> dict[str, str]:
    """Each name's palette colour, chosen by the CRC-32 of the name, not by its time: a stage
    keeps its colour in every picture and on both sides of a diff. Two names that hash to one
    colour in the same picture are told apart: the later name in sort order takes the next
    free colour."""
    taken: dict[int, str] = {}
    for name in sorted(names):
        slot = zlib.crc32(name.encode("utf-8", "surrogatepass")) % len(_STAGE_COLOURS)
        while slot in taken:
            slot = (slot + 1) % len(_STAGE_COLOURS)
        taken[slot] = name
    return {name: _STAGE_COLOURS[slot] for slot, name in taken.items()}


def stage_colour_array(colours: dict[str, str], stages: list[str] | np.ndarray) -> np.ndarray:
    """The colour of each stage; stages without their own share OTHER_STAGES'."""
    return colours_of(colours, stages, colours[OTHER_STAGES])


LEGEND_CHARS = 44


TITLE_CHARS = 80


def title_name(name: str) -> str:
    """A step or process name short enough for a title: a name of a megabyte would make
    matplotlib lay out (and rasterise) text far wider than any picture."""
    return name if len(name) <= TITLE_CHARS else name[: TITLE_CHARS - 1] + "…"


def legend_label(name: str) -> str:
    """A stage name short enough for a legend entry (the start says most: op, block number)."""
    return name if len(name) <= LEGEND_CHARS else name[: LEGEND_CHARS - 1] + "…"


def legend_name(colours: dict[str, str], stage: str) -> str:
    """The legend entry a stage falls under."""
    return stage if stage in colours else OTHER_STAGES
