"""GPU metrics per stage (issue 41): the samples' meaning measured on real H100 captures, an
independent recount of the stage figures, the speed of light, the busy verdicts, and the
exports without metrics left as they were but for one hint."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shipped_json, shipped_trace
from trace_gaps.analysis.findings import NEAR_PEAK_PCT, Case, bound_case
from trace_gaps.analysis.metrics import GPU_METRICS
from trace_gaps.analysis.pipeline import AnalysisOptions
from trace_gaps.figures import StageGpuMetrics
from trace_gaps.run import analyse_export
from trace_gaps.verdicts import CAPTURE_METRICS_HINT

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
