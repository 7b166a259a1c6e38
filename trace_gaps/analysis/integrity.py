"""Integrity notes: what in the export makes some numbers partial or unreliable, and which."""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from trace_gaps.analysis.engine.metrics import LEDGER, OP_CENSUS, STAGE_STATS
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.ledger import BUCKET
from trace_gaps.analysis.ranges import (
    RAW_NAME,
    UNNAMED_DOMAIN,
    is_library_domain,
    user_domains,
)
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import (
    IS_WARMUP,
    LOADS,
    STEP_ID,
    WARMUP_LENGTH_FACTOR,
    WARMUP_RULE,
    step_at,
)
from trace_gaps.figures import Total
from trace_gaps.model import (
    DEVICE_ID,
    DOMAIN,
    DOMAIN_ID,
    END_GLOBAL_TID,
    GLOBAL_TID,
    NAME,
    NO_LAUNCH_CALL,
    OP_KIND,
    OTHER_THREAD,
    PID,
    START_NS,
    Bucket,
    ExportInfo,
    ExportLack,
    OpKind,
    Trace,
)
from trace_gaps.records import (
    Figures,
    NoteCode,
    NoteFacts,
    NoteNumber,
    Severity,
    UnreliableFigures,
)

# Above this share of a table's rows left out or unnamed, the figures they feed are flagged.
UNRELIABLE_SHARE = 0.01


def unreliable_figures(info: ExportInfo) -> list[UnreliableFigures]:
    """The figures to flag, with the damaged rows behind each flag."""
    counts = [
        (Figures.GPU_TIME, "gpu_ops", "impossible_times", info.impossible_ops, info.op_rows),
        (Figures.LAUNCHES, "api_calls", "impossible_times", info.impossible_calls, info.call_rows),
        (Figures.LAUNCHES, "api_calls", "unresolved_names", info.unresolved_calls, info.call_rows),
    ]
    return [
        UnreliableFigures(figures, table, problem, rows, of_rows)
        for figures, table, problem, rows, of_rows in counts
        if of_rows and rows > UNRELIABLE_SHARE * of_rows
    ]


def note_of(
    code: NoteCode, severity: Severity, figures: list[Figures], **numbers: NoteNumber
) -> NoteFacts:
    """The facts of a note: its code, severity, the figures it bears on, and its numbers."""
    return NoteFacts(code, severity, tuple(figures), numbers)


def _lost_records(messages: tuple[str, ...], analysis: Analysis) -> list[NoteFacts]:
    """Launch calls whose ops are missing, and nsys's own words about lost events."""
    notes: list[NoteFacts] = []
    stats = analysis.metrics[STAGE_STATS]
    missing = int(stats[Total.LAUNCHES_WITHOUT_OP].sum())
    if missing:
        launch_columns = ["kernel_launches", "graph_launches", "memcpy_launches", "memset_launches"]
        launches = int(stats[launch_columns].to_numpy().sum())
        by_stage = (
            stats.groupby(STAGE)[Total.LAUNCHES_WITHOUT_OP].sum().sort_values(ascending=False)
        )
        names = analysis.stage_map.names
        notes.append(
            note_of(
                NoteCode.LOST_LAUNCH_RECORDS,
                Severity.PARTIAL,
                [Figures.GPU_TIME, Figures.KERNELS],
                missing=missing,
                launches=launches,
                stages=tuple(str(names[code]) for code in by_stage[by_stage > 0].index[:3]),
            )
        )
    if messages:
        notes.append(
            note_of(
                NoteCode.NSYS_LOST_EVENTS,
                Severity.PARTIAL,
                [Figures.GPU_TIME, Figures.LAUNCHES],
                messages=messages,
            )
        )
    return notes


