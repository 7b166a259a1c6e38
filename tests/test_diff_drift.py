"""The machine's drift told apart from the code's change (diff_drift.py), on real captures.

sample_traces/drift/: one synchronous decode (forward replayed from a CUDA graph) captured
unchanged six times in a row on one H100 (same_1..6: 1.83 to 2.22 ms/step), with a CPU
stage `postprocess` of 0.08 ms added (cpu5_1..3) and with an MLP 8 % wider (gpu5_1..3).
And on one H200, interleaved: unchanged three times (h200_same_1..3) and with the MLP twice
as wide three times (h200_mlp2x_1..3: +82 µs/step of GPU time, 3.7 to 3.9 % of the step),
while the host ran up to twice as fast from one capture to the next. And on one H100,
likewise: h100_same_1..3 and with the MLP three times as wide (h100_mlp3x_1..3: +197 µs/step,
10.4 to 11.1 % of the step), the host up to twice as slow. The second H100 set (h100b_*, the
MLP twice as wide: issue 42's 5 %) is tested in test_diff_drift_h100b.py.
"""

from __future__ import annotations

import itertools
import json
from functools import cache

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, corpus_trace_paths, drift_trace_paths
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.diff.build import ComparedSide, Diff, diff_sides, is_slower_than
from trace_gaps.diff.drift import CAPTURES_TO_SETTLE, agreed_ratio
from trace_gaps.diff.runs import Run, analyse_run, compare_runs
from trace_gaps.render.diff import render_diff_json, render_diff_markdown

CAPTURES = drift_trace_paths()
SAME = [f"same_{i}" for i in range(1, 7)]
CPU = ["cpu5_1", "cpu5_2", "cpu5_3"]
H200_SAME = ["h200_same_1", "h200_same_2", "h200_same_3"]
H200_GPU = ["h200_mlp2x_1", "h200_mlp2x_2", "h200_mlp2x_3"]
H100_SAME = ["h100_same_1", "h100_same_2", "h100_same_3"]
H100_GPU = ["h100_mlp3x_1", "h100_mlp3x_2", "h100_mlp3x_3"]
H100B_SAME = ["h100b_same_1", "h100b_same_2", "h100b_same_3"]  # tests/test_diff_drift_h100b.py
H100B_GPU = ["h100b_mlp2x_1", "h100b_mlp2x_2", "h100b_mlp2x_3"]
runner = CliRunner()


@cache
def run(name: str) -> Run:
    path = CAPTURES[name] if name in CAPTURES else {p.stem: p for p in corpus_trace_paths()}[name]
    return analyse_run(path, AnalysisOptions(), keep_models=True)


def one_a_side(before: str, after: str) -> Diff:
    b, a = run(before), run(after)
    return diff_sides(ComparedSide(b[0], speeds=b[1]), ComparedSide(a[0], speeds=a[1]))


def test_the_captures_ship_with_the_repo() -> None:
    h100 = [*H100_SAME, *H100_GPU, *H100B_SAME, *H100B_GPU]
    assert sorted(CAPTURES) == sorted(
        [*SAME, *CPU, "gpu5_1", "gpu5_2", "gpu5_3", *H200_SAME, *H200_GPU, *h100]
    )


def test_no_unchanged_pair_trips_the_gate_though_the_step_time_alone_would() -> None:
    step_alone = 0
    for before, after in itertools.permutations(SAME, 2):
        diff = one_a_side(before, after)
        (process,) = diff.processes
        assert not is_slower_than(diff, 3), (before, after, process.drift)
        assert process.drift is not None
        # The machine explains the step change to within 1.5 % of the step.
        residual = process.wall.change_ns - process.drift.machine_ns
        assert abs(residual) < 0.015 * process.before.wall.mean_ns, (before, after)
        low = process.wall.ci_pct.low_pct if process.wall.ci_pct else 0.0
        step_alone += low > 3
    # Without the drift taken out, the gate would have tripped on unchanged code.
    assert step_alone > 0


def test_the_slower_host_is_named_on_the_stages_that_launch() -> None:
    # same_6 ran the fastest steps and same_1 the slowest, the GPU at one speed throughout.
    (process,) = one_a_side("same_6", "same_1").processes
    drift = process.drift
    assert drift is not None
    assert drift.host.stages == ["forward", "sample"]  # schedule and process_output launch nothing
    assert drift.host.time_change_pct is not None and drift.host.time_change_pct > 50
    assert drift.gpu.time_change_pct is not None and abs(drift.gpu.time_change_pct) < 1
    assert drift.code.is_beyond_noise is False


