"""Integrity notes in words: one sentence per note code, written from the note's numbers, and
the `Unreliable:` lines of the figures damaged rows make unreliable.

The analysis finds the facts (records.NoteFacts: code, severity, figures, numbers); report
building calls write_note, so text, Markdown, HTML and the JSON carry these same sentences.
This is the one place that names the export's tables to the reader; the words of the notes
on several exports are in export_notes.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trace_gaps.analysis.kinds import kind_label
from trace_gaps.nsys.queries import KERNEL_TABLE, NVTX_TABLE
from trace_gaps.records.notes import Figures, Note, NoteCode, NoteFacts, UnreliableFigures
from trace_gaps.records.report import StepChoice, StepFound
from trace_gaps.report.export_notes import collectives_unsplit, exports_aligned, exports_apart
from trace_gaps.report.note_numbers import Numbers, int_of, items_of
from trace_gaps.report.step_reasons import describe_step_choice
from trace_gaps.units import format_duration
from trace_gaps.vocabulary import NO_LAUNCH_CALL, OTHER_THREAD


def write_note(facts: NoteFacts) -> Note:
    """The Note of these facts, with its sentence."""
    return Note(
        facts.code.value,
        facts.severity.value,
        [figure.value for figure in facts.figures],
        WORDS[facts.code](facts.numbers),
    )


def about_export(note: Note, file: str) -> Note:
    """The note of one of several exports, its sentence naming the export."""
    return replace(note, text=f"{file}: {note.text}")


def _share(numbers: Numbers, rows: str, of_rows: str) -> str:
    """ " (12.5 % of 800 rows)", or "" where the table's rows are not known."""
    of = int_of(numbers, of_rows)
    if not of:
        return ""
    return f" ({100 * int_of(numbers, rows) / of:.3g} % of {of} rows)"


def _listed(numbers: Numbers) -> str:
    """ "cuda (12), nccl (3)": the domains with their range counts."""
    return ", ".join(
        f"{name} ({count})"
        for name, count in zip(
            items_of(numbers, "domains"), items_of(numbers, "ranges"), strict=True
        )
    )


def _thread(tid: object, name: object) -> str:
    return f"{tid} ({name})" if name else str(tid)


def _lost_launch_records(n: Numbers) -> str:
    stages = ", ".join(repr(stage) for stage in items_of(n, "stages"))
    return (
        f"{n['missing']} of {n['launches']} launch calls in analysed steps have no GPU op in the "
        "export: their records were lost (the program died before nsys flushed them, its "
        "buffers overflowed, or the export is a time window). GPU busy time, ops per step "
        f"and per-kernel evidence of {stages} miss that work; launch counts include it."
    )


def _nsys_lost_events(n: Numbers) -> str:
    quoted = "; ".join(f"'{' '.join(str(m).split())}'" for m in items_of(n, "messages")[:3])
    return f"nsys reported lost events during the capture: {quoted}."


def _overlapping_step_ranges(n: Numbers) -> str:
    return (
        f"{n['overlapping']} of {n['instances']} {n['step']!r} ranges overlap an earlier one on "
        "their thread, or nest inside one, and were left out: steps must not overlap, "
        "so only the earlier (outer) range of each overlapping pair is a step."
    )


def _duplicate_rows(n: Numbers) -> str:
    return (
        f"{n['ops']} GPU op rows and {n['calls']} CUDA API rows are duplicates, copies of "
        "another row (same process, correlation id, start and end; for a GPU op also one "
        "shifted in time or moved to another stream: the same correlation id, graph node and "
        "duration as an op still running at its start) and were left out: the export holds "
        "them twice (a damaged or merged export); busy time, launch counts and per-kernel "
        "evidence would otherwise count them twice."
    )


def _impossible_op_times(n: Numbers) -> str:
    return (
        f"{n['ops']} GPU ops had impossible times (a start before 0, an end before the start, "
        "longer than the whole capture, or a span that holds the next op of its stream whole, "
        "when a stream runs one op at a time; where the export states when the capture "
        "stopped, also a start at 0 or an end after the stop) and were left out: the export is "
        f"damaged there, and their time is missing from the ledger{_share(n, 'ops', 'op_rows')}."
    )