def integrity_notes(trace: Trace, analysis: Analysis) -> list[NoteFacts]:
    """One note per problem found: its code, severity, the figures it affects, and the
    numbers that say how much (notes.py puts them in words)."""
    info = trace.info
    notes: list[NoteFacts] = []
    if ExportLack.NVTX in info.lacks:
        notes.append(note_of(NoteCode.NO_NVTX, Severity.PARTIAL, [Figures.STEPS]))
    elif analysis.selection.name is None:
        notes.append(note_of(NoteCode.NO_STEP_RANGE, Severity.INFO, [Figures.STEPS]))
    if ExportLack.CUDA_API in info.lacks:
        notes.append(note_of(NoteCode.NO_CUDA_API, Severity.UNRELIABLE, [Figures.LAUNCHES]))
    device_ops = analysis.device_ops
    graph_ops = int(device_ops.loc[device_ops[OP_KIND] == OpKind.GRAPH.value, "ops"].sum())
    if graph_ops:
        notes.append(
            note_of(
                NoteCode.GRAPH_LEVEL_TRACE,
                Severity.PARTIAL,
                [Figures.KERNELS],
                graph_replays=graph_ops,
            )
        )
    step_name = analysis.selection.name
    if step_name is not None:
        members = analysis.selection.members
        instances = int(analysis.range_tree[RAW_NAME].isin(members).sum())
        if analysis.selection.cycle:
            instances = len(analysis.steps)
        overlapping = instances - len(analysis.steps)
        if overlapping > 0:
            notes.append(
                note_of(
                    NoteCode.OVERLAPPING_STEP_RANGES,
                    Severity.INFO,
                    [Figures.STEPS],
                    overlapping=overlapping,
                    instances=instances,
                    step=step_name,
                )
            )
    notes += _lost_records(info.lost_event_messages, analysis)
    notes += _damaged_row_notes(info)
    ranges = trace.nvtx_ranges
    ends_elsewhere = (ranges[END_GLOBAL_TID] >= 0) & (ranges[END_GLOBAL_TID] != ranges[GLOBAL_TID])
    crossed = int(ends_elsewhere.sum())
    if crossed:
        notes.append(note_of(NoteCode.RANGES_CLOSED_ELSEWHERE, Severity.INFO, [], ranges=crossed))
    notes.extend(_domain_notes(ranges, analysis))
    unstepped = sorted(set(device_ops[PID]) - set(analysis.steps[PID]))
    if unstepped and analysis.options.process is None:
        notes.append(
            note_of(
                NoteCode.PROCESSES_WITHOUT_STEPS,
                Severity.INFO,
                [],
                pids=tuple(int(pid) for pid in unstepped),
                step=str(analysis.selection.name),
            )
        )
    notes.extend(_thread_and_kind_notes(trace, analysis))
    notes.extend(_collective_notes(analysis))
    notes.extend(_op_notes(analysis))
    notes.extend(_device_notes(analysis))
    notes.extend(_overhead_notes(trace, analysis))
    notes.extend(_window_notes(trace))
    notes.extend(_schema_notes(trace))
    return notes


def _damaged_row_notes(info: ExportInfo) -> list[NoteFacts]:
    """Rows the reader left out or could not name, in the order the report lists them."""
    notes = []
    if info.untimed_events:
        notes.append(
            note_of(
                NoteCode.UNTIMED_ROWS,
                Severity.PARTIAL,
                [Figures.GPU_TIME],
                rows=info.untimed_events,
            )
        )
    if info.duplicated_ops or info.duplicated_calls:
        notes.append(
            note_of(
                NoteCode.DUPLICATE_ROWS,
                Severity.INFO,
                [],
                ops=info.duplicated_ops,
                calls=info.duplicated_calls,
            )
        )
    if info.impossible_ops:
        notes.append(
            note_of(
                NoteCode.IMPOSSIBLE_OP_TIMES,
                Severity.PARTIAL,
                [Figures.GPU_TIME],
                ops=info.impossible_ops,
                op_rows=info.op_rows,
            )
        )
    if info.impossible_calls:
        notes.append(
            note_of(
                NoteCode.IMPOSSIBLE_CALL_TIMES,
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                calls=info.impossible_calls,
                call_rows=info.call_rows,
            )
        )
    if info.unresolved_calls:
        notes.append(
            note_of(
                NoteCode.UNRESOLVED_CALL_NAMES,
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                calls=info.unresolved_calls,
                call_rows=info.call_rows,
            )
        )
    if info.unresolved_kernels:
        notes.append(
            note_of(
                NoteCode.UNRESOLVED_KERNEL_NAMES,
                Severity.PARTIAL,
                [Figures.KERNELS, Figures.WAITS],
                kernels=info.unresolved_kernels,
                op_rows=info.op_rows,
            )
        )
    if info.impossible_ranges:
        notes.append(
            note_of(
                NoteCode.IMPOSSIBLE_RANGE_TIMES,
                Severity.PARTIAL,
                [Figures.STEPS],
                ranges=info.impossible_ranges,
            )
        )
    if info.unclosed_ranges:
        notes.append(
            note_of(
                NoteCode.UNCLOSED_RANGES,
                Severity.PARTIAL,
                [Figures.STEPS],
                ranges=info.unclosed_ranges,
            )
        )
    return notes