def test_a_cpu_stage_added_is_the_codes_part_and_trips_the_gate_at_three_a_side() -> None:
    diff = compare_runs([run(n) for n in SAME[:3]], [run(n) for n in CPU], ("same_1", "cpu5_1"))
    assert diff.runs is not None and diff.code_runs is not None
    # The raw step time got faster (the host ran faster in the cpu5 captures).
    assert diff.runs.change_ns < 0
    # The code's part is the postprocess stage's time, as the after reports' ledgers give it.
    added = [
        next(s for s in r[0].processes[0].stages if s.name == "postprocess") for r in map(run, CPU)
    ]
    stage_ns = sum(s.busy_ns_per_step + s.idle_ns_per_step for s in added) / len(added)
    assert abs(diff.code_runs.change_ns - stage_ns) < 0.3 * stage_ns
    assert is_slower_than(diff, 3)
    assert not is_slower_than(diff, 10)


def test_unchanged_captures_three_a_side_never_trip() -> None:
    for before in itertools.combinations(SAME, 3):
        after = [n for n in SAME if n not in before]
        diff = compare_runs(
            [run(n) for n in before], [run(n) for n in after], (before[0], after[0])
        )
        assert diff.code_runs is not None and diff.code_runs.is_beyond_noise is False, before
        assert not is_slower_than(diff, 3)


def test_graph_to_eager_trips_with_one_capture_a_side() -> None:
    if "whatif_plain_graph" not in {p.stem for p in corpus_trace_paths()}:
        pytest.skip("the corpus is absent")
    diff = one_a_side("whatif_plain_graph", "whatif_plain_eager")
    assert is_slower_than(diff, 3)
    (process,) = diff.processes
    assert process.drift is not None and process.drift.code.is_beyond_noise is True


def test_one_capture_a_side_says_the_run_noise_is_unknown_and_how_many_settle_it() -> None:
    result = runner.invoke(app, ["diff", str(CAPTURES["same_6"]), str(CAPTURES["same_1"])])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "No code change beyond noise; the host ran ×" in text
    assert f"{CAPTURES_TO_SETTLE} captures a side (--repeats)" in text