def _impossible_call_times(n: Numbers) -> str:
    return (
        f"{n['calls']} CUDA API calls had impossible times (a start before 0, an end before the "
        "start, or longer than the whole capture; where the export states when the capture "
        "stopped, also a start at 0 or an end after the stop) and were left out: the export is "
        "damaged there; their ops count as having no launch "
        f"call{_share(n, 'calls', 'call_rows')}."
    )


def _unresolved_call_names(n: Numbers) -> str:
    return (
        f"{n['calls']} CUDA API calls have a name id that is not in StringIds, or a name no "
        "CUDA call has ('', NULL or other text), in a damaged string table: they count as no "
        "known call (named '?' where the id is missing), so launch counts, launches per "
        "step and the idle split by cause (launch, sync, api) "
        f"miss them{_share(n, 'calls', 'call_rows')}."
    )


def _unresolved_kernel_names(n: Numbers) -> str:
    return (
        f"{n['kernels']} kernels have a name id that is not in StringIds (a damaged string "
        "table): their time is counted, but they are named '?' in the top kernels, and a "
        "collective among them is not known as one (its wait for a peer counts as "
        f"busy){_share(n, 'kernels', 'op_rows')}."
    )


def _named_domains_used(n: Numbers) -> str:
    return (
        f"NVTX ranges of the named domains {_listed(n)} count for steps and stages like the "
        "default domain's."
    )


# Why the ranges of a group of domains never become steps or stages.
_LEFT_OUT = {
    "library": ("of the library domains", "a library's own view"),
    "unnamed": ("of domains never named", "no nvtxDomainCreate row says whose they are"),
    "other": ("of the domains", "not the --domain asked for"),
}


def _domains_left_out(n: Numbers) -> str:
    what, reason = _LEFT_OUT[str(n["group"])]
    return (
        f"NVTX ranges {what} {_listed(n)} never become steps or stages ({reason}); "
        "their time stays in the enclosing stage."
    )


def _processes_without_steps(n: Numbers) -> str:
    return (
        f"Processes {', '.join(map(str, items_of(n, 'pids')))} ran GPU ops but have no "
        f"{n['step']} steps; they are not in the report."
    )


def _launching_thread_borrowed(n: Numbers) -> str:
    launching = ", ".join(
        _thread(tid, name)
        for tid, name in zip(
            items_of(n, "launching_tids"), items_of(n, "launching_threads"), strict=True
        )
    )
    return (
        f"The step ranges are on thread {_thread(n['step_tid'], n['step_thread'])}, which "
        f"launches no GPU work; thread {launching} launches it. Its calls are charged to the "
        "stage open on the step thread at their start, and idle time is split by what it was "
        "doing."
    )


def _step_kinds(n: Numbers) -> str:
    kinds = ", ".join(kind_label(str(kind)) for kind in items_of(n, "kinds"))
    return (
        f"Steps come in kinds ({kinds}: the phase word in a step's name or in a range inside "
        "it); each kind is analysed on its own, never averaged with another. Pick one with "
        "--kind."
    )


def _unmatched_collectives(n: Numbers) -> str:
    share = 100 * int_of(n, "unmatched") / max(int_of(n, "instances"), 1)
    return (
        f"{n['unmatched']} of {n['instances']} collective instances ({share:.0f} %) could not be "
        "matched across processes (a participant lacks the k-th collective of the family, or "
        "the participants' ends differ by more than max(5 µs, 1 %)): no wait is attributed for "
        "them, and their time stays busy."
    )


def _several_processes(n: Numbers) -> str:
    gpus: dict[int | str, list[int | str]] = {}
    for pid, gpu in zip(items_of(n, "pids"), items_of(n, "gpus"), strict=True):
        gpus.setdefault(pid, []).append(gpu)
    placed = "; ".join(f"{pid} on GPU {', '.join(map(str, ids))}" for pid, ids in gpus.items())
    return f"{len(gpus)} processes ran GPU work ({placed}): each has its own ledger; " + (
        "the ranks table says who waits for whom in collectives."
        if n["collectives"]
        else "the slowest process per stage is named."
    )


def _warmup_steady_loads(n: Numbers) -> str:
    return (
        f"Process {n['pid']}: CUDA code is loaded in {n['loading']} of the {n['read']} steps "
        f"read for the warm-up rule ({n['loads']} loads): that is steady state, not warm-up, "
        "so those steps are analysed and the loads are a finding; only leading steps longer "
        f"than {n['length_factor']}x the median are skipped."
    )


