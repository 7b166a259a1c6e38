"""The kernel summary (analyze --kernels) and the step range (--steps A:B).

The summary is nsys's cuda_gpu_kern_sum over the analysed steps: on the samples nsys
reported on, its kernel totals are nsys's less the kernels launched outside every step
(recounted here in SQL); windows give the same exact percentiles as one pass.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, assert_matches_schema, shipped_trace
from tests.test_report import report_of
from tests.test_windows import assert_same, streamed, whole_report
from trace_gaps.analysis.engine.metrics import OP_DURATIONS
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.analysis.kernels import (
    DURATION_COLUMNS,
    merge_op_durations,
    summarise_op_durations,
)
from trace_gaps.analysis.stages import STAGE
from trace_gaps.cli import app
from trace_gaps.model import NAME, OP_KIND, PID
from trace_gaps.nsys.load import load_trace
from trace_gaps.records.report import KernelRow
from trace_gaps.report.descriptions import describe_steps

runner = CliRunner()
STATS = SAMPLE_TRACES / "nsys_stats"

# The kernels whose launching call starts in no decode_step range on its thread.
OUTSIDE_STEPS = """
SELECT count(*), sum(k."end" - k.start)
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
  ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
WHERE NOT EXISTS (
  SELECT 1 FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId
  WHERE COALESCE(n.text, s.value) = 'decode_step' AND n.globalTid = r.globalTid
    AND n.start <= r.start AND r.start < n."end")