def test_json_carries_the_split_and_validates_and_markdown_says_it_in_one_line() -> None:
    diff = one_a_side("same_2", "cpu5_1")
    data = json.loads(render_diff_json(diff))
    schema = json.loads((ROOT / "docs" / "diff.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    drift = data["processes"][0]["drift"]
    assert (
        drift["machine_ns"] + drift["code"]["change_ns"]
        == data["processes"][0]["wall"]["change_ns"]
    )
    lines = [line for line in render_diff_markdown(diff).splitlines() if "the machine" in line]
    assert len(lines) == 1 and lines[0].startswith("The code +")


def gpu_busy_ns(name: str) -> float:
    (process,) = run(name)[0].processes
    return sum(s.busy_ns_per_step for s in process.stages)


def test_h200_unchanged_pairs_name_no_code_change() -> None:
    for before, after in itertools.permutations(H200_SAME, 2):
        diff = one_a_side(before, after)
        (process,) = diff.processes
        assert process.drift is not None
        assert process.drift.code.is_beyond_noise is False, (before, after)
        assert abs(process.drift.code.change_pct or 0.0) < 1.5, (before, after)
        assert not is_slower_than(diff, 3)


def test_h200_gpu_regression_is_the_codes_though_the_host_hides_it_in_the_step_time() -> None:
    added = np.mean([gpu_busy_ns(n) for n in H200_GPU]) - np.mean(
        [gpu_busy_ns(n) for n in H200_SAME]
    )
    assert 70e3 < added < 95e3  # the wider MLP: +82 µs/step of GPU time, whatever the host
    beyond = 0
    for before in H200_SAME:
        for after in H200_GPU:
            diff = one_a_side(before, after)
            (process,) = diff.processes
            assert process.drift is not None
            # Named the code's, 0.83 to 1.12 of what the GPU added (the GPU's speed measured
            # on each op's place in its stage: by name, the elementwise kernels the MLP shares
            # with the attention grew and 4 of the 9 pairs read x1.03 of it as the machine's);
            # though the step time alone reads up to 17 % faster.
            assert 0.8 * added < process.drift.code.change_ns < 1.2 * added, (before, after)
            beyond += bool(process.drift.code.is_beyond_noise)
    assert beyond >= 6  # 7 of the 9 pairs, one capture a side
    diff = compare_runs(
        [run(n) for n in H200_SAME], [run(n) for n in H200_GPU], (H200_SAME[0], H200_GPU[0])
    )
    assert diff.runs is not None and diff.code_runs is not None
    assert diff.runs.change_ns < 0  # the raw step time over the runs: faster
    assert diff.code_runs.is_beyond_noise is True
    assert 0.8 * added < diff.code_runs.change_ns < 1.2 * added
    # +3.3 %, 95 % CI +2.4 to +4.2 %: caught by a 2 % gate, not by a 3 % one.
    assert is_slower_than(diff, 2) and not is_slower_than(diff, 3)


def test_h100_unchanged_pairs_name_no_code_change_though_the_host_drifted() -> None:
    step_alone = 0
    for before, after in itertools.permutations(H100_SAME, 2):
        diff = one_a_side(before, after)
        (process,) = diff.processes
        assert process.drift is not None
        assert process.drift.code.is_beyond_noise is False, (before, after)
        assert abs(process.drift.code.change_pct or 0.0) < 1.0, (before, after)  # -0.5 to +0.3
        assert not is_slower_than(diff, 3)
        low = process.wall.ci_pct.low_pct if process.wall.ci_pct else 0.0
        step_alone += low > 3
    # h100_same_1 -> _3: the host x1.34, the step +6.8 %; the step time alone would trip.
    assert step_alone == 1


def test_h100_gpu_regression_is_the_codes_and_trips_the_gate_one_and_three_a_side() -> None:
    added = np.mean([gpu_busy_ns(n) for n in H100_GPU]) - np.mean(
        [gpu_busy_ns(n) for n in H100_SAME]
    )
    assert 185e3 < added < 210e3  # the MLP 3x wide: +197 µs/step of GPU time
    for before in H100_SAME:
        for after in H100_GPU:
            diff = one_a_side(before, after)
            (process,) = diff.processes
            assert process.drift is not None
            # The GPU read at one speed (x1.00): the MLP's ops are too few of the 335 places
            # to be taken for the machine, though the host ran x0.80 to x2.01 as long.
            assert abs(process.drift.gpu.time_change_pct or 0.0) < 1, (before, after)
            # The code's part is 0.89 to 1.02 of what the GPU added (the lowest against
            # h100_mlp3x_1, whose host ran slowest), beyond noise in every pair.
            assert 0.85 * added < process.drift.code.change_ns < 1.1 * added, (before, after)
            assert process.drift.code.is_beyond_noise is True, (before, after)
            assert is_slower_than(diff, 3), (before, after)
    diff = compare_runs(
        [run(n) for n in H100_SAME], [run(n) for n in H100_GPU], (H100_SAME[0], H100_GPU[0])
    )
    assert diff.runs is not None and diff.code_runs is not None
    # The step time alone over the runs, +14.9 % (95 % CI -8.8 to +38.7 %), cannot gate.
    assert diff.runs.is_beyond_noise is False
    assert diff.code_runs.is_beyond_noise is True
    assert 0.93 * added < diff.code_runs.change_ns < 1.05 * added  # +193.0 µs, 0.98
    # +10.9 %, 95 % CI +9.5 to +12.4 %: caught by a 9 % gate, not by a 10 % one.
    assert is_slower_than(diff, 3) and is_slower_than(diff, 9) and not is_slower_than(diff, 10)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ([100.0, 100.0, 100.0], [150.0, 90.0, 120.0], 1.0),  # parts disagree on the direction
        ([100.0, 300.0], [120.0, 390.0], 1.275),  # both slower: the whole, 510 / 400
        # one part of five much slower (the code's): held to the middle half
        ([100.0] * 5, [110.0, 110.0, 110.0, 110.0, 400.0], 1.10),
        ([100.0], [200.0], None),  # one part cannot tell the machine from the code
    ],
)
def test_the_agreed_ratio(before: list[float], after: list[float], expected: float | None) -> None:
    found = agreed_ratio(before, after)
    assert found == (None if expected is None else pytest.approx(expected))