# Export settings that mean the file holds only a time window of the capture:
# `nsys export --times` (EXPORT_PARAM_TIMES_TO_EXPORT), or a window cut out afterwards by a
# tool that says so (nsys-ai's derive_test_fixture.py writes DERIVED_WINDOW_NS).
_WINDOW_SETTINGS = ("EXPORT_PARAM_TIMES_TO_EXPORT", "DERIVED_WINDOW_NS")


def _window_notes(trace: Trace) -> list[NoteFacts]:
    settings = dict(trace.info.export_settings)
    windows = [key for key in _WINDOW_SETTINGS if settings.get(key)]
    if not windows:
        return []
    return [
        note_of(
            NoteCode.TIME_WINDOW_EXPORT,
            Severity.PARTIAL,
            [Figures.STEPS, Figures.LAUNCHES],
            settings=tuple(windows),
            values=tuple(settings[key] for key in windows),
        )
    ]


def _schema_notes(trace: Trace) -> list[NoteFacts]:
    info = trace.info
    notes = []
    if ExportLack.CURRENT_METADATA in info.lacks:
        notes.append(
            note_of(
                NoteCode.OLDER_SCHEMA,
                Severity.INFO,
                [],
                nsys_version=info.nsys_version or "",
                schema_version=info.schema_version or "",
            )
        )
    if ExportLack.NVTX_TEXT_ID in info.lacks:
        notes.append(note_of(NoteCode.NVTX_WITHOUT_TEXT_ID, Severity.INFO, []))
    if ExportLack.KERNEL_GRAPH_NODE_ID in info.lacks:
        notes.append(
            note_of(NoteCode.KERNELS_WITHOUT_GRAPH_NODE_ID, Severity.PARTIAL, [Figures.LAUNCHES])
        )
    return notes


def _op_notes(analysis: Analysis) -> list[NoteFacts]:
    notes = []
    census = analysis.metrics[OP_CENSUS]
    names = analysis.stage_map.names
    missing = int(census.loc[census[STAGE] == names.index(NO_LAUNCH_CALL), "ops"].sum())
    if missing:
        notes.append(
            note_of(
                NoteCode.OPS_WITHOUT_LAUNCH_CALL,
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                missing=missing,
                ops=int(census["ops"].sum()),
            )
        )
    other = int(census.loc[census[STAGE] == names.index(OTHER_THREAD), "ops"].sum())
    if other:
        notes.append(note_of(NoteCode.OPS_FROM_OTHER_THREADS, Severity.INFO, [], ops=other))
    ledger = analysis.metrics[LEDGER]
    analysed = analysis.steps[~analysis.steps[IS_WARMUP]]
    busy = ledger[ledger[BUCKET] == Bucket.BUSY.value].groupby(STEP_ID)["duration_ns"].sum()
    empty = int((~analysed[STEP_ID].isin(busy[busy > 0].index)).sum())
    if empty:
        notes.append(note_of(NoteCode.STEPS_WITHOUT_GPU_WORK, Severity.INFO, [], steps=empty))
    notes.extend(_warmup_notes(analysis.steps))
    return notes


def _warmup_notes(steps: pd.DataFrame) -> list[NoteFacts]:
    """Say why steps that load code were analysed, per process, when the warm-up rule chose so."""
    notes = []
    for pid, process in steps.groupby(PID, sort=True):
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


