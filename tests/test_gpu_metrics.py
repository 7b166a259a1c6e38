"""GPU metrics per stage (issue 41): the samples' meaning measured on real H100 captures, an
independent recount of the stage figures, the speed of light, the busy verdicts, and the
exports without metrics left as they were but for one hint."""

from __future__ import annotations

import sqlite3
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shipped_json, shipped_trace
from trace_gaps.analysis.engine.metrics import GPU_METRICS
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions, analyse_trace
from trace_gaps.analysis.replay.levers import Lever, LeverError, parse_levers
from trace_gaps.figures.gpu import StageGpuMetrics
from trace_gaps.model import Trace
from trace_gaps.nsys.load import load_trace
from trace_gaps.report.build import Report, build_report
from trace_gaps.report.findings import NEAR_PEAK_PCT, Case, bound_case
from trace_gaps.report.pricing import at_speed_of_light
from trace_gaps.report.verdicts import CAPTURE_METRICS_HINT
from trace_gaps.run.one import analyse_export

GRAPH, EAGER = "gm_sync_graph", "gm_ra_eager"

# runahead.py's model (specdecode.make_target): 8 layers, d_model 1536, SwiGLU d_ff 4096,
# vocab 32000 (tied embedding / LM head), bf16, a static KV cache of 576 slots.
LAYERS, D, FF, VOCAB, SLOTS, BF16 = 8, 1536, 4096, 32000, 576, 2
WEIGHT_BYTES = BF16 * (LAYERS * (D * 3 * D + D * D + D * 2 * FF + FF * D) + VOCAB * D)
KV_BYTES = BF16 * LAYERS * 2 * SLOTS * D


def _rows(path: Path, sql: str, params: tuple[object, ...] = ()) -> np.ndarray:
    with sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True) as connection:
        return np.array(connection.execute(sql, params).fetchall(), dtype=np.float64)


def _metric(path: Path, name: str) -> np.ndarray:
    return _rows(
        path,
        "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n "
        "ON n.metricId = g.metricId AND n.typeId = g.typeId WHERE n.metricName = ? "
        "ORDER BY g.timestamp",
        (name,),
    )


