"""CUDA graph captures of one process: where each was captured, what it holds, whose stage it is.

A capture is a cudaStreamBeginCapture call and the next EndCapture on the same thread:

    thread  [decode_step ....... [verify_forward .....................................]
    calls                          [BeginCapture] launches... [EndCapture] [Instantiate]
    nodes                                         |||||||||||  (CUDA_GRAPH_NODE_EVENTS)

Its NVTX path is the ranges open on that thread when BeginCapture starts. It belongs to a
stage (see match_stage), which alone may be told that it captured a graph and does not
replay it.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from trace_gaps.analysis.ranges import open_range_path
from trace_gaps.model import END_NS, GLOBAL_TID, NAME, PID, START_NS
from trace_gaps.records.report import GraphCapture

_BEGIN = re.compile(r"^cu(da)?StreamBeginCapture")
_END = re.compile(r"^cu(da)?StreamEndCapture")
_INSTANTIATE = re.compile(r"^cu(da)?GraphInstantiate")
# Words that say "a graph is captured here", not which work: dropped before names are compared.
GENERIC_WORDS = frozenset(
    {"capture", "captured", "capturing", "graph", "graphs", "cuda", "cudagraph", "cudagraphs"}
    | {"record", "recording", "warmup", "warm", "up", "build", "make", "create"}
)


def name_words(name: str) -> set[str]:
    """Lower-case words of a range name: "capture_verify_graph" -> {capture, verify, graph}."""
    return {word for word in re.split(r"[^a-z0-9]+", name.lower()) if word}


def match_stage(path: list[str], stages: list[str]) -> str | None:
    """The stage a capture belongs to, from its NVTX path.

    1. Inside: the innermost range of the path that is a stage name.
    2. Named after: the innermost range of the path whose distinctive words (GENERIC_WORDS
       dropped) all appear in exactly one stage's name: capture_verify_graph -> verify_forward.
    """
    for name in reversed(path):
        if name in stages:
            return name
    for name in reversed(path):
        words = name_words(name) - GENERIC_WORDS
        if not words:
            continue
        hits = [stage for stage in stages if words <= name_words(stage)]
        if len(hits) == 1:
            return hits[0]
    return None


def match_by_nodes(
    nodes: int, stage_launches: dict[str, float], stage_replays: dict[str, float]
) -> str | None:
    """The one stage that replays no graph and launches as many eager ops per step as the
    capture holds nodes, within max(3, 2 %): a graph captured for it but not used."""
    tolerance = max(3.0, 0.02 * nodes)
    hits = [
        stage
        for stage, launches in stage_launches.items()
        if not stage_replays.get(stage) and abs(launches - nodes) <= tolerance
    ]
    return hits[0] if len(hits) == 1 else None


def find_captures(setup_calls: pd.DataFrame, pid: int) -> pd.DataFrame:
    """One row per capture of a process: thread, begin start, end end, instantiations.

    setup_calls: graph setup calls (pid, global_tid, name, start_ns, end_ns).
    """
    calls = setup_calls[setup_calls[PID] == pid].sort_values([GLOBAL_TID, START_NS], kind="stable")
    names = calls[NAME].astype(str)
    rows = []
    for _, thread in calls.groupby(GLOBAL_TID, sort=True):
        thread_id = int(thread[GLOBAL_TID].iloc[0])
        thread_names = names.loc[thread.index]
        begins = thread[thread_names.str.match(_BEGIN).to_numpy()]
        ends = thread[thread_names.str.match(_END).to_numpy()]
        instantiates = thread[thread_names.str.match(_INSTANTIATE).to_numpy()][START_NS].to_numpy()
        begin_starts = begins[START_NS].to_numpy()
        end_starts = ends[START_NS].to_numpy()
        at = np.searchsorted(end_starts, begin_starts, side="left")
        next_begin = np.r_[begin_starts[1:], np.iinfo(np.int64).max]
        for i, begin in enumerate(begin_starts.tolist()):
            end = int(ends[END_NS].to_numpy()[at[i]]) if at[i] < len(ends) else None
            if end is None:
                continue
            after = (instantiates >= end) & (instantiates < next_begin[i])
            rows.append((thread_id, int(begin), end, int(after.sum())))
    return pd.DataFrame(rows, columns=[GLOBAL_TID, START_NS, END_NS, "instantiations"])


def describe_captures(
    captures: pd.DataFrame,
    range_tree: pd.DataFrame,
    graph_nodes: pd.DataFrame | None,
    stage_replays: dict[str, float],
    *,
    trace_start_ns: int,
    stage_launches: dict[str, float] | None = None,
) -> list[GraphCapture]:
    """Each capture with its NVTX path, stage, node count and replays per step.

    graph_nodes None: the export has no CUDA_GRAPH_NODE_EVENTS table. stage_replays: graph
    launches per step of each analysed stage; stage_launches: its eager launches per step. A
    capture whose path names no stage is linked by what it holds (match_by_nodes).
    """
    stages = sorted(stage_replays)
    any_replays = any(stage_replays.values())
    found = []
    for tid, begin, end, instantiations in zip(
        *(captures[c].tolist() for c in (GLOBAL_TID, START_NS, END_NS, "instantiations")),
        strict=True,
    ):
        path = open_range_path(range_tree, tid, begin)
        stage = match_stage(path, stages)
        nodes = None
        if graph_nodes is not None:
            on_thread = graph_nodes[graph_nodes[GLOBAL_TID] == tid][START_NS]
            nodes = int(((on_thread >= begin) & (on_thread <= end)).sum())
        if stage is None and nodes:
            stage = match_by_nodes(nodes, stage_launches or {}, stage_replays)
        replays = stage_replays.get(stage) if stage is not None else None
        found.append(
            GraphCapture(
                thread=tid & 0xFFFFFF,
                begin_offset_ns=begin - trace_start_ns,
                duration_ns=end - begin,
                nvtx_path=path,
                stage=stage,
                instantiations=instantiations,
                node_count=nodes,
                replays_per_step=replays if any_replays else 0.0,
            )
        )
    return found
