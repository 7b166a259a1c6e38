"""Integrity notes: what in the export makes some numbers partial or unreliable, and which."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trace_gaps.analysis.kinds import kind_label
from trace_gaps.analysis.ledger import BUCKET
from trace_gaps.analysis.metrics import LEDGER, OP_CENSUS, STAGE_STATS
from trace_gaps.analysis.pipeline import Analysis
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
    OpKind,
    Trace,
)
from trace_gaps.nsys import queries
from trace_gaps.records import Figures, Note, Severity, UnreliableFigures
from trace_gaps.units import format_duration

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


_FIGURE_WORDS = {
    Figures.GPU_TIME: "GPU busy and idle time",
    Figures.LAUNCHES: "launch counts and the idle split by cause",
}
_PROBLEM_WORDS = {
    "impossible_times": "had impossible times and were left out",
    "unresolved_names": "have names not in StringIds",
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


def note_of(code: str, severity: Severity, figures: list[Figures], text: str) -> Note:
    """A Note of these facts and this sentence."""
    return Note(code, severity.value, [figure.value for figure in figures], text)


def _share(rows: int, of_rows: int) -> str:
    if not of_rows:
        return ""
    return f" ({100 * rows / of_rows:.3g} % of {of_rows} rows)"


def _lost_records(messages: tuple[str, ...], analysis: Analysis) -> list[Note]:
    """Launch calls whose ops are missing, and nsys's own words about lost events."""
    notes: list[Note] = []
    stats = analysis.metrics[STAGE_STATS]
    missing = int(stats[Total.LAUNCHES_WITHOUT_OP].sum())
    if missing:
        launch_columns = ["kernel_launches", "graph_launches", "memcpy_launches", "memset_launches"]
        launches = int(stats[launch_columns].to_numpy().sum())
        by_stage = (
            stats.groupby(STAGE)[Total.LAUNCHES_WITHOUT_OP].sum().sort_values(ascending=False)
        )
        names = analysis.stage_map.names
        stages = ", ".join(repr(names[code]) for code in by_stage[by_stage > 0].index[:3])
        notes.append(
            note_of(
                "lost_launch_records",
                Severity.PARTIAL,
                [Figures.GPU_TIME, Figures.KERNELS],
                f"{missing} of {launches} launch calls in analysed steps have no GPU op in the "
                "export: their records were lost (the program died before nsys flushed them, its "
                "buffers overflowed, or the export is a time window). GPU busy time, ops per step "
                f"and per-kernel evidence of {stages} miss that work; launch counts include it.",
            )
        )
    if messages:
        quoted = "; ".join(f"'{' '.join(m.split())}'" for m in messages[:3])
        notes.append(
            note_of(
                "nsys_lost_events",
                Severity.PARTIAL,
                [Figures.GPU_TIME, Figures.LAUNCHES],
                f"nsys reported lost events during the capture: {quoted}.",
            )
        )
    return notes


