"""A change in the bytes the GPU moves, measured (issue 41): runahead.py's decode with its
weights, KV cache and activations in float32, then in bfloat16 (half the bytes), captured
with GPU metrics at 20 kHz on one H200 in one device call (sample_traces/corpus/gm_sync_*:
the synchronous graph loop; gm_ra_graph_*: the run-ahead graph loop;
sample_traces/generate/capture_41_42.sh).

The stage figures are recounted here without trace_gaps: every DRAM sample inside the
analysed steps' window, as bytes (its % × the peak × its period), over the steps, and the
speed of light as those bytes at the peak (TARGET_INFO_GPU.memoryBandwidth).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import shipped_json, shipped_trace

PAIRS = {
    "sync": ("gm_sync_fp32", "gm_sync_bf16"),
    "ra_graph": ("gm_ra_graph_fp32", "gm_ra_graph_bf16"),
}
DTYPE_BYTES = {"fp32": 4, "bf16": 2}

# runahead.py's model (specdecode.make_target): 8 layers, d_model 1536, SwiGLU d_ff 4096,
# vocab 32000 (tied embedding / LM head), a static KV cache of 576 slots.
LAYERS, D, FF, VOCAB, SLOTS = 8, 1536, 4096, 32000, 576
PARAMS = LAYERS * (D * 3 * D + D * D + D * 2 * FF + FF * D) + VOCAB * D
KV = LAYERS * 2 * SLOTS * D


# One metric's samples, (timestamp, value), in time order; the recounts' only source.
METRIC_SAMPLES = (
    "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n "
    "ON n.metricId = g.metricId AND n.typeId = g.typeId "
    "WHERE n.metricName = ? ORDER BY g.timestamp"
)


def _rows(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple]:  # type: ignore[type-arg]
    with sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True) as connection:
        return connection.execute(sql, params).fetchall()


def recount(name: str) -> dict[str, float]:
    """DRAM bytes read and written per analysed step and their time at peak bandwidth, from
    SQL alone: the samples inside [first analysed step's start, last step's end)."""
    path = shipped_trace(name)
    steps = np.array(
        _rows(
            path,
            'SELECT n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
            "WHERE coalesce(n.text, s.value) = 'step' ORDER BY n.start",
        ),
        dtype=np.float64,
    )[1:]  # the first step is the warm-up trace-gaps skips
    ((peak,),) = _rows(path, "SELECT memoryBandwidth FROM TARGET_INFO_GPU")
    lo, hi = steps[0, 0], steps[-1, 1]
    out = {"steps": float(len(steps)), "peak": float(peak)}
    for key, metric in (("read", "DRAM Read"), ("write", "DRAM Write")):
        samples = np.array(
            _rows(
                path,
                METRIC_SAMPLES,
                (f"{metric} Bandwidth [Throughput %]",),
            ),
            dtype=np.float64,
        )
        period = float(np.median(np.diff(samples[:, 0])))  # ns
        inside = (samples[:, 0] >= lo) & (samples[:, 0] < hi)
        total = (samples[inside, 1] / 100 * peak * period / 1e9).sum()
        out[key] = float(total / len(steps))
    out["sol_ns"] = (out["read"] + out["write"]) / peak * 1e9
    return out


def process(name: str) -> dict:  # type: ignore[type-arg]
    (only,) = shipped_json(shipped_trace(name))["processes"]
    return only


def forward_metrics(name: str) -> dict:  # type: ignore[type-arg]
    return next(s for s in process(name)["stages"] if s["name"] == "forward")["gpu_metrics"]


@pytest.mark.parametrize("name", [n for pair in PAIRS.values() for n in pair])
def test_the_step_figures_agree_with_a_recount_of_the_samples(name: str) -> None:
    counted = recount(name)
    sol = process(name)["speed_of_light"]
    stages = [s["gpu_metrics"] for s in process(name)["stages"] if s.get("gpu_metrics")]
    read = sum(s["dram_read_bytes_per_step"] for s in stages)
    # The recount also counts the idle floor between kernels, the tool only busy time.
    assert read == pytest.approx(counted["read"], rel=0.03), (read, counted)
    assert sol["dram_bytes_per_step"] == pytest.approx(counted["read"] + counted["write"], rel=0.03)
    assert sol["memory_sol_ns_per_step"] == pytest.approx(counted["sol_ns"], rel=0.03)
    assert counted["peak"] == pytest.approx(4.8e12, rel=0.01)  # the H200's HBM3e


@pytest.mark.parametrize("name", [n for pair in PAIRS.values() for n in pair])
def test_the_forward_reads_its_weights_and_kv_cache_once_a_step(name: str) -> None:
    expected = DTYPE_BYTES[name.rsplit("_", 1)[1]] * (PARAMS + KV)  # 580 MB in bf16
    read = forward_metrics(name)["dram_read_bytes_per_step"]
    assert 0.9 * expected < read < 1.1 * expected, (read, expected)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_half_the_bytes_halve_the_speed_of_light(pair: str) -> None:
    before, after = (process(n)["speed_of_light"] for n in PAIRS[pair])
    ratio = after["dram_bytes_per_step"] / before["dram_bytes_per_step"]
    assert 0.45 < ratio < 0.56, ratio
    assert after["sol_ns_per_step"] / before["sol_ns_per_step"] == pytest.approx(ratio, rel=0.02)
    # The GPU's busy time falls too, but less: the forward stays latency-bound
    # (DRAM under a fifth of peak), its small kernels no faster for being narrower.
    busy = after["busy_ns_per_step"] / before["busy_ns_per_step"]
    assert ratio < busy < 0.7, busy
    assert forward_metrics(PAIRS[pair][1])["dram_read_pct"] < 20


def test_the_sync_loops_step_at_the_gpus_limits_is_a_floor_the_after_stays_above() -> None:
    before, after = (process(n) for n in PAIRS["sync"])
    floor = before["speed_of_light"]["predicted_step_ns"]
    assert floor < after["steps"]["wall"]["mean_ns"] < before["steps"]["wall"]["mean_ns"]


@pytest.mark.xfail(
    strict=True,
    reason="the two run-ahead captures' hosts ran a factor of two apart (every shared CUDA "
    "call's median halved: cudaLaunchKernel 11.7 -> 6.0 us, cudaGraphLaunch 515 -> 288 us), so "
    "the fp32 loop is paced by its slow host and no GPU floor of it bounds the bf16 run's step "
    "(docs/what-if.md)",
)
def test_the_run_ahead_loops_step_at_the_gpus_limits_is_a_floor_the_after_stays_above() -> None:
    before, after = (process(n) for n in PAIRS["ra_graph"])
    floor = before["speed_of_light"]["predicted_step_ns"]
    assert floor < after["steps"]["wall"]["mean_ns"]