def _warmup_length_only(n: Numbers) -> str:
    return (
        f"Process {n['pid']}: skipping every leading step that loads code would leave fewer "
        f"than half of its {n['steps']} steps, so only the leading steps longer than "
        f"{n['length_factor']}x the median ({n['skipped']}) are skipped; pass --skip N to "
        "choose."
    )


def _time_window_export(n: Numbers) -> str:
    windows = ", ".join(
        f"{key}={value}"
        for key, value in zip(items_of(n, "settings"), items_of(n, "values"), strict=True)
    )
    return (
        f"The export holds only a time window of the capture ({windows}): ops near its edges "
        "may lack their launching calls, and steps cut by the edges are missing."
    )


def _older_schema(n: Numbers) -> str:
    return (
        "Older export schema (EXPORT_META_DATA, Nsight Systems "
        f"{n['nsys_version'] or 'unknown'}, schema {n['schema_version'] or 'unknown'}): "
        "read with the older table names."
    )


def _profiler_overhead_in_steps(n: Numbers) -> str:
    return (
        f"{n['rows']} profiler-overhead rows ({format_duration(int_of(n, 'duration_ns'))}) fall "
        "inside analysed steps: that host time is the profiler's, not the program's, and "
        "shows up as host idle time."
    )


def _fixed(text: str) -> Callable[[Numbers], str]:
    """The words of a note that has no numbers."""
    return lambda _: text