def _thread_and_kind_notes(trace: Trace, analysis: Analysis) -> list[NoteFacts]:
    """Which thread held the ranges where another launched; how steps were split by kind."""
    notes = []
    by_step_thread: dict[int, list[int]] = {}
    for lender, step_tid in analysis.borrowed_threads.items():
        by_step_thread.setdefault(step_tid, []).append(lender)
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
    if analysis.kind is not None:
        notes.append(
            note_of(
                NoteCode.STEP_KINDS,
                Severity.INFO,
                [Figures.STEPS],
                kinds=tuple(a.kind or "" for a in analysis.by_kind()),
            )
        )
    return notes


def _domain_notes(ranges: pd.DataFrame, analysis: Analysis) -> list[NoteFacts]:
    """The named NVTX domains seen: which count for steps and stages, which never do."""
    named = ranges[ranges[DOMAIN_ID] != 0]
    if named.empty:
        return []
    counts = named[DOMAIN].value_counts()
    kept = user_domains(named, analysis.options.domain)
    used = named[DOMAIN][kept].value_counts()
    left = counts.drop(used.index)

    def listed(series: pd.Series) -> dict[str, NoteNumber]:
        series = series.sort_index()
        return {
            "domains": tuple(str(name) for name in series.index),
            "ranges": tuple(int(n) for n in series),
        }

    notes = []
    if len(used):
        notes.append(
            note_of(NoteCode.NAMED_DOMAINS_USED, Severity.INFO, [Figures.STEPS], **listed(used))
        )
    library = left[[is_library_domain(str(n)) for n in left.index]]
    unnamed = left[[str(n).startswith(UNNAMED_DOMAIN) for n in left.index]]
    others = left.drop([*library.index, *unnamed.index])
    groups = (("library", library), ("unnamed", unnamed), ("other", others))
    notes += [
        note_of(NoteCode.DOMAINS_LEFT_OUT, Severity.INFO, [], group=group, **listed(domains))
        for group, domains in groups
        if len(domains)
    ]
    return notes


def _thread_name(trace: Trace, global_tid: int) -> str:
    """The thread's name, "" where the export names none."""
    names = trace.threads.set_index(GLOBAL_TID)[NAME] if len(trace.threads) else None
    name = names.get(global_tid) if names is not None else None
    return name if isinstance(name, str) else ""


def _collective_notes(analysis: Analysis) -> list[NoteFacts]:
    match = analysis.collectives
    if not match.unmatched:
        return []
    return [
        note_of(
            NoteCode.UNMATCHED_COLLECTIVES,
            Severity.PARTIAL,
            [Figures.WAITS],
            unmatched=int(match.unmatched),
            instances=int(match.instances),
        )
    ]


def _device_notes(analysis: Analysis) -> list[NoteFacts]:
    devices = analysis.device_ops.groupby(PID)[DEVICE_ID].unique()
    notes = []
    if len(devices) > 1:
        placed = [
            (int(cast(int, pid)), int(gpu)) for pid, ids in devices.items() for gpu in sorted(ids)
        ]
        notes.append(
            note_of(
                NoteCode.SEVERAL_PROCESSES,
                Severity.INFO,
                [],
                pids=tuple(pid for pid, _ in placed),
                gpus=tuple(gpu for _, gpu in placed),
                collectives=bool(analysis.collectives.any),
            )
        )
    notes.extend(
        note_of(
            NoteCode.PROCESS_ON_SEVERAL_GPUS,
            Severity.INFO,
            [Figures.GPU_TIME],
            pid=int(cast(int, pid)),
            gpus=len(ids),
        )
        for pid, ids in devices.items()
        if len(ids) > 1
    )
    return notes


def _overhead_notes(trace: Trace, analysis: Analysis) -> list[NoteFacts]:
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
        note_of(
            NoteCode.PROFILER_OVERHEAD_IN_STEPS,
            Severity.PARTIAL,
            [Figures.HOST_IDLE],
            rows=count,
            duration_ns=duration,
        )
    ]
