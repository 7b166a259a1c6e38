"""Integrity notes: what in the export makes some numbers partial or unreliable, and which."""

from __future__ import annotations

import numpy as np

from trace_gaps.analysis.pipeline import Analysis
from trace_gaps.analysis.stages import NO_LAUNCH_CALL, OTHER_THREAD, STAGE
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, step_at
from trace_gaps.analysis.ledger import BUCKET, Bucket
from trace_gaps.model import (
    DEVICE_ID,
    END_GLOBAL_TID,
    GLOBAL_TID,
    OP_KIND,
    PID,
    START_NS,
    OpKind,
    Trace,
)
from trace_gaps.nsys import queries


def integrity_notes(trace: Trace, analysis: Analysis) -> list[str]:
    """One sentence per problem found: what it is, how much, and what it affects."""
    info = trace.info
    notes: list[str] = []
    if queries.NVTX_TABLE not in info.tables:
        notes.append(
            "No NVTX_EVENTS table: the capture has no NVTX ranges, so there are no steps or "
            "stages; each process is analysed as one step. Capture with --trace=cuda,nvtx and "
            "annotate the decode loop."
        )
    elif analysis.selection.name is None:
        notes.append(f"No step range: {analysis.selection.reason}")
    if queries.RUNTIME_TABLE not in info.tables:
        notes.append(
            "No CUDA API table: ops cannot be joined to their launching calls, so every op is "
            f"charged to {NO_LAUNCH_CALL} and all idle time to host."
        )
    graph_ops = int((trace.gpu_ops[OP_KIND] == OpKind.GRAPH.value).sum())
    if graph_ops:
        notes.append(
            f"Graph-level CUDA graph trace: {graph_ops} graph replays appear as one op each and the "
            "kernels inside them are not visible; busy time is right, per-kernel evidence inside "
            "graphs is missing. Capture with --cuda-graph-trace=node to see them."
        )
    if info.untimed_events:
        notes.append(
            f"{info.untimed_events} rows had start = end = 0 (CUPTI could not time them) and were left out."
        )
    if info.unclosed_ranges:
        notes.append(
            f"{info.unclosed_ranges} NVTX ranges were never closed (NULL end) and were left out; "
            "a step or stage among them is missing from the ledger."
        )
    ranges = trace.nvtx_ranges
    crossed = int(((ranges[END_GLOBAL_TID] >= 0) & (ranges[END_GLOBAL_TID] != ranges[GLOBAL_TID])).sum())
    if crossed:
        notes.append(
            f"{crossed} NVTX ranges were closed on another thread than the one that opened them; "
            "they are placed on the opening thread."
        )
    other_domains = int((ranges["domain_id"] != 0).sum())
    if other_domains:
        notes.append(
            f"{other_domains} NVTX ranges of other domains (e.g. CCCL, NCCL) never become stages; "
            "their time stays in the enclosing stage."
        )
    unstepped = sorted(set(trace.gpu_ops[PID]) - set(analysis.steps[PID]))
    if unstepped and analysis.options.process is None:
        notes.append(
            f"Processes {', '.join(map(str, unstepped))} ran GPU ops but have no "
            f"{analysis.selection.name} steps; they are not in the report."
        )
    notes.extend(_op_notes(analysis))
    notes.extend(_device_notes(trace, analysis))
    notes.extend(_overhead_notes(trace, analysis))
    times = dict(info.capture_settings) | {}
    export_meta_slice = [value for key, value in times.items() if key == "EXPORT_PARAM_TIMES_TO_EXPORT"]
    if export_meta_slice and export_meta_slice[0]:
        notes.append("The export was cut to a time window: ops near its edges may lack their launch calls.")
    return notes


def _op_notes(analysis: Analysis) -> list[str]:
    notes = []
    ops = analysis.projected_ops
    names = analysis.stage_map.names
    missing = int((ops[STAGE] == names.index(NO_LAUNCH_CALL)).sum())
    if missing:
        notes.append(
            f"{missing} of {len(ops)} GPU ops have no launching call in the export (sliced capture, "
            f"or calls not traced); their busy time is charged to {NO_LAUNCH_CALL}."
        )
    other = int((ops[STAGE] == names.index(OTHER_THREAD)).sum())
    if other:
        notes.append(
            f"{other} GPU ops were launched by threads that have no steps; their busy time is "
            f"charged to {OTHER_THREAD}."
        )
    ledger = analysis.ledger
    analysed = analysis.steps[~analysis.steps[IS_WARMUP]]
    busy = ledger[ledger[BUCKET] == Bucket.BUSY.value].groupby(STEP_ID)["duration_ns"].sum()
    empty = int((~analysed[STEP_ID].isin(busy[busy > 0].index)).sum())
    if empty:
        notes.append(f"{empty} analysed steps have no GPU op running in them: they are all idle time.")
    if len(analysed) == 0 and len(analysis.steps):
        notes.append("Every step was skipped as warm-up: pass --skip 0 to analyse them all.")
    return notes


def _device_notes(trace: Trace, analysis: Analysis) -> list[str]:
    devices = trace.gpu_ops.groupby(PID)[DEVICE_ID].nunique()
    multi = devices[devices > 1]
    return [
        f"Process {pid} runs ops on {count} GPUs: its ledger counts the GPU as busy when any of "
        "them runs an op."
        for pid, count in multi.items()
    ]


def _overhead_notes(trace: Trace, analysis: Analysis) -> list[str]:
    overhead = trace.overhead
    if overhead.empty:
        return []
    analysed = analysis.steps[~analysis.steps[IS_WARMUP]]
    inside = step_at(analysed, overhead[GLOBAL_TID].to_numpy(), overhead[START_NS].to_numpy())
    count = int(np.count_nonzero(inside >= 0))
    if not count:
        return []
    duration = int((overhead["end_ns"] - overhead[START_NS]).to_numpy()[inside >= 0].sum())
    return [
        f"{count} profiler-overhead rows ({duration / 1e6:.2f} ms) fall inside analysed steps: that "
        "host time is the profiler's, not the program's, and shows up as host idle time."
    ]