def integrity_notes(trace: Trace, analysis: Analysis) -> list[Note]:
    """One note per problem found: its code, severity and the figures it affects, and its
    sentence (what it is, how much, and what it affects)."""
    info = trace.info
    notes: list[Note] = []
    if queries.NVTX_TABLE not in info.tables:
        notes.append(
            note_of(
                "no_nvtx",
                Severity.PARTIAL,
                [Figures.STEPS],
                "No NVTX_EVENTS table: the capture has no NVTX ranges, so there are no steps or "
                "stages; each process is analysed as one step. Capture with --trace=cuda,nvtx and "
                "annotate the decode loop.",
            )
        )
    elif analysis.selection.name is None:
        notes.append(
            note_of(
                "no_step_range",
                Severity.INFO,
                [Figures.STEPS],
                f"No step range, whole-trace analysis: {analysis.selection.reason}",
            )
        )
    if queries.RUNTIME_TABLE not in info.tables:
        notes.append(
            note_of(
                "no_cuda_api",
                Severity.UNRELIABLE,
                [Figures.LAUNCHES],
                "No CUDA API table: ops cannot be joined to their launching calls, so every op is "
                f"charged to {NO_LAUNCH_CALL} and all idle time to host.",
            )
        )
    device_ops = analysis.device_ops
    graph_ops = int(device_ops.loc[device_ops[OP_KIND] == OpKind.GRAPH.value, "ops"].sum())
    if graph_ops:
        notes.append(
            note_of(
                "graph_level_trace",
                Severity.PARTIAL,
                [Figures.KERNELS],
                f"Graph-level CUDA graph trace: {graph_ops} graph replays appear as one op each "
                "and the kernels inside them are not visible; busy time is right, per-kernel "
                "evidence inside graphs is missing. Capture with --cuda-graph-trace=node to see them.",
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
                    "overlapping_step_ranges",
                    Severity.INFO,
                    [Figures.STEPS],
                    f"{overlapping} of {instances} {step_name!r} ranges overlap an earlier one on "
                    "their thread, or nest inside one, and were left out: steps must not overlap, "
                    "so only the earlier (outer) range of each overlapping pair is a step.",
                )
            )
    notes += _lost_records(info.lost_event_messages, analysis)
    if info.untimed_events:
        notes.append(
            note_of(
                "untimed_rows",
                Severity.PARTIAL,
                [Figures.GPU_TIME],
                f"{info.untimed_events} GPU op or API rows had start = end = 0 (CUPTI could not time "
                "them) and were left out: their time is missing from the ledger.",
            )
        )
    if info.duplicated_ops or info.duplicated_calls:
        notes.append(
            note_of(
                "duplicate_rows",
                Severity.INFO,
                [],
                f"{info.duplicated_ops} GPU op rows and {info.duplicated_calls} CUDA API rows are "
                "duplicates, exact copies of another row (same process, correlation id, start and end) and were "
                "left out: the export holds them twice (a damaged or merged export); launch counts "
                "and per-kernel evidence would otherwise count them twice.",
            )
        )
    if info.impossible_ops:
        notes.append(
            note_of(
                "impossible_op_times",
                Severity.PARTIAL,
                [Figures.GPU_TIME],
                f"{info.impossible_ops} GPU ops had impossible times (a start before 0, an end "
                "before the start, or longer than the whole capture; where the export states when "
                "the capture stopped, also a start at 0 or an end after the stop) and were left "
                "out: the export is damaged there, and their time is missing from the ledger"
                f"{_share(info.impossible_ops, info.op_rows)}.",
            )
        )
    if info.impossible_calls:
        notes.append(
            note_of(
                "impossible_call_times",
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                f"{info.impossible_calls} CUDA API calls had impossible times (a start before 0, "
                "an end before the start, or longer than the whole capture; where the export "
                "states when the capture stopped, also a start at 0 or an end after the stop) and "
                "were left out: the export is damaged there; their ops count as having no launch "
                f"call{_share(info.impossible_calls, info.call_rows)}.",
            )
        )
    if info.unresolved_calls:
        notes.append(
            note_of(
                "unresolved_call_names",
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                f"{info.unresolved_calls} CUDA API calls have a name id that is not in StringIds "
                "(a damaged string table): they are named '?' and count as no known call, so "
                "launch counts, launches per step and the idle split by cause (launch, sync, api) "
                f"miss them{_share(info.unresolved_calls, info.call_rows)}.",
            )
        )
    if info.unresolved_kernels:
        notes.append(
            note_of(
                "unresolved_kernel_names",
                Severity.PARTIAL,
                [Figures.KERNELS, Figures.WAITS],
                f"{info.unresolved_kernels} kernels have a name id that is not in StringIds (a "
                "damaged string table): their time is counted, but they are named '?' in the top "
                "kernels, and a collective among them is not known as one (its wait for a peer "
                f"counts as busy){_share(info.unresolved_kernels, info.op_rows)}.",
            )
        )
    if info.impossible_ranges:
        notes.append(
            note_of(
                "impossible_range_times",
                Severity.PARTIAL,
                [Figures.STEPS],
                f"{info.impossible_ranges} NVTX ranges had impossible times (a start before 0 or "
                "an end before the start) and were left out: the export is damaged there, and a "
                "step or stage among them is missing from the ledger.",
            )
        )
    if info.unclosed_ranges:
        notes.append(
            note_of(
                "unclosed_ranges",
                Severity.PARTIAL,
                [Figures.STEPS],
                f"{info.unclosed_ranges} NVTX ranges were never closed (NULL end) and were left out; "
                "a step or stage among them is missing from the ledger.",
            )
        )
    ranges = trace.nvtx_ranges
    ends_elsewhere = (ranges[END_GLOBAL_TID] >= 0) & (ranges[END_GLOBAL_TID] != ranges[GLOBAL_TID])
    crossed = int(ends_elsewhere.sum())
    if crossed:
        notes.append(
            note_of(
                "ranges_closed_elsewhere",
                Severity.INFO,
                [],
                f"{crossed} NVTX ranges were closed on another thread than the one that opened them; "
                "they are placed on the opening thread.",
            )
        )
    notes.extend(_domain_notes(ranges, analysis))
    unstepped = sorted(set(device_ops[PID]) - set(analysis.steps[PID]))
    if unstepped and analysis.options.process is None:
        notes.append(
            note_of(
                "processes_without_steps",
                Severity.INFO,
                [],
                f"Processes {', '.join(map(str, unstepped))} ran GPU ops but have no "
                f"{analysis.selection.name} steps; they are not in the report.",
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


# Export settings that mean the file holds only a time window of the capture:
# `nsys export --times` (EXPORT_PARAM_TIMES_TO_EXPORT), or a window cut out afterwards by a
# tool that says so (nsys-ai's derive_test_fixture.py writes DERIVED_WINDOW_NS).
_WINDOW_SETTINGS = ("EXPORT_PARAM_TIMES_TO_EXPORT", "DERIVED_WINDOW_NS")


def _window_notes(trace: Trace) -> list[Note]:
    settings = dict(trace.info.export_settings)
    windows = [f"{key}={settings[key]}" for key in _WINDOW_SETTINGS if settings.get(key)]
    if not windows:
        return []
    return [
        note_of(
            "time_window_export",
            Severity.PARTIAL,
            [Figures.STEPS, Figures.LAUNCHES],
            f"The export holds only a time window of the capture ({', '.join(windows)}): ops "
            "near its edges may lack their launching calls, and steps cut by the edges are "
            "missing.",
        )
    ]


def _schema_notes(trace: Trace) -> list[Note]:
    info = trace.info
    notes = []
    if "EXPORT_META_DATA" in info.tables and "META_DATA_EXPORT" not in info.tables:
        notes.append(
            note_of(
                "older_schema",
                Severity.INFO,
                [],
                "Older export schema (EXPORT_META_DATA, Nsight Systems "
                f"{info.nsys_version or 'unknown'}, schema {info.schema_version or 'unknown'}): "
                "read with the older table names.",
            )
        )
    if f"{queries.NVTX_TABLE}.textId" in info.missing_columns:
        notes.append(
            note_of(
                "nvtx_without_text_id",
                Severity.INFO,
                [],
                "NVTX_EVENTS has no textId column (older schema): range names come from text.",
            )
        )
    if f"{queries.KERNEL_TABLE}.graphNodeId" in info.missing_columns:
        notes.append(
            note_of(
                "kernels_without_graph_node_id",
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                f"{queries.KERNEL_TABLE} has no graphNodeId column (older schema): kernels replayed "
                "from CUDA graphs are recognised only by their cudaGraphLaunch call, and ops per "
                "graph launch is unknown.",
            )
        )
    return notes


def _op_notes(analysis: Analysis) -> list[Note]:
    notes = []
    census = analysis.metrics[OP_CENSUS]
    names = analysis.stage_map.names
    missing = int(census.loc[census[STAGE] == names.index(NO_LAUNCH_CALL), "ops"].sum())
    if missing:
        notes.append(
            note_of(
                "ops_without_launch_call",
                Severity.PARTIAL,
                [Figures.LAUNCHES],
                f"{missing} of {int(census['ops'].sum())} GPU ops have no launching call in the export (sliced "
                f"capture, or calls not traced); their busy time is charged to {NO_LAUNCH_CALL}.",
            )
        )
    other = int(census.loc[census[STAGE] == names.index(OTHER_THREAD), "ops"].sum())
    if other:
        notes.append(
            note_of(
                "ops_from_other_threads",
                Severity.INFO,
                [],
                f"{other} GPU ops were launched by threads that have no steps; their busy time is "
                f"charged to {OTHER_THREAD}.",
            )
        )
    ledger = analysis.metrics[LEDGER]
    analysed = analysis.steps[~analysis.steps[IS_WARMUP]]
    busy = ledger[ledger[BUCKET] == Bucket.BUSY.value].groupby(STEP_ID)["duration_ns"].sum()
    empty = int((~analysed[STEP_ID].isin(busy[busy > 0].index)).sum())
    if empty:
        notes.append(
            note_of(
                "steps_without_gpu_work",
                Severity.INFO,
                [],
                f"{empty} analysed steps have no GPU op running in them: they are all idle time.",
            )
        )
    notes.extend(_warmup_notes(analysis.steps))
    return notes


def _warmup_notes(steps: pd.DataFrame) -> list[Note]:
    """Say why steps that load code were analysed, per process, when the warm-up rule chose so."""
    notes = []
    for pid, process in steps.groupby(PID, sort=True):
        rules = set(process[WARMUP_RULE])
        read = process[process[LOADS] >= 0]
        loading = int((read[LOADS] > 0).sum())
        if "steady_loads" in rules:
            notes.append(
                note_of(
                    "warmup_steady_loads",
                    Severity.INFO,
                    [Figures.STEPS],
                    f"Process {pid}: CUDA code is loaded in {loading} of the {len(read)} steps read "
                    f"for the warm-up rule ({int(read[LOADS].sum())} loads): that is steady state, "
                    "not warm-up, so those steps are analysed and the loads are a finding; only "
                    f"leading steps longer than {WARMUP_LENGTH_FACTOR}x the median are skipped.",
                )
            )
        if "length_only" in rules:
            notes.append(
                note_of(
                    "warmup_length_only",
                    Severity.INFO,
                    [Figures.STEPS],
                    f"Process {pid}: skipping every leading step that loads code would leave fewer "
                    f"than half of its {len(process)} steps, so only the leading steps longer than "
                    f"{WARMUP_LENGTH_FACTOR}x the median ({int(process[IS_WARMUP].sum())}) are skipped; "
                    "pass --skip N to choose.",
                )
            )
    return notes


def _thread_and_kind_notes(trace: Trace, analysis: Analysis) -> list[Note]:
    """Which thread held the ranges where another launched; how steps were split by kind."""
    notes = []
    by_step_thread: dict[int, list[int]] = {}
    for lender, step_tid in analysis.borrowed_threads.items():
        by_step_thread.setdefault(step_tid, []).append(lender)
    for step_tid, lenders in sorted(by_step_thread.items()):
        launching = ", ".join(_thread_name(trace, tid) for tid in sorted(lenders))
        notes.append(
            note_of(
                "launching_thread_borrowed",
                Severity.INFO,
                [],
                f"The step ranges are on thread {_thread_name(trace, step_tid)}, which launches no "
                f"GPU work; thread {launching} launches it. Its calls are charged to the stage open "
                "on the step thread at their start, and idle time is split by what it was doing.",
            )
        )
    if analysis.kind is not None:
        kinds = ", ".join(kind_label(a.kind or "") for a in analysis.by_kind())
        notes.append(
            note_of(
                "step_kinds",
                Severity.INFO,
                [Figures.STEPS],
                f"Steps come in kinds ({kinds}: the phase word in a step's name or in a range "
                "inside it); each kind is analysed on its own, never averaged with another. "
                "Pick one with --kind.",
            )
        )
    return notes


def _domain_notes(ranges: pd.DataFrame, analysis: Analysis) -> list[Note]:
    """The named NVTX domains seen: which count for steps and stages, which never do."""
    named = ranges[ranges[DOMAIN_ID] != 0]
    if named.empty:
        return []
    counts = named[DOMAIN].value_counts()
    kept = user_domains(named, analysis.options.domain)
    used = named[DOMAIN][kept].value_counts()
    left = counts.drop(used.index)

    def listed(series: pd.Series) -> str:
        return ", ".join(f"{name} ({int(n)})" for name, n in series.sort_index().items())

    notes = []
    if len(used):
        notes.append(
            note_of(
                "named_domains_used",
                Severity.INFO,
                [Figures.STEPS],
                f"NVTX ranges of the named domains {listed(used)} count for steps and stages like "
                "the default domain's.",
            )
        )
    library = left[[is_library_domain(str(n)) for n in left.index]]
    unnamed = left[[str(n).startswith(UNNAMED_DOMAIN) for n in left.index]]
    others = left.drop([*library.index, *unnamed.index])
    why = (
        (library, "of the library domains", "a library's own view"),
        (unnamed, "of domains never named", "no nvtxDomainCreate row says whose they are"),
        (others, "of the domains", "not the --domain asked for"),
    )
    notes += [
        note_of(
            "domains_left_out",
            Severity.INFO,
            [],
            f"NVTX ranges {what} {listed(group)} never become steps or stages ({reason}); "
            "their time stays in the enclosing stage.",
        )
        for group, what, reason in why
        if len(group)
    ]
    return notes


def _thread_name(trace: Trace, global_tid: int) -> str:
    tid = global_tid & 0xFFFFFF
    names = trace.threads.set_index(GLOBAL_TID)[NAME] if len(trace.threads) else None
    name = names.get(global_tid) if names is not None else None
    return f"{tid} ({name})" if isinstance(name, str) and name else str(tid)


def _collective_notes(analysis: Analysis) -> list[Note]:
    match = analysis.collectives
    if not match.unmatched:
        return []
    share = 100 * match.unmatched / max(match.instances, 1)
    return [
        note_of(
            "unmatched_collectives",
            Severity.PARTIAL,
            [Figures.WAITS],
            f"{match.unmatched} of {match.instances} collective instances ({share:.0f} %) could "
            "not be matched across processes (a participant lacks the k-th collective of the "
            "family, or the participants' ends differ by more than max(5 µs, 1 %)): no wait is "
            "attributed for them, and their time stays busy.",
        )
    ]


def _device_notes(analysis: Analysis) -> list[Note]:
    devices = analysis.device_ops.groupby(PID)[DEVICE_ID].unique()
    notes = []
    if len(devices) > 1:
        placed = "; ".join(
            f"{pid} on GPU {', '.join(map(str, sorted(ids)))}" for pid, ids in devices.items()
        )
        notes.append(
            note_of(
                "several_processes",
                Severity.INFO,
                [],
                f"{len(devices)} processes ran GPU work ({placed}): each has its own ledger; "
                + (
                    "the ranks table says who waits for whom in collectives."
                    if analysis.collectives.any
                    else "the slowest process per stage is named."
                ),
            )
        )
    notes.extend(
        note_of(
            "process_on_several_gpus",
            Severity.INFO,
            [Figures.GPU_TIME],
            f"Process {pid} runs ops on {len(ids)} GPUs: its ledger counts the GPU as busy when "
            "any of them runs an op.",
        )
        for pid, ids in devices.items()
        if len(ids) > 1
    )
    return notes


def _overhead_notes(trace: Trace, analysis: Analysis) -> list[Note]:
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
            "profiler_overhead_in_steps",
            Severity.PARTIAL,
            [Figures.HOST_IDLE],
            f"{count} profiler-overhead rows ({format_duration(duration)}) fall inside analysed "
            "steps: that host time is the profiler's, not the program's, and shows up as host "
            "idle time.",
        )
    ]
