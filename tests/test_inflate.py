"""benchmarks/inflate.py: N copies of an export's events, shifted in time, with fresh correlation ids."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from tests.builders import projected_frames
from tests.conftest import ROOT, peer_trace_paths, shipped_trace
from trace_gaps.analysis.engine.metrics import LEDGER
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions, analyse_trace
from trace_gaps.analysis.ledger import DURATION_NS
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import END_NS, START_NS, Trace
from trace_gaps.nsys.load import load_trace
from trace_gaps.vocabulary import NO_LAUNCH_CALL


def _inflate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inflate", ROOT / "benchmarks" / "inflate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


inflate = _inflate_module().inflate

COUNTED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "PROFILER_OVERHEAD",
    "ThreadNames",
    "StringIds",
)


def _counts(path: Path) -> dict[str, int]:
    connection = sqlite3.connect(path)
    try:
        tables = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        return {
            t: connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in COUNTED
            if t in tables
        }
    finally:
        connection.close()


def _analyse(path: Path) -> Analysis:
    return analyse_trace(load_trace(path), AnalysisOptions(skip=0))


def _assert_ledger_adds_up(analysis: Analysis) -> None:
    per_step = analysis.metrics[LEDGER].groupby(STEP_ID)[DURATION_NS].sum()
    steps = analysis.steps.set_index(STEP_ID)
    wall = steps[END_NS] - steps[START_NS]
    assert per_step.reindex(wall.index, fill_value=0).to_dict() == wall.to_dict()


def _three_step_export(builder):  # type: ignore[no-untyped-def]
    #   thread  [decode_step 0..10000 ][decode_step 10000..20000][decode_step 20000..30000]
    #           [draft ][verify       ]  (same inside each step, at offset o)
    #   calls     [launch k1] [memcpy]   [launch k2]
    #   GPU          [k1 ]      [cp]          [k2 ]
    #   plus one untimed kernel (start = end = 0) and one profiler-overhead row
    for o in (0, 10_000, 20_000):
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
        builder.launch("k1", o + 100, o + 600, o + 1_000, o + 3_000)
        builder.call("cudaMemcpyAsync", o + 3_100, o + 3_200, correlation_id=900_000 + o)
        builder.memcpy(o + 3_300, o + 3_600, correlation_id=900_000 + o)
        builder.launch("k2", o + 5_000, o + 5_400, o + 6_000, o + 9_000)
    builder.kernel("untimed", 0, 0, correlation_id=-1)
    builder.overhead(12_000, 12_500)
    return builder.write()


def test_inflating_three_times_triples_rows_and_steps_and_keeps_the_ledger_whole(
    export_builder, tmp_path
):
    source = _three_step_export(export_builder())
    big = tmp_path / "big.sqlite"
    inflate(source, big, 3, gap_ns=5_000)

    before, after = _counts(source), _counts(big)
    # Event tables triple; lookup tables (names, threads) are left as they are.
    assert {t: after[t] for t in before} == {
        t: n * 3 if t not in ("ThreadNames", "StringIds") else n for t, n in before.items()
    }
    small, large = _analyse(source), _analyse(big)
    assert len(small.steps) == 3
    assert len(large.steps) == 9
    # Copy k starts one span (30_000 ns) plus the gap after copy k - 1.
    assert sorted(large.steps[START_NS])[3] == 30_000 + 5_000
    _assert_ledger_adds_up(large)
    # Fresh correlation ids: every timed op still joins its own launch, none lost or doubled.
    no_call = large.stage_map.code(NO_LAUNCH_CALL)
    ops = projected_frames(load_trace(big), large)[1]
    assert (ops[STAGE] != no_call).all()
    assert len(ops) == 3 * len(projected_frames(load_trace(source), small)[1])
    lead = ops[START_NS] - ops["call_start_ns"]
    assert ((lead > 0) & (lead < 30_000)).all()  # each op's call is in its own copy
    # The untimed kernel stays untimed in every copy.
    assert load_trace(big).info.untimed_events == 3 * load_trace(source).info.untimed_events == 3
    large_ledger, small_ledger = large.metrics[LEDGER], small.metrics[LEDGER]
    busy = large_ledger[large_ledger["bucket"] == "busy"][DURATION_NS].sum()
    assert busy == 3 * small_ledger[small_ledger["bucket"] == "busy"][DURATION_NS].sum()


def test_factor_one_is_a_plain_copy(export_builder, tmp_path):
    source = _three_step_export(export_builder())
    copy = tmp_path / "copy.sqlite"
    inflate(source, copy, 1)
    assert _counts(copy) == _counts(source)


PEER = [p for p in peer_trace_paths() if p.name == "mfu_2gpu_before.sqlite"]


@pytest.mark.skipif(not PEER, reason="peer trace mfu_2gpu_before.sqlite not present")
def test_inflating_a_real_export_triples_its_events_and_ops(tmp_path):
    source = PEER[0]
    big = tmp_path / "big.sqlite"
    inflate(source, big, 3)
    before, after = _counts(source), _counts(big)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        assert after[table] == 3 * before[table]
    small, large = load_trace(source), load_trace(big)
    assert len(large.gpu_ops) == 3 * len(small.gpu_ops)
    assert len(large.api_calls) == 3 * len(small.api_calls)
    analysis = analyse_trace(large, AnalysisOptions(skip=0))
    small_analysis = analyse_trace(small, AnalysisOptions(skip=0))

    def missing(trace: Trace, analysis: Analysis) -> int:
        ops = projected_frames(trace, analysis)[1]
        return int((ops[STAGE] == analysis.stage_map.code(NO_LAUNCH_CALL)).sum())

    assert missing(large, analysis) == 3 * missing(small, small_analysis)
    _assert_ledger_adds_up(analysis)


def test_an_inflated_sample_keeps_every_copy_inside_the_capture(tmp_path):
    """The copies end after the capture's recorded stop unless inflate moves it: they would
    be left out as impossible times, and a benchmark would time the reading of rows it drops."""
    source = shipped_trace("spec_eager")
    big = tmp_path / "big.sqlite"
    inflate(source, big, 3)
    small, large = load_trace(source), load_trace(big)
    assert large.info.impossible_ops == 0 and large.info.impossible_calls == 0
    assert len(large.gpu_ops) == 3 * len(small.gpu_ops)
    assert len(large.api_calls) == 3 * len(small.api_calls)
