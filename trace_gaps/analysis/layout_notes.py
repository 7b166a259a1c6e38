"""The numbers of the integrity notes on how the run was read: its steps and their warm-up,
the threads, kinds and NVTX domains, the processes and their GPUs, the ops and collectives.

Each function gives a note's numbers (None: no note), or the notes of a code that comes
once per process or group; analysis/integrity.py lists them in the report's order.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.metrics import LEDGER, OP_CENSUS, STAGE_STATS
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.ledger import BUCKET
from trace_gaps.analysis.note_facts import Numbers, note_of
from trace_gaps.analysis.ranges import RAW_NAME, UNNAMED_DOMAIN, is_library_domain, user_domains
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import (
    IS_WARMUP,
    LOADS,
    STEP_ID,
    WARMUP_LENGTH_FACTOR,
    WARMUP_RULE,
    step_at,
)
from trace_gaps.figures.stage import Total
from trace_gaps.model import (
    DEVICE_ID,
    DOMAIN,
    DOMAIN_ID,
    GLOBAL_TID,
    NAME,
    OP_KIND,
    PID,
    START_NS,
    OpKind,
    Trace,
)
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, NoteNumber, Severity
from trace_gaps.vocabulary import NO_LAUNCH_CALL, OTHER_THREAD, Bucket


def graph_replays(_: Trace, analysis: Analysis) -> Numbers | None:
    """Graph replays traced as one op each (--cuda-graph-trace=graph)."""
    device_ops = analysis.device_ops
    replays = int(device_ops.loc[device_ops[OP_KIND] == OpKind.GRAPH.value, "ops"].sum())
    return {"graph_replays": replays} if replays else None


def overlapping_steps(_: Trace, analysis: Analysis) -> Numbers | None:
    """Step ranges left out for overlapping an earlier one on their thread."""
    step_name = analysis.selection.name
    if step_name is None:
        return None
    members = analysis.selection.members
    instances = int(analysis.range_tree[RAW_NAME].isin(members).sum())
    # Every kind's steps, whatever --steps and the kind analysed kept of them.
    kept = analysis.steps_cut if analysis.steps_cut >= 0 else len(analysis.steps)
    if analysis.selection.cycle:
        instances = kept
    overlapping = instances - kept
    if overlapping <= 0:
        return None
    return {"overlapping": overlapping, "instances": instances, "step": step_name}


def lost_launches(_: Trace, analysis: Analysis) -> Numbers | None:
    """Launch calls in analysed steps whose ops are missing, and the stages most hit."""
    stats = analysis.metrics[STAGE_STATS]
    missing = int(stats[Total.LAUNCHES_WITHOUT_OP].sum())
    if not missing:
        return None
    launch_columns = ["kernel_launches", "graph_launches", "memcpy_launches", "memset_launches"]
    by_stage = stats.groupby(STAGE)[Total.LAUNCHES_WITHOUT_OP].sum().sort_values(ascending=False)
    names = analysis.stage_map.names
    return {
        "missing": missing,
        "launches": int(stats[launch_columns].to_numpy().sum()),
        "stages": tuple(str(names[code]) for code in by_stage[by_stage > 0].index[:3]),
    }


def processes_without_steps(_: Trace, analysis: Analysis) -> Numbers | None:
    """Processes with GPU ops and no step (unless --process chose one)."""
    unstepped = sorted(set(analysis.device_ops[PID]) - set(analysis.steps[PID]))
    if not unstepped or analysis.options.process is not None:
        return None
    return {
        "pids": tuple(int(pid) for pid in unstepped),
        "step": str(analysis.selection.name),
    }


def step_kinds(_: Trace, analysis: Analysis) -> Numbers | None:
    """The kinds the steps were split into."""
    if analysis.kind is None:
        return None
    return {"kinds": tuple(a.kind or "" for a in analysis.by_kind())}


def unmatched_collectives(_: Trace, analysis: Analysis) -> Numbers | None:
    """Collective instances not matched across processes."""
    match = analysis.collectives
    if not match.unmatched:
        return None
    return {"unmatched": int(match.unmatched), "instances": int(match.instances)}


def _census_ops(analysis: Analysis, stage_name: str) -> int:
    census = analysis.metrics[OP_CENSUS]
    return int(census.loc[census[STAGE] == analysis.stage_map.names.index(stage_name), "ops"].sum())


def ops_without_launch_call(_: Trace, analysis: Analysis) -> Numbers | None:
    """GPU ops with no launching call in the export."""
    missing = _census_ops(analysis, NO_LAUNCH_CALL)
    if not missing:
        return None
    return {"missing": missing, "ops": int(analysis.metrics[OP_CENSUS]["ops"].sum())}


def ops_from_other_threads(_: Trace, analysis: Analysis) -> Numbers | None:
    """GPU ops launched by threads with no steps."""
    other = _census_ops(analysis, OTHER_THREAD)
    return {"ops": other} if other else None


def steps_without_gpu_work(_: Trace, analysis: Analysis) -> Numbers | None:
    """Analysed steps with no GPU op running in them."""
    ledger = analysis.metrics[LEDGER]
    analysed = analysis.steps[~analysis.steps[IS_WARMUP]]
    busy = ledger[ledger[BUCKET] == Bucket.BUSY.value].groupby(STEP_ID)["duration_ns"].sum()
    empty = int((~analysed[STEP_ID].isin(busy[busy > 0].index)).sum())
    return {"steps": empty} if empty else None


def several_processes(_: Trace, analysis: Analysis) -> Numbers | None:
    """Where several processes ran GPU work: each with its GPUs."""
    devices = analysis.device_ops.groupby(PID)[DEVICE_ID].unique()
    if len(devices) <= 1:
        return None
    placed = [
        (int(cast(int, pid)), int(gpu)) for pid, ids in devices.items() for gpu in sorted(ids)
    ]
    return {
        "pids": tuple(pid for pid, _ in placed),
        "gpus": tuple(gpu for _, gpu in placed),
        "collectives": bool(analysis.collectives.any),
    }


def profiler_overhead(trace: Trace, analysis: Analysis) -> Numbers | None:
    """Profiler-overhead rows inside analysed steps, and their time."""
    overhead = trace.overhead
    if overhead.empty:
        return None
    analysed = analysis.steps[~analysis.steps[IS_WARMUP]]
    inside = step_at(analysed, overhead[GLOBAL_TID].to_numpy(), overhead[START_NS].to_numpy())
    count = int(np.count_nonzero(inside >= 0))
    if not count:
        return None
    duration = int((overhead["end_ns"] - overhead[START_NS]).to_numpy()[inside >= 0].sum())
    return {"rows": count, "duration_ns": duration}


def process_gpus_notes(_: Trace, analysis: Analysis) -> list[NoteFacts]:
    """A note per process that runs ops on several GPUs."""
    devices = analysis.device_ops.groupby(PID)[DEVICE_ID].unique()
    return [
        note_of(
            NoteCode.PROCESS_ON_SEVERAL_GPUS,
            Severity.INFO,
            [Figures.GPU_TIME],
            pid=int(cast(int, pid)),
            gpus=len(ids),
        )
        for pid, ids in devices.items()
        if len(ids) > 1
    ]


def warmup_notes(_: Trace, analysis: Analysis) -> list[NoteFacts]:
    """Say why steps that load code were analysed, per process, when the warm-up rule chose so."""
    notes = []
    for pid, process in analysis.steps.groupby(PID, sort=True):
        rules = set(process[WARMUP_RULE])
        read = process[process[LOADS] >= 0]
        if "steady_loads" in rules:
            notes.append(
                note_of(
                    NoteCode.WARMUP_STEADY_LOADS,
                    Severity.INFO,
                    [Figures.STEPS],
                    pid=int(cast(int, pid)),
                    loading=int((read[LOADS] > 0).sum()),
                    read=len(read),
                    loads=int(read[LOADS].sum()),
                    length_factor=WARMUP_LENGTH_FACTOR,
                )
            )
        if "length_only" in rules:
            notes.append(
                note_of(
                    NoteCode.WARMUP_LENGTH_ONLY,
                    Severity.INFO,
                    [Figures.STEPS],
                    pid=int(cast(int, pid)),
                    steps=len(process),
                    skipped=int(process[IS_WARMUP].sum()),
                    length_factor=WARMUP_LENGTH_FACTOR,
                )
            )
    return notes


def borrowed_thread_notes(trace: Trace, analysis: Analysis) -> list[NoteFacts]:
    """Per step thread that launches nothing: the threads that launch for it."""
    by_step_thread: dict[int, list[int]] = {}
    for lender, step_tid in analysis.borrowed_threads.items():
        by_step_thread.setdefault(step_tid, []).append(lender)
    notes = []
    for step_tid, lenders in sorted(by_step_thread.items()):
        launching = sorted(lenders)
        notes.append(
            note_of(
                NoteCode.LAUNCHING_THREAD_BORROWED,
                Severity.INFO,
                [],
                step_tid=step_tid & 0xFFFFFF,
                step_thread=_thread_name(trace, step_tid),
                launching_tids=tuple(tid & 0xFFFFFF for tid in launching),
                launching_threads=tuple(_thread_name(trace, tid) for tid in launching),
            )
        )
    return notes


def _thread_name(trace: Trace, global_tid: int) -> str:
    """The thread's name, "" where the export names none."""
    names = trace.threads.set_index(GLOBAL_TID)[NAME] if len(trace.threads) else None
    name = names.get(global_tid) if names is not None else None
    return name if isinstance(name, str) else ""


