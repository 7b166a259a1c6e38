"""Integrity notes: what in the export makes some numbers partial or unreliable, and which.

The notes are a table, NOTES, in the order the report lists them: a NoteRule per note
(code, severity, figures, and how its numbers are read: None where the export does not call
for it), and a function for the codes that come once per process or group. integrity_notes
walks it; report/notes.py writes each code's sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trace_gaps.analysis import layout_notes as layout
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.note_facts import Numbers, counted, present
from trace_gaps.model import END_GLOBAL_TID, GLOBAL_TID, ExportInfo, ExportLack, Trace
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, Severity, UnreliableFigures

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


@dataclass(frozen=True, slots=True)
class NoteRule:
    """One note: its code, severity, the figures it bears on, and its numbers as read from
    the export and its analysis (None: the export does not call for the note)."""

    code: NoteCode
    severity: Severity
    figures: tuple[Figures, ...]
    numbers: Callable[[Trace, Analysis], Numbers | None]

    def __call__(self, trace: Trace, analysis: Analysis) -> list[NoteFacts]:
        """The note, where the export calls for it."""
        numbers = self.numbers(trace, analysis)
        return (
            [] if numbers is None else [NoteFacts(self.code, self.severity, self.figures, numbers)]
        )


def integrity_notes(trace: Trace, analysis: Analysis) -> list[NoteFacts]:
    """One note per problem found: its code, severity, the figures it affects, and the
    numbers that say how much (notes.py puts them in words), in NOTES' order."""
    return [note for find in NOTES for note in find(trace, analysis)]


def _lacks(lack: ExportLack) -> Callable[[Trace, Analysis], Numbers | None]:
    """A note that has no numbers, where the export lacks a table or column."""
    return lambda trace, _: present(lack in trace.info.lacks)


def _no_step_range(trace: Trace, analysis: Analysis) -> Numbers | None:
    # Said only where NVTX is there: NO_NVTX says why there is no step range otherwise.
    return present(ExportLack.NVTX not in trace.info.lacks and analysis.selection.name is None)


def _lost_events(trace: Trace, _: Analysis) -> Numbers | None:
    messages = trace.info.lost_event_messages
    return {"messages": messages} if messages else None


def _ranges_closed_elsewhere(trace: Trace, _: Analysis) -> Numbers | None:
    ranges = trace.nvtx_ranges
    ends_elsewhere = (ranges[END_GLOBAL_TID] >= 0) & (ranges[END_GLOBAL_TID] != ranges[GLOBAL_TID])
    crossed = int(ends_elsewhere.sum())
    return {"ranges": crossed} if crossed else None


# Export settings that mean the file holds only a time window of the capture:
# `nsys export --times` (EXPORT_PARAM_TIMES_TO_EXPORT), or a window cut out afterwards by a
# tool that says so (nsys-ai's derive_test_fixture.py writes DERIVED_WINDOW_NS).
_WINDOW_SETTINGS = ("EXPORT_PARAM_TIMES_TO_EXPORT", "DERIVED_WINDOW_NS")


def _time_window(trace: Trace, _: Analysis) -> Numbers | None:
    settings = dict(trace.info.export_settings)
    windows = [key for key in _WINDOW_SETTINGS if settings.get(key)]
    if not windows:
        return None
    return {"settings": tuple(windows), "values": tuple(settings[key] for key in windows)}


def _older_schema(trace: Trace, _: Analysis) -> Numbers | None:
    info = trace.info
    if ExportLack.CURRENT_METADATA not in info.lacks:
        return None
    return {"nsys_version": info.nsys_version or "", "schema_version": info.schema_version or ""}


def _damaged(
    code: NoteCode,
    severity: Severity,
    figures: tuple[Figures, ...],
    numbers: Callable[[ExportInfo], Numbers | None],
) -> NoteRule:
    """A note on rows the reader left out or could not name (ExportInfo's counts)."""
    return NoteRule(code, severity, figures, lambda trace, _: numbers(trace.info))


_PARTIAL, _INFO, _UNRELIABLE = Severity.PARTIAL, Severity.INFO, Severity.UNRELIABLE
_GPU_TIME, _LAUNCHES, _STEPS = (Figures.GPU_TIME,), (Figures.LAUNCHES,), (Figures.STEPS,)