# Every code's words (tests/test_notes.py checks that each NoteCode has them).
WORDS: dict[NoteCode, Callable[[Numbers], str]] = {
    NoteCode.NO_NVTX: _fixed(
        f"No {NVTX_TABLE} table: the capture has no NVTX ranges, so there are no steps or "
        "stages; each process is analysed as one step. Capture with --trace=cuda,nvtx and "
        "annotate the decode loop."
    ),
    NoteCode.NO_STEP_RANGE: _fixed(
        "No step range, whole-trace analysis: "
        + describe_step_choice(StepChoice(StepFound.NONE), None)
    ),
    NoteCode.NO_CUDA_API: _fixed(
        "No CUDA API table: ops cannot be joined to their launching calls, so every op is "
        f"charged to {NO_LAUNCH_CALL} and all idle time to host."
    ),
    NoteCode.GRAPH_LEVEL_TRACE: lambda n: (
        f"Graph-level CUDA graph trace: {n['graph_replays']} graph replays appear as one op each "
        "and the kernels inside them are not visible; busy time is right, per-kernel evidence "
        "inside graphs is missing. Capture with --cuda-graph-trace=node to see them."
    ),
    NoteCode.OVERLAPPING_STEP_RANGES: _overlapping_step_ranges,
    NoteCode.TIME_WINDOW_EXPORT: _time_window_export,
    NoteCode.OLDER_SCHEMA: _older_schema,
    NoteCode.NVTX_WITHOUT_TEXT_ID: _fixed(
        f"{NVTX_TABLE} has no textId column (older schema): range names come from text."
    ),
    NoteCode.KERNELS_WITHOUT_GRAPH_NODE_ID: _fixed(
        f"{KERNEL_TABLE} has no graphNodeId column (older schema): kernels replayed from CUDA "
        "graphs are recognised only by their cudaGraphLaunch call, and ops per graph launch "
        "is unknown."
    ),
    NoteCode.LOST_LAUNCH_RECORDS: _lost_launch_records,
    NoteCode.NSYS_LOST_EVENTS: _nsys_lost_events,
    NoteCode.UNTIMED_ROWS: lambda n: (
        f"{n['rows']} GPU op or API rows had start = end = 0 (CUPTI could not time them) and "
        "were left out: their time is missing from the ledger."
    ),
    NoteCode.DUPLICATE_ROWS: _duplicate_rows,
    NoteCode.IMPOSSIBLE_OP_TIMES: _impossible_op_times,
    NoteCode.IMPOSSIBLE_CALL_TIMES: _impossible_call_times,
    NoteCode.UNRESOLVED_CALL_NAMES: _unresolved_call_names,
    NoteCode.UNRESOLVED_KERNEL_NAMES: _unresolved_kernel_names,
    NoteCode.IMPOSSIBLE_RANGE_TIMES: lambda n: (
        f"{n['ranges']} NVTX ranges had impossible times (a start before 0 or an end before the "
        "start) and were left out: the export is damaged there, and a step or stage among "
        "them is missing from the ledger."
    ),
    NoteCode.UNCLOSED_RANGES: lambda n: (
        f"{n['ranges']} NVTX ranges were never closed (NULL end) and were left out; a step or "
        "stage among them is missing from the ledger."
    ),
    NoteCode.RANGES_CLOSED_ELSEWHERE: lambda n: (
        f"{n['ranges']} NVTX ranges were closed on another thread than the one that opened "
        "them; they are placed on the opening thread."
    ),
    NoteCode.PROFILER_OVERHEAD_IN_STEPS: _profiler_overhead_in_steps,
    NoteCode.NAMED_DOMAINS_USED: _named_domains_used,
    NoteCode.DOMAINS_LEFT_OUT: _domains_left_out,
    NoteCode.PROCESSES_WITHOUT_STEPS: _processes_without_steps,
    NoteCode.LAUNCHING_THREAD_BORROWED: _launching_thread_borrowed,
    NoteCode.STEP_KINDS: _step_kinds,
    NoteCode.OPS_WITHOUT_LAUNCH_CALL: lambda n: (
        f"{n['missing']} of {n['ops']} GPU ops have no launching call in the export (sliced "
        f"capture, or calls not traced); their busy time is charged to {NO_LAUNCH_CALL}."
    ),
    NoteCode.OPS_FROM_OTHER_THREADS: lambda n: (
        f"{n['ops']} GPU ops were launched by threads that have no steps; their busy time is "
        f"charged to {OTHER_THREAD}."
    ),
    NoteCode.STEPS_WITHOUT_GPU_WORK: lambda n: (
        f"{n['steps']} analysed steps have no GPU op running in them: they are all idle time."
    ),
    NoteCode.WARMUP_STEADY_LOADS: _warmup_steady_loads,
    NoteCode.WARMUP_LENGTH_ONLY: _warmup_length_only,
    NoteCode.UNMATCHED_COLLECTIVES: _unmatched_collectives,
    NoteCode.SEVERAL_PROCESSES: _several_processes,
    NoteCode.PROCESS_ON_SEVERAL_GPUS: lambda n: (
        f"Process {n['pid']} runs ops on {n['gpus']} GPUs: its ledger counts the GPU as busy "
        "when any of them runs an op."
    ),
    NoteCode.EXPORTS_ALIGNED: exports_aligned,
    NoteCode.EXPORTS_APART: exports_apart,
    NoteCode.COLLECTIVES_UNSPLIT: collectives_unsplit,
    NoteCode.WAITS_WITHIN_CLOCK_ERROR: lambda n: (
        f"{n['waits']} waits across exports no longer than the alignment's p99 residual were "
        "not attributed: they cannot be told apart from clock error."
    ),
    NoteCode.EXPORT_NOT_ANALYSED: lambda n: f"{n['file']}: not analysed: {n['message']}",
}


_FIGURE_WORDS = {
    Figures.GPU_TIME: "GPU busy and idle time",
    Figures.LAUNCHES: "launch counts and the idle split by cause",
}
_PROBLEM_WORDS = {
    "impossible_times": "had impossible times and were left out",
    "unresolved_names": "have names not in StringIds, or no CUDA call's names",
}
_TABLE_WORDS = {"gpu_ops": "GPU op rows", "api_calls": "CUDA API calls"}


def describe_unreliable(flag: UnreliableFigures) -> str:
    """'GPU busy and idle time: 12.0 % of GPU op rows (793 of 6612) had impossible times ...'"""
    return (
        f"{_FIGURE_WORDS[flag.figures]}: {100 * flag.rows / flag.of_rows:.1f} % of "
        f"{_TABLE_WORDS[flag.table]} ({flag.rows} of {flag.of_rows}) {_PROBLEM_WORDS[flag.problem]}"
    )


def unreliable_lines(flags: list[UnreliableFigures]) -> list[str]:
    """One line per flag, for the top of a text or Markdown report."""
    return [f"Unreliable: {describe_unreliable(flag)} (see the integrity notes)." for flag in flags]