def domain_notes(trace: Trace, analysis: Analysis) -> list[NoteFacts]:
    """The named NVTX domains seen: which count for steps and stages, which never do."""
    ranges = trace.nvtx_ranges
    named = ranges[ranges[DOMAIN_ID] != 0]
    if named.empty:
        return []
    counts = named[DOMAIN].value_counts()
    kept = user_domains(named, analysis.options.domain)
    used = named[DOMAIN][kept].value_counts()
    left = counts.drop(used.index)
    notes = []
    if len(used):
        notes.append(
            note_of(NoteCode.NAMED_DOMAINS_USED, Severity.INFO, [Figures.STEPS], **_listed(used))
        )
    library = left[[is_library_domain(str(n)) for n in left.index]]
    unnamed = left[[str(n).startswith(UNNAMED_DOMAIN) for n in left.index]]
    others = left.drop([*library.index, *unnamed.index])
    groups = (("library", library), ("unnamed", unnamed), ("other", others))
    notes += [
        note_of(NoteCode.DOMAINS_LEFT_OUT, Severity.INFO, [], group=group, **_listed(domains))
        for group, domains in groups
        if len(domains)
    ]
    return notes


def _listed(series: pd.Series) -> dict[str, NoteNumber]:
    """The domains, by name, and their range counts."""
    series = series.sort_index()
    return {
        "domains": tuple(str(name) for name in series.index),
        "ranges": tuple(int(n) for n in series),
    }