# Every note, in the order the report lists them.
NOTES: tuple[Callable[[Trace, Analysis], list[NoteFacts]], ...] = (
    NoteRule(NoteCode.NO_NVTX, _PARTIAL, _STEPS, _lacks(ExportLack.NVTX)),
    NoteRule(NoteCode.NO_STEP_RANGE, _INFO, _STEPS, _no_step_range),
    NoteRule(NoteCode.NO_CUDA_API, _UNRELIABLE, _LAUNCHES, _lacks(ExportLack.CUDA_API)),
    NoteRule(NoteCode.GRAPH_LEVEL_TRACE, _PARTIAL, (Figures.KERNELS,), layout.graph_replays),
    NoteRule(NoteCode.OVERLAPPING_STEP_RANGES, _INFO, _STEPS, layout.overlapping_steps),
    NoteRule(
        NoteCode.LOST_LAUNCH_RECORDS,
        _PARTIAL,
        (Figures.GPU_TIME, Figures.KERNELS),
        layout.lost_launches,
    ),
    NoteRule(
        NoteCode.NSYS_LOST_EVENTS, _PARTIAL, (Figures.GPU_TIME, Figures.LAUNCHES), _lost_events
    ),
    # Rows the reader left out or could not name.
    _damaged(
        NoteCode.UNTIMED_ROWS, _PARTIAL, _GPU_TIME, lambda i: counted({"rows": i.untimed_events})
    ),
    _damaged(
        NoteCode.DUPLICATE_ROWS,
        _INFO,
        (),
        lambda i: counted({"ops": i.duplicated_ops, "calls": i.duplicated_calls}),
    ),
    _damaged(
        NoteCode.IMPOSSIBLE_OP_TIMES,
        _PARTIAL,
        _GPU_TIME,
        lambda i: counted({"ops": i.impossible_ops}, op_rows=i.op_rows),
    ),
    _damaged(
        NoteCode.IMPOSSIBLE_CALL_TIMES,
        _PARTIAL,
        _LAUNCHES,
        lambda i: counted({"calls": i.impossible_calls}, call_rows=i.call_rows),
    ),
    _damaged(
        NoteCode.UNRESOLVED_CALL_NAMES,
        _PARTIAL,
        _LAUNCHES,
        lambda i: counted({"calls": i.unresolved_calls}, call_rows=i.call_rows),
    ),
    _damaged(
        NoteCode.UNRESOLVED_KERNEL_NAMES,
        _PARTIAL,
        (Figures.KERNELS, Figures.WAITS),
        lambda i: counted({"kernels": i.unresolved_kernels}, op_rows=i.op_rows),
    ),
    _damaged(
        NoteCode.IMPOSSIBLE_RANGE_TIMES,
        _PARTIAL,
        _STEPS,
        lambda i: counted({"ranges": i.impossible_ranges}),
    ),
    _damaged(
        NoteCode.UNCLOSED_RANGES, _PARTIAL, _STEPS, lambda i: counted({"ranges": i.unclosed_ranges})
    ),
    NoteRule(NoteCode.RANGES_CLOSED_ELSEWHERE, _INFO, (), _ranges_closed_elsewhere),
    layout.domain_notes,
    NoteRule(NoteCode.PROCESSES_WITHOUT_STEPS, _INFO, (), layout.processes_without_steps),
    layout.borrowed_thread_notes,
    NoteRule(NoteCode.STEP_KINDS, _INFO, _STEPS, layout.step_kinds),
    NoteRule(
        NoteCode.UNMATCHED_COLLECTIVES, _PARTIAL, (Figures.WAITS,), layout.unmatched_collectives
    ),
    NoteRule(NoteCode.OPS_WITHOUT_LAUNCH_CALL, _PARTIAL, _LAUNCHES, layout.ops_without_launch_call),
    NoteRule(NoteCode.OPS_FROM_OTHER_THREADS, _INFO, (), layout.ops_from_other_threads),
    NoteRule(NoteCode.STEPS_WITHOUT_GPU_WORK, _INFO, (), layout.steps_without_gpu_work),
    layout.warmup_notes,
    NoteRule(NoteCode.SEVERAL_PROCESSES, _INFO, (), layout.several_processes),
    layout.process_gpus_notes,
    NoteRule(
        NoteCode.PROFILER_OVERHEAD_IN_STEPS,
        _PARTIAL,
        (Figures.HOST_IDLE,),
        layout.profiler_overhead,
    ),
    NoteRule(
        NoteCode.TIME_WINDOW_EXPORT, _PARTIAL, (Figures.STEPS, Figures.LAUNCHES), _time_window
    ),
    NoteRule(NoteCode.OLDER_SCHEMA, _INFO, (), _older_schema),
    NoteRule(NoteCode.NVTX_WITHOUT_TEXT_ID, _INFO, (), _lacks(ExportLack.NVTX_TEXT_ID)),
    NoteRule(
        NoteCode.KERNELS_WITHOUT_GRAPH_NODE_ID,
        _PARTIAL,
        _LAUNCHES,
        _lacks(ExportLack.KERNEL_GRAPH_NODE_ID),
    ),
)
