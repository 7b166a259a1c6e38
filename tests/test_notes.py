"""The words of integrity notes (notes.py), from notes built by hand: every code has words, and
the sentences say the numbers they are given."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, corpus_trace_paths
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.analysis.layout_notes import overlapping_steps
from trace_gaps.analysis.step_range import parse_step_range
from trace_gaps.run.one import analyse_export

from trace_gaps.records.notes import (
    Figures,
    Note,
    NoteCode,
    NoteFacts,
    NoteNumber,
    Severity,
    UnreliableFigures,
)
from trace_gaps.report.notes import WORDS, about_export, unreliable_lines, write_note

# Numbers of each code as the analysis gives them (analysis/integrity.py, multi.py).
EXAMPLES: dict[NoteCode, dict[str, NoteNumber]] = {
    NoteCode.NO_NVTX: {},
    NoteCode.NO_STEP_RANGE: {},
    NoteCode.NO_CUDA_API: {},
    NoteCode.GRAPH_LEVEL_TRACE: {"graph_replays": 40},
    NoteCode.OVERLAPPING_STEP_RANGES: {"overlapping": 2, "instances": 9, "step": "decode_step"},
    NoteCode.TIME_WINDOW_EXPORT: {"settings": ("DERIVED_WINDOW_NS",), "values": ("5",)},
    NoteCode.OLDER_SCHEMA: {"nsys_version": "2022.2.1.31", "schema_version": ""},
    NoteCode.NVTX_WITHOUT_TEXT_ID: {},
    NoteCode.KERNELS_WITHOUT_GRAPH_NODE_ID: {},
    NoteCode.LOST_LAUNCH_RECORDS: {"missing": 3, "launches": 8, "stages": ("forward", "sample")},
    NoteCode.NSYS_LOST_EVENTS: {"messages": ("CUPTI: 12 events\twere lost.",)},
    NoteCode.UNTIMED_ROWS: {"rows": 4},
    NoteCode.DUPLICATE_ROWS: {"ops": 5, "calls": 6},
    NoteCode.IMPOSSIBLE_OP_TIMES: {"ops": 1, "op_rows": 8},
    NoteCode.IMPOSSIBLE_CALL_TIMES: {"calls": 1, "call_rows": 0},
    NoteCode.UNRESOLVED_CALL_NAMES: {"calls": 7, "call_rows": 70},
    NoteCode.UNRESOLVED_KERNEL_NAMES: {"kernels": 2, "op_rows": 3},
    NoteCode.IMPOSSIBLE_RANGE_TIMES: {"ranges": 1},
    NoteCode.UNCLOSED_RANGES: {"ranges": 2},
    NoteCode.RANGES_CLOSED_ELSEWHERE: {"ranges": 3},
    NoteCode.PROFILER_OVERHEAD_IN_STEPS: {"rows": 2, "duration_ns": 1_500_000},
    NoteCode.NAMED_DOMAINS_USED: {"domains": ("llm_server",), "ranges": (12,)},
    NoteCode.DOMAINS_LEFT_OUT: {
        "group": "library",
        "domains": ("NCCL", "cuBLAS"),
        "ranges": (3, 4),
    },
    NoteCode.PROCESSES_WITHOUT_STEPS: {"pids": (200, 300), "step": "decode_step"},
    NoteCode.LAUNCHING_THREAD_BORROWED: {
        "step_tid": 7,
        "step_thread": "python",
        "launching_tids": (8, 9),
        "launching_threads": ("", "worker"),
    },
    NoteCode.STEP_KINDS: {"kinds": ("DECODE", "PREFILL")},
    NoteCode.OPS_WITHOUT_LAUNCH_CALL: {"missing": 1, "ops": 4},
    NoteCode.OPS_FROM_OTHER_THREADS: {"ops": 5},
    NoteCode.STEPS_WITHOUT_GPU_WORK: {"steps": 3},
    NoteCode.WARMUP_STEADY_LOADS: {
        "pid": 100,
        "loading": 30,
        "read": 40,
        "loads": 81,
        "length_factor": 3,
    },
    NoteCode.WARMUP_LENGTH_ONLY: {"pid": 100, "steps": 10, "skipped": 1, "length_factor": 3},
    NoteCode.UNMATCHED_COLLECTIVES: {"unmatched": 3, "instances": 10},
    NoteCode.SEVERAL_PROCESSES: {"pids": (100, 100, 200), "gpus": (0, 1, 1), "collectives": False},
    NoteCode.PROCESS_ON_SEVERAL_GPUS: {"pid": 100, "gpus": 2},
    NoteCode.EXPORTS_ALIGNED: {
        "files": ("a.sqlite", "b.sqlite"),
        "offsets_ns": (0, -1_250_000),
        "method": "session start",
    },
    NoteCode.EXPORTS_APART: {
        "file": "b.sqlite",
        "first": "a.sqlite",
        "reason": "ends",
        "residual_p50_ns": 6_693_339,
        "shared_instances": 31,
        "tolerance_ns": 5_000,
    },
    NoteCode.COLLECTIVES_UNSPLIT: {
        "process": "2947",
        "collectives_per_step": 16.0,
        "collective_ns_per_step": 9_185_042,
        "wait_lower_bound_ns_per_step": 9_051_148,
        "names": ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL",),
        "exports_to_add": "tp_rank*.sqlite",
        "peers_decide_levers": 1,
    },
    NoteCode.WAITS_WITHIN_CLOCK_ERROR: {"waits": 4},
    NoteCode.EXPORT_NOT_ANALYSED: {"file": "b.sqlite", "message": "b.sqlite: is not a SQLite file"},
}


def words(code: NoteCode, **numbers: NoteNumber) -> str:
    return write_note(NoteFacts(code, Severity.INFO, (), numbers)).text


def test_every_note_code_has_words():
    assert set(WORDS) == set(NoteCode)


@pytest.mark.parametrize("code", list(NoteCode))
def test_every_code_is_one_sentence_from_its_numbers(code):
    # A code without an example here, or whose words read a number it lacks, fails.
    text = words(code, **EXAMPLES[code])
    assert text.strip() and "\n" not in text


def test_a_note_keeps_its_code_severity_and_figures():
    facts = NoteFacts(
        NoteCode.UNTIMED_ROWS, Severity.PARTIAL, (Figures.GPU_TIME, Figures.STEPS), {"rows": 4}
    )
    assert write_note(facts) == Note(
        "untimed_rows",
        "partial",
        ["gpu_time", "steps"],
        "4 GPU op or API rows had start = end = 0 (CUPTI could not time them) and were left "
        "out: their time is missing from the ledger.",
    )


def test_the_words_name_the_table_the_export_lacks():
    assert words(NoteCode.NO_NVTX).startswith("No NVTX_EVENTS table: ")
    assert words(NoteCode.KERNELS_WITHOUT_GRAPH_NODE_ID).startswith(
        "CUPTI_ACTIVITY_KIND_KERNEL has no graphNodeId column"
    )


def test_a_share_of_rows_is_said_only_where_the_rows_are_known():
    assert words(NoteCode.IMPOSSIBLE_OP_TIMES, ops=1, op_rows=8).endswith(
        "from the ledger (12.5 % of 8 rows)."
    )
    assert words(NoteCode.IMPOSSIBLE_CALL_TIMES, calls=1, call_rows=0).endswith(
        "count as having no launch call."
    )


def test_lists_are_written_out():
    assert "per-kernel evidence of 'forward', 'sample' miss" in words(
        NoteCode.LOST_LAUNCH_RECORDS, **EXAMPLES[NoteCode.LOST_LAUNCH_RECORDS]
    )
    assert words(NoteCode.NSYS_LOST_EVENTS, messages=("a\t b", "c", "d", "e")) == (
        "nsys reported lost events during the capture: 'a b'; 'c'; 'd'."
    )
    assert words(NoteCode.DOMAINS_LEFT_OUT, **EXAMPLES[NoteCode.DOMAINS_LEFT_OUT]).startswith(
        "NVTX ranges of the library domains NCCL (3), cuBLAS (4) never become steps or stages "
        "(a library's own view)"
    )
    assert words(NoteCode.SEVERAL_PROCESSES, **EXAMPLES[NoteCode.SEVERAL_PROCESSES]) == (
        "2 processes ran GPU work (100 on GPU 0, 1; 200 on GPU 1): each has its own ledger; "
        "the slowest process per stage is named."
    )
    assert words(
        NoteCode.LAUNCHING_THREAD_BORROWED, **EXAMPLES[NoteCode.LAUNCHING_THREAD_BORROWED]
    ).startswith(
        "The step ranges are on thread 7 (python), which launches no GPU work; thread 8, "
        "9 (worker) launches it."
    )
    assert "Steps come in kinds (DECODE, PREFILL: " in words(
        NoteCode.STEP_KINDS, **EXAMPLES[NoteCode.STEP_KINDS]
    )


def test_the_alignment_of_exports_says_the_residual_and_drift_only_where_measured():
    plain = words(NoteCode.EXPORTS_ALIGNED, **EXAMPLES[NoteCode.EXPORTS_ALIGNED])
    assert plain == (
        "2 exports on one clock (session start): a.sqlite +0.000 ms, b.sqlite -1.250 ms."
    )
    measured = words(
        NoteCode.EXPORTS_ALIGNED,
        **EXAMPLES[NoteCode.EXPORTS_ALIGNED],
        residual_p50_ns=1_200,
        residual_p99_ns=3_000,
        shared_instances=40,
        drift_ns_per_s=250.0,
    )
    assert measured == (
        "2 exports on one clock (session start): a.sqlite +0.000 ms, b.sqlite -1.250 ms; "
        "residual end mismatch of shared collectives p50 1.2 µs, p99 3.0 µs over 40 "
        "instances; remaining drift 0.25 µs/s (not corrected)."
    )


def test_a_note_of_one_of_several_exports_names_it():
    note = write_note(EXAMPLE_NOTE)
    assert about_export(note, "rank1.sqlite").text == f"rank1.sqlite: {note.text}"


EXAMPLE_NOTE = NoteFacts(
    NoteCode.UNCLOSED_RANGES, Severity.PARTIAL, (Figures.STEPS,), {"ranges": 2}
)


def test_an_unreliable_flag_is_one_line_with_its_share():
    flag = UnreliableFigures(Figures.GPU_TIME, "gpu_ops", "impossible_times", 793, 6612)
    assert unreliable_lines([flag]) == [
        "Unreliable: GPU busy and idle time: 12.0 % of GPU op rows (793 of 6612) had "
        "impossible times and were left out (see the integrity notes)."
    ]


def test_steps_of_other_kinds_or_outside_steps_are_not_called_overlapping() -> None:
    """The overlap note counts the step ranges dropped for overlapping an earlier one, not
    those another kind's analysis or --steps left to others: serving_batch_names' 93 ranges
    overlap nowhere (DECODE 68 and PREFILL 25 analysed apart), spec_eager's 16 with --steps."""
    (serving,) = [p for p in corpus_trace_paths() if p.stem == "serving_batch_names"]
    for options in (AnalysisOptions(), AnalysisOptions(step_range=parse_step_range("3:5"))):
        path = serving if options.step_range is None else ROOT / "sample_traces" / "spec_eager.sqlite"
        trace, analysis = analyse_export(path, options, jobs=1)
        for each in analysis.by_kind():
            assert overlapping_steps(trace, each) is None, (path.name, each.kind)