def _union(intervals: np.ndarray) -> np.ndarray:
    """Disjoint sorted intervals covering these, by a plain loop (the recount's own code)."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals.tolist()):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return np.array(merged).reshape(-1, 2)


def _overlap(intervals: np.ndarray, lo: float, hi: float) -> float:
    return float(
        np.clip(np.minimum(intervals[:, 1], hi) - np.maximum(intervals[:, 0], lo), 0, None).sum()
    )


def _stage_figures(name: str) -> dict[str, dict[str, object]]:
    process = shipped_json(shipped_trace(name))["processes"][0]
    return {s["name"]: s for s in process["stages"]}


def test_a_sample_is_the_mean_over_the_period_after_its_timestamp() -> None:
    # GR Active is the share of the period with work on the GPU: it fits the kernels' busy
    # share over [t, t + period) better than over the period before t or half a period on.
    path = shipped_trace(GRAPH)
    gr = _metric(path, "GR Active [Throughput %]")
    kernels = _union(_rows(path, 'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL'))
    times, values = gr[:, 0], gr[:, 1]
    period = float(np.median(np.diff(times)))
    active = (times > kernels[0, 0] - period) & (times < kernels[-1, 1])

    def misfit(shift: float) -> float:
        busy = np.array([_overlap(kernels, t + shift, t + shift + period) for t in times[active]])
        return float(np.abs(values[active] - 100 * busy / period).mean())

    after, before, halfway = misfit(0), misfit(-period), misfit(period / 2)
    assert after < before and after < halfway, (after, before, halfway)
    assert after < 5  # points of %


def test_the_graph_forward_reads_its_weights_and_kv_cache_once_a_step() -> None:
    forward = _stage_figures(GRAPH)["forward"]["gpu_metrics"]
    assert isinstance(forward, dict)
    expected = WEIGHT_BYTES + KV_BYTES  # 580 MB: read once per token at batch 1
    assert 0.9 * expected < forward["dram_read_bytes_per_step"] < 1.15 * expected, forward
    # Its DRAM traffic alone at peak bandwidth is its memory speed of light.
    assert forward["memory_sol_ns_per_step"] >= forward["dram_read_bytes_per_step"] / 3.36e12 * 1e9


@pytest.mark.parametrize("name", [GRAPH, EAGER])
def test_an_independent_recount_agrees_within_one_point(name: str) -> None:
    # Recounted from SQL: the kernels launched inside `forward` ranges (the launching call's
    # thread and time), cut to the analysed steps (all but the first, the warm-up), each
    # sample's DRAM read charged to the busy time in it, as docs/definitions.md says.
    path = shipped_trace(name)
    steps = _rows(
        path,
        'SELECT n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
        "WHERE coalesce(n.text, s.value) = 'step' ORDER BY n.start",
    )[1:]
    stage_kernels = _rows(
        path,
        'SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "JOIN NVTX_EVENTS n ON n.globalTid = r.globalTid AND r.start >= n.start "
        'AND r.start < n."end" LEFT JOIN StringIds s ON s.id = n.textId '
        "WHERE coalesce(n.text, s.value) = 'forward'",
    )
    every = _union(_rows(path, 'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL'))
    stage = _union(stage_kernels)
    clipped = np.array(
        [
            [max(a, lo), min(b, hi)]
            for a, b in stage.tolist()
            for lo, hi in steps.tolist()
            if min(b, hi) > max(a, lo)
        ]
    )
    read = _metric(path, "DRAM Read Bandwidth [Throughput %]")
    period = float(np.median(np.diff(read[:, 0])))
    charged = covered = 0.0
    for t, value in read.tolist():
        mine = _overlap(clipped, t, t + period)
        if mine:
            busy = _overlap(every, t, t + period)
            charged += min(100.0, value * period / busy) * mine
            covered += mine
    recounted = charged / covered
    reported = _stage_figures(name)["forward"]["gpu_metrics"]
    assert isinstance(reported, dict)
    assert abs(reported["dram_read_pct"] - recounted) <= 1.0, (reported, recounted)


def test_the_figures_do_not_depend_on_the_windows() -> None:
    path = shipped_trace(EAGER)
    _, whole = analyse_export(path, AnalysisOptions(), window_rows=None, jobs=1)
    _, windowed = analyse_export(path, AnalysisOptions(), window_rows=2_000, jobs=1)
    one, many = whole.metrics[GPU_METRICS], windowed.metrics[GPU_METRICS]
    assert one is not None and many is not None and windowed.windows > 3
    assert len(one.totals) and one.totals[["pid", "stage"]].equals(many.totals[["pid", "stage"]])
    # Each window rounds its integrals to whole ns: at most half a ns each.
    apart = np.abs(one.totals.to_numpy() - many.totals.to_numpy())
    assert apart.max() <= windowed.windows / 2, apart


def test_the_step_has_a_speed_of_light_below_its_gpu_busy_time() -> None:
    process = shipped_json(shipped_trace(GRAPH))["processes"][0]
    sol = process["speed_of_light"]
    stages = [s["gpu_metrics"] for s in process["stages"] if "gpu_metrics" in s]
    assert sol["sol_ns_per_step"] == sum(s["sol_ns_per_step"] for s in stages)
    assert 0 < sol["sol_ns_per_step"] < sol["busy_ns_per_step"] < sol["step_ns"]


def test_a_graph_forward_far_below_both_limits_is_called_latency_bound() -> None:
    process = shipped_json(shipped_trace(GRAPH))["processes"][0]
    forward = next(
        c for c in process["candidates"] if c["stage"] == "forward" and c["bucket"] == "busy"
    )
    metrics = _stage_figures(GRAPH)["forward"]["gpu_metrics"]
    assert isinstance(metrics, dict)
    assert metrics["dram_read_pct"] + metrics["dram_write_pct"] < NEAR_PEAK_PCT
    assert "latency-bound" in forward["verdict"]
    assert f"DRAM {metrics['dram_read_pct']:g} % read" in forward["verdict"]


def _gpu(read: float = 0, write: float = 0, issue: float = 0, tensor: float = 0) -> StageGpuMetrics:
    return StageGpuMetrics(
        samples_per_step=20.0,
        dram_read_pct=read,
        dram_write_pct=write,
        dram_read_bytes_per_step=0,
        dram_write_bytes_per_step=0,
        sm_active_pct=50.0,
        sm_issue_pct=issue,
        tensor_active_pct=tensor,
        gpc_clock_mhz=1980,
        memory_sol_ns_per_step=0,
        tensor_sol_ns_per_step=0,
        sol_ns_per_step=0,
        sol_fraction=None,
    )


def test_the_bound_is_the_limit_the_stage_is_near() -> None:
    assert bound_case(None) == Case.PLAIN
    assert bound_case(_gpu(read=70, write=10, tensor=20)) == Case.MEMORY_BOUND
    assert bound_case(_gpu(read=20, tensor=75)) == Case.COMPUTE_BOUND
    assert bound_case(_gpu(read=20, issue=80)) == Case.COMPUTE_BOUND
    assert bound_case(_gpu(read=65, tensor=80)) == Case.COMPUTE_BOUND
    assert bound_case(_gpu(read=30, issue=10, tensor=5)) == Case.LATENCY_BOUND


def test_an_export_without_metrics_only_gains_the_capture_hint() -> None:
    report = shipped_json(shipped_trace("spec_graph_node"))
    for process in report["processes"]:
        assert "speed_of_light" not in process
        assert all("gpu_metrics" not in stage for stage in process["stages"])
        busy = [c for c in process["candidates"] if c["bucket"] == "busy"]
        assert busy and all(c["verdict"].endswith(CAPTURE_METRICS_HINT) for c in busy)


# ------------------------------------------------------------------ the sol lever


@cache
def _analysed(name: str) -> tuple[Trace, Analysis]:
    """The capture analysed as analyze does it (load_trace alone reads no GPU metrics)."""
    return analyse_export(shipped_trace(name), AnalysisOptions(), jobs=1)


def _sol_report(name: str, levers: str | None = None) -> Report:
    trace, analysis = _analysed(name)
    return build_report(trace, analysis, what_if=levers)


def test_parse_levers_takes_sol() -> None:
    assert parse_levers("forward=sol") == [Lever("forward", "sol")]


def test_a_gpu_bound_graph_loop_at_its_speed_of_light_saves_most_of_its_busy_time() -> None:
    # gm_sync_graph: a graph-replayed forward, GPU busy 0.83 of a 2.04 ms step, its DRAM
    # bytes needing 0.19 ms at peak: the step at the GPU's limits loses most of the rest.
    (process,) = _sol_report(GRAPH).processes
    sol = process.speed_of_light
    assert sol is not None and sol.predicted_step_ns is not None
    assert sol.levers == ["forward=sol", "sample=sol"]
    saving = sol.step_ns - sol.predicted_step_ns
    removable = sol.busy_ns_per_step - sol.sol_ns_per_step
    assert 0 < sol.predicted_step_ns <= sol.step_ns
    assert 0.9 * removable < saving <= removable, (saving, removable)


def test_the_step_at_the_gpus_limits_is_the_what_if_of_every_stages_sol() -> None:
    # One price everywhere: the report's line and --what-if of the same levers.
    sol = _sol_report(GRAPH).processes[0].speed_of_light
    prediction = _sol_report(GRAPH, "forward=sol,sample=sol").processes[0].what_if
    assert sol is not None and prediction is not None
    assert prediction.predicted_ns == sol.predicted_step_ns
    assert prediction.saving_ns == sol.step_ns - prediction.predicted_ns >= 0
    assert not prediction.not_applicable


def test_a_launch_bound_loop_at_its_speed_of_light_saves_little() -> None:
    # gm_ra_eager: the same model eager behind a run-ahead host that paces it.
    (process,) = _sol_report(EAGER).processes
    sol = process.speed_of_light
    assert sol is not None and sol.predicted_step_ns is not None
    saving = sol.step_ns - sol.predicted_step_ns
    assert 0 <= saving < 0.05 * sol.step_ns
    assert saving < 0.1 * (sol.busy_ns_per_step - sol.sol_ns_per_step)


def test_sol_never_saves_more_than_it_removes_on_a_real_step() -> None:
    from trace_gaps.analysis.engine.metrics import REPLAY_MODELS
    from trace_gaps.analysis.replay.schedule import replay
    from trace_gaps.analysis.replay.whatif import pull, removed_ns

    trace, analysis = _analysed(GRAPH)
    names, mode = analysis.stage_map.names, trace.info.graph_trace_mode
    forward = names.index("forward")
    for model in list(analysis.metrics[REPLAY_MODELS].values())[:4]:
        changed = pull(model, [Lever("forward", "sol", op_scale=0.25)], names, mode)
        here = model.op_stage == forward
        # its ops a quarter as long, every other op as measured
        assert np.abs(changed.op_ns[here] - model.op_ns[here] / 4).max() <= 1
        assert (changed.op_ns[~here] == model.op_ns[~here]).all()
        saving = replay(model).wall_ns - replay(changed).wall_ns
        assert 0 < saving <= removed_ns(model, changed) + 1


def test_sol_without_gpu_metrics_does_not_apply_and_says_how_to_capture_them() -> None:
    path = shipped_trace("spec_eager")
    trace = load_trace(path)
    analysis = analyse_trace(trace, AnalysisOptions())
    with pytest.raises(LeverError, match="verify_forward=sol does not apply: no GPU metrics"):
        build_report(trace, analysis, what_if="verify_forward=sol")
    # Even beside a lever that applies: the export has no metrics at all.
    levers = "verify_forward=sol,verify_forward=graph"
    with pytest.raises(LeverError, match="--gpu-metrics-devices=all"):
        build_report(trace, analysis, what_if=levers)


def test_sol_takes_each_stages_own_speed_of_light() -> None:
    # A capture with metrics, a stage that runs no GPU op: nothing to change.
    with pytest.raises(LeverError, match="schedule runs no GPU op"):
        _sol_report(GRAPH, "schedule=sol")
    # Each sol lever gets its stage's speed of light over its busy time; None without one.
    names = ("forward", "sample")
    stages = _sol_report(GRAPH).processes[0].stages
    resolved = at_speed_of_light([Lever(n, "sol") for n in names], stages)
    assert all(lever.op_scale is not None and 0 < lever.op_scale < 1 for lever in resolved)
    unresolved = at_speed_of_light([Lever("forward", "sol")], [])
    assert unresolved == [Lever("forward", "sol", None)]
    # A section whose stage has no metrics lists its sol lever as not applicable, and why.
    from trace_gaps.analysis.engine.metrics import REPLAY_MODELS
    from trace_gaps.analysis.replay.levers import not_applicable
    from trace_gaps.report.levers import not_applicable_words

    _, analysis = _analysed(GRAPH)
    models = list(analysis.metrics[REPLAY_MODELS].values())
    skipped = not_applicable(unresolved[0], analysis.stage_map.names, models)
    assert skipped is not None and skipped.reason == "no_gpu_metrics"
    assert "--gpu-metrics-devices=all" in not_applicable_words(skipped)
    assert not_applicable(resolved[0], analysis.stage_map.names, models) is None