"""


@pytest.mark.parametrize("name", ["spec_eager", "spec_graph_node"])
def test_kernel_totals_are_nsys_cuda_gpu_kern_sum_less_the_kernels_outside_the_steps(name):
    path = shipped_trace(name)
    with (STATS / f"{name}_cuda_gpu_kern_sum.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    nsys_count = sum(int(row["Instances"]) for row in rows)
    nsys_total = sum(int(row["Total Time (ns)"]) for row in rows)
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as connection:
        outside_count, outside_total = connection.execute(OUTSIDE_STEPS).fetchone()
    assert outside_count > 0  # the warm-up before the loop: the restriction is seen
    (process,) = report_of(path, skip=0, kernel_summary=True).processes
    assert process.kernels is not None
    kernels = [row for row in process.kernels.rows if row.kind == "kernel"]
    assert sum(row.count for row in kernels) == nsys_count - outside_count
    assert sum(row.total_ns for row in kernels) == nsys_total - outside_total


def test_windows_give_the_summary_of_one_pass():
    trace = load_trace(shipped_trace("spec_graph_node"))
    options = AnalysisOptions(kernel_summary=True)
    whole = analyse_trace(trace, options)
    windowed = analyse_trace(trace, options, window_rows=3_000, chunk_rows=500)
    assert windowed.windows > 5
    expected = summarise_op_durations(whole.metrics[OP_DURATIONS])
    assert len(expected) > 50
    pd.testing.assert_frame_equal(summarise_op_durations(windowed.metrics[OP_DURATIONS]), expected)


# A serving capture with kinds of steps and an open range too in the thorough run (16 CPU s).
@pytest.mark.parametrize(
    ("name", "steps"),
    [("spec_sync", "3:12"), pytest.param("serving_sglang", "10:", marks=pytest.mark.thorough)],
)
def test_streamed_in_windows_the_kernels_and_the_step_range_are_those_of_the_whole_trace(
    name, steps, monkeypatch
):
    path = shipped_trace(name)
    options = AnalysisOptions(kernel_summary=True, step_range=parse(steps))
    report, analysis = streamed(path, options, window_rows=2_000, monkeypatch=monkeypatch)
    assert analysis.windows > 5
    assert all(p.kernels is not None and p.kernels.rows for p in report.processes)
    assert_same(report, whole_report(path, options))


def two_stage_steps(builder):  # type: ignore[no-untyped-def]
    """Three steps of 10 µs from 100 µs, a kernel launched before them.

    per step o:  [decode_step o .. o+10000                                   ]
                 [draft o..o+4000        ][verify o+4000..o+10000             ]
       calls       [launch gemm]              [cudaGraphLaunch] [cudaMemsetAsync]
       GPU              [gemm: 1, 2, 4 µs in steps 0, 1, 2]  [gemm node 500][memset 100]
    """
    builder.launch("gemm", 50_000, 50_100, 50_200, 58_200)  # outside every step
    for step, duration in enumerate((1_000, 2_000, 4_000)):
        o = 100_000 + 10_000 * step
        builder.range("decode_step", o, o + 10_000)
        builder.range("draft", o, o + 4_000)
        builder.range("verify", o + 4_000, o + 10_000)
        builder.launch("gemm", o + 100, o + 200, o + 300, o + 300 + duration)
        replay = 1_000 + step
        builder.call("cudaGraphLaunch", o + 5_000, o + 5_100, correlation_id=replay)
        builder.kernel("gemm", o + 5_200, o + 5_700, correlation_id=replay, graph_node_id=3)
        builder.call("cudaMemsetAsync", o + 6_000, o + 6_100, correlation_id=2_000 + step)
        builder.memset(o + 6_200, o + 6_300, correlation_id=2_000 + step)
    return builder


def summary_rows(path: Path, **options: object) -> list[tuple[object, ...]]:
    (process,) = report_of(path, kernel_summary=True, **options).processes
    assert process.kernels is not None
    return [
        (r.name, r.stage, r.kind, r.from_graph, r.count, r.total_ns, r.p50_ns, r.p90_ns)
        for r in process.kernels.rows
    ]


def test_only_the_analysed_steps_ops_count_each_in_its_stage_and_kind(export_builder):
    path = two_stage_steps(export_builder()).write()
    # Step 0 is warm-up (--skip 1); the kernel before the steps is in none.
    assert summary_rows(path, skip=1) == [
        # p50 of (2000, 4000): rank round(0.5) = 0, half to even; p90: rank round(0.9) = 1.
        ("gemm", "draft", "kernel", False, 2, 6_000, 2_000, 4_000),
        ("gemm", "verify", "kernel", True, 2, 1_000, 500, 500),
        ("memset", "verify", "memset", False, 2, 200, 100, 100),
    ]
    (process,) = report_of(path, skip=1, kernel_summary=True).processes
    assert process.kernels is not None
    first = process.kernels.rows[0]
    assert (process.kernels.count, process.kernels.total_ns) == (6, 7_200)
    assert (first.share_pct, first.ns_per_step, first.count_per_step) == (83.33, 3_000, 1.0)


def test_steps_a_to_b_analyse_steps_a_to_b_minus_one(export_builder):
    path = two_stage_steps(export_builder()).write()
    assert summary_rows(path, skip=0, step_range=parse("2:3"))[0][4:6] == (1, 4_000)
    assert summary_rows(path, skip=0, step_range=parse(":2"))[0][4:6] == (2, 3_000)
    (process,) = report_of(path, skip=1, step_range=parse("0:2")).processes
    # Step 0 stays warm-up inside the range; step 2 is left out by it.
    assert [(r.step_index, r.is_warmup, r.skip_reason) for r in process.step_rows] == [
        (0, True, "given_skip"),
        (1, False, ""),
        (2, True, "outside_steps"),
    ]
    assert process.steps.skip_reasons == {"given_skip": 1, "outside_steps": 1}
    assert process.steps.index_range == "0:2"
    assert "2 skipped (1 --skip, 1 outside --steps 0:2)" in describe_steps(process)[0]


def parse(text: str):  # type: ignore[no-untyped-def]
    from trace_gaps.analysis.step_range import parse_step_range

    return parse_step_range(text)


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.integers(1, 40), min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
)
def test_percentiles_of_merged_windows_are_numpy_s_nearest(durations, cuts):
    values = np.array(durations, dtype=np.int64)
    names = pd.Categorical(["k"] * len(values))
    ops = pd.DataFrame({PID: 1, STAGE: 0, OP_KIND: "kernel", "from_graph": False, NAME: names})
    parts = []
    for piece in np.split(np.arange(len(values)), sorted(set(cuts))):
        counts = pd.Series(values[piece]).value_counts().sort_index()
        part = ops.iloc[: len(counts)].assign(duration_ns=counts.index, ops=counts.to_numpy())
        parts.append(part[DURATION_COLUMNS])
    (row,) = summarise_op_durations(merge_op_durations(parts)).to_dict("records")
    for column, q in (("p50_ns", 50), ("p90_ns", 90)):
        assert row[column] == np.percentile(values, q, method="nearest")
    assert (row["ops"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
        len(values),
        values.sum(),
        values.min(),
        values.max(),
    )


def test_json_has_kernels_only_when_asked_and_it_fits_the_schema():
    path = str(shipped_trace("spec_eager"))
    plain = runner.invoke(app, ["analyze", "-q", "-f", "json", path])
    asked = runner.invoke(app, ["analyze", "-q", "-f", "json", "--kernels", path])
    assert plain.exit_code == asked.exit_code == 0, asked.output
    assert all("kernels" not in p for p in json.loads(plain.stdout)["processes"])
    assert_matches_schema(asked.stdout)
    (process,) = json.loads(asked.stdout)["processes"]
    assert set(process["kernels"]["rows"][0]) == set(KernelRow.__dataclass_fields__)
    assert {**process, "kernels": None} == {
        **json.loads(plain.stdout)["processes"][0],
        "kernels": None,
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--steps", "5:3"],
        ["--steps", "3:3"],
        ["--steps", "-1:4"],
        ["--steps", ":"],
        ["--steps", "3-6"],
        ["--steps", "500:600"],  # no analysed step in it
        ["--kernels", "-f", "csv"],
    ],
)
def test_a_bad_step_range_or_kernels_as_csv_is_a_usage_error_in_one_line(args):
    result = runner.invoke(app, ["analyze", "-q", str(shipped_trace("spec_eager")), *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
