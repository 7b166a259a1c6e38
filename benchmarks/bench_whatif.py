"""Predicted vs measured step time on real before/after pairs (docs/what-if.md).

    python benchmarks/bench_whatif.py            # the pairs in sample_traces/ and its corpus
    python benchmarks/bench_whatif.py --pairs    # the pairs' table only

For each pair: the "before" export analysed, the levers pulled on its replayed steps
(analysis/replay/whatif.py), the predicted mean step against the "after" export's measured mean
step. Then the run-to-run host speed, which no model of the before can know: the host
time of a stage the fix left unchanged (named per pair: the host time between its calls
and inside its calls but syncs, which wait for the GPU), after ÷ before; and the
prediction made again at the after's host speed: the before's host time and call
durations (syncs excepted) scaled by that ratio after the levers are pulled, so the graph
launch's cost scales too (it tracks the host's speed: docs/what-if.md).
Also: the unchanged replay's error on every export, and the replay's cost.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import corpus_trace_paths  # noqa: E402
from trace_gaps.analysis.engine.metrics import REPLAY_MODELS  # noqa: E402
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions  # noqa: E402
from trace_gaps.analysis.replay.chain import replay_step  # noqa: E402
from trace_gaps.analysis.replay.codes import SYNC  # noqa: E402
from trace_gaps.analysis.replay.joint import joint_run, run_walls  # noqa: E402
from trace_gaps.analysis.replay.levers import parse_levers  # noqa: E402
from trace_gaps.analysis.replay.model import StepModel  # noqa: E402
from trace_gaps.analysis.replay.shapes import REPLAY_ERRORS, StepShape  # noqa: E402
from trace_gaps.analysis.replay.whatif import (  # noqa: E402
    check_replay,
    ends,
    models_of,
    priced_subset,
    pull,
    steady_wall,
)
from trace_gaps.diff.drift import LAUNCHES, at_speed  # noqa: E402
from trace_gaps.model import Trace  # noqa: E402
from trace_gaps.report.build import build_report  # noqa: E402
from trace_gaps.run.one import analyse_export  # noqa: E402

SAMPLES = ROOT / "sample_traces"
# (before, levers, after, an unchanged stage to measure the host drift by, what the fix was)
PAIRS = [
    (
        "repeat_eager_3",
        "verify_forward=graph",
        "whatif_spec_graph",
        "draft_forward",
        "spec decode: verify as a CUDA graph",
    ),
    (
        "repeat_eager_1",
        "verify_forward=graph",
        "whatif_spec_graph",
        "draft_forward",
        "the same, another run of the before",
    ),
    (
        "spec_eager",
        "verify_forward=graph",
        "spec_graph_node",
        "draft_forward",
        "the same, the samples' pair",
    ),
    (
        "whatif_plain_eager",
        "forward=graph",
        "whatif_plain_graph",
        "sample",
        "plain decode (8 layers, d 1536): forward as a CUDA graph",
    ),
    (
        "whatif_wide_eager",
        "forward=graph",
        "whatif_wide_graph",
        "sample",
        "plain decode (16 layers, d 1024): forward as a CUDA graph",
    ),
    (
        "whatif_plain_detok",
        "detokenize=nohost",
        "whatif_plain_eager",
        "forward",
        "detokenize (2 ms of host work) moved off the step",
    ),
    (
        "spec_sync",
        "prepare_for_verify=nosync,accept_sample_commit=nosync",
        "whatif_spec_graph",
        "draft_forward",
        "spec_sync's extra host syncs removed",
    ),
    (
        "whatif_spec_sync",
        "prepare_for_verify=nosync,accept_sample_commit=nosync",
        "whatif_spec_graph",
        "draft_forward",
        "the same, the same session's spec_sync",
    ),
    (
        "runahead_eager",
        "forward=graph",
        "runahead_graph",
        "sample",
        "run-ahead loop (H100): forward as a CUDA graph",
    ),
    (
        "runahead_sync",
        "sample=nosync",
        "runahead_eager",
        "forward",
        "run-ahead loop: the blocking .item() removed",
    ),
    (
        "runahead_detok_m1",
        "process_output=host87",
        "runahead_graph_m1",
        "forward",
        "run-ahead loop paced by its host: process_output's host work 1.5 -> 0.2 ms (87 % less)",
    ),
    (
        "runahead3_detok",
        "process_output=host87",
        "runahead3_graph",
        "forward",
        "the same, back to back on a third machine",
    ),
    (
        "tp_eager",
        "forward=graph,detokenize=nohost",
        "tp_graph",
        "sample",
        "2 ranks, NCCL (H200 x2): forward as a CUDA graph and rank 0's 3 ms detokenize removed",
    ),
    (
        "serving_worker_eager",
        "wait_for_worker/forward_decode=graph",
        "serving_worker_graph",
        "wait_for_worker/sample",
        "a worker thread's forward as a CUDA graph",
    ),
    (
        "gp_eager",
        "forward=graph",
        "gp_graph",
        "sample",
        "run-ahead loop paced by its GPU (H100, fp32, 4 wide layers): forward as a CUDA graph",
    ),
    (
        "gp_graph_detok",
        "process_output=nohost",
        "gp_graph",
        "sample",
        "the same graph loop: 1 ms of host work removed from process_output",
    ),
    (
        "gp_graph_x2",
        "forward=gpu50",
        "gp_graph",
        "sample",
        "the same graph loop: a forward run twice a step (the same kernels) run once",
    ),
]
# Pairs where the lever is only a guess at the change: fp32 -> bf16 halves the bytes, but the
# GPU time fell x0.61, not x0.5 (docs/what-if.md). They test the guess as much as the replay,
# so they are printed but left out of the replay's error by shape (analysis/replay/shapes.py).
GUESSED_PAIRS = [
    (
        "gm_sync_fp32",
        "forward=gpu50",
        "gm_sync_bf16",
        "process_output",
        "synchronous graph loop (H200, GPU metrics): fp32 -> bf16, half the DRAM bytes",
    ),
    (
        "gm_ra_graph_fp32",
        "forward=gpu50",
        "gm_ra_graph_bf16",
        "process_output",
        "run-ahead graph loop (H200, GPU metrics): fp32 -> bf16, half the DRAM bytes",
    ),
]


def find(name: str) -> Path:
    plain = SAMPLES / f"{name}.sqlite"
    if plain.exists():
        return plain
    return next(p for p in corpus_trace_paths() if p.stem == name)


def mean_step(analysis: Analysis) -> int:
    steps = analysis.steps[~analysis.steps["is_warmup"]]
    return int((steps["end_ns"] - steps["start_ns"]).mean())


def host_ns(models: list[StepModel], names: tuple[str, ...], stage: str) -> float:
    """The stage's host time per step: between its calls, and inside its calls but syncs."""
    code = names.index(stage)
    total = 0
    for m in models:
        total += int(m.item_ns[(m.item_call < 0) & (m.item_stage == code)].sum())
        total += int(m.call_ns[(m.call_stage == code) & (m.call_category != SYNC)].sum())
    return total / len(models)


def process_means(analysis: Analysis) -> dict[int, int]:
    steps = analysis.steps[~analysis.steps["is_warmup"]]
    means = (steps["end_ns"] - steps["start_ns"]).groupby(steps["pid"]).mean()
    return {int(pid): int(ns) for pid, ns in means.items()}


def predict_at_speed(trace: Trace, analysis: Analysis, levers: str, ratio: float) -> int:
    """The predicted mean step with the before's host running `ratio` times as long
    (diff_drift.at_speed: host gaps, calls but syncs, launch latency and a graph's first
    node, in the stages that launch GPU work, as diff scales drift) once the levers are
    pulled: the measured step times the levers' replay at that speed over the unchanged
    replay at the measured speed, on the steps the tool prices a candidate on (ranks in
    lockstep jointly). Not bounded by the measured step: the after's host may be the
    slower."""
    names, mode = analysis.stage_map.names, trace.info.graph_trace_mode
    pulled_levers = parse_levers(levers)
    everything = analysis.metrics[REPLAY_MODELS]
    # As diff measures and scales drift: the stages that launch GPU work; a stage that
    # launches nothing may be a timer or a spin (the workloads' host_work spins for a time).
    launching = frozenset(
        int(code)
        for m in everything.values()
        for code in m.call_stage[np.isin(m.call_category, LAUNCHES)].tolist()
    )
    means = process_means(analysis)
    run = joint_run(everything, analysis.collectives, means)
    if run is not None:
        scaled = [
            tuple(
                at_speed(pull(m, pulled_levers, names, mode), ratio, 1.0, launching)
                for m in it.models
            )
            for it in run.iterations
        ]
        walls, _ = run_walls(run, scaled)
        base = np.mean([max(r.wall_ns for r in results) for results in run.base])
        return int(run.run_ns * np.mean(walls) / base)
    models = priced_subset(list(everything.values()))
    walls = []
    for model in models:
        before = ends(replay_step(model))
        pulled = at_speed(pull(model, pulled_levers, names, mode), ratio, 1.0, launching)
        walls.append(steady_wall(before, replay_step(pulled)))
    replayed = np.mean([replay_step(m).wall_ns for m in models])
    return int(mean_step(analysis) * np.mean(walls) / replayed)


@dataclass(frozen=True)
class PairResult:
    """One real pair: the before's shape, what --what-if predicted, what the after measured."""

    shape: StepShape
    measured_before_ns: int
    predicted_ns: int
    measured_after_ns: int
    host_before_ns: float  # the unchanged stage's host time per step, before and after
    host_after_ns: float
    at_speed_ns: int  # the prediction at the after's host speed

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted_ns - self.measured_after_ns) / self.measured_after_ns

    @property
    def at_speed_error_pct(self) -> float:
        return 100 * (self.at_speed_ns - self.measured_after_ns) / self.measured_after_ns


Analysed = Callable[[str], tuple[Trace, Analysis]]


def analysed_once() -> Analysed:
    """Each capture of the pairs analysed once, by name."""
    cache: dict[str, tuple[Trace, Analysis]] = {}

    def get(name: str) -> tuple[Trace, Analysis]:
        if name not in cache:
            cache[name] = analyse_export(find(name), AnalysisOptions(), jobs=1)
        return cache[name]

    return get


def evaluate(before: str, levers: str, after: str, unchanged: str, get: Analysed) -> PairResult:
    trace, analysis = get(before)
    models = list(analysis.metrics[REPLAY_MODELS].values())
    # What the user reads: --what-if's prediction (the first section's; ranks in
    # lockstep share one).
    first = build_report(trace, analysis, what_if=levers).processes[0]
    found, replay = first.what_if, first.replay
    assert found is not None and replay is not None
    _, after_analysis = get(after)
    host_before = host_ns(models, analysis.stage_map.names, unchanged)
    after_models = list(after_analysis.metrics[REPLAY_MODELS].values())
    host_after = host_ns(after_models, after_analysis.stage_map.names, unchanged)
    return PairResult(
        # the before's step shape, as its report finds it (analysis/replay/shapes.py)
        shape=StepShape(replay.shape),
        measured_before_ns=mean_step(analysis),
        predicted_ns=found.predicted_ns,
        measured_after_ns=mean_step(after_analysis),
        host_before_ns=host_before,
        host_after_ns=host_after,
        at_speed_ns=predict_at_speed(trace, analysis, levers, host_after / host_before),
    )


def main() -> None:
    get = analysed_once()
    print(
        "| before | shape | levers | after | measured before (ms) | predicted (ms) "
        "| measured after (ms) | error | unchanged stage's host time (ms) "
        "| at the after's host speed (ms) | error | the fix |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---|")
    errors: dict[StepShape, list[tuple[float, float]]] = {}
    for before, levers, after, unchanged, what in PAIRS + GUESSED_PAIRS:
        r = evaluate(before, levers, after, unchanged, get)
        if (before, levers, after, unchanged, what) in PAIRS:
            errors.setdefault(r.shape, []).append((r.error_pct, r.at_speed_error_pct))
        ratio = r.host_after_ns / r.host_before_ns
        print(
            f"| {before} | {r.shape} | `{levers}` | {after} | {r.measured_before_ns / 1e6:.2f} | "
            f"{r.predicted_ns / 1e6:.2f} | {r.measured_after_ns / 1e6:.2f} | "
            f"{r.error_pct:+.1f} % | {unchanged} {r.host_before_ns / 1e6:.2f} → "
            f"{r.host_after_ns / 1e6:.2f} (×{ratio:.2f}) | {r.at_speed_ns / 1e6:.2f} | "
            f"{r.at_speed_error_pct:+.1f} % | {what} |"
        )
    print()
    print("| shape | pairs | largest error | at the after's host speed | declared (shapes.py) |")
    print("|---|---:|---:|---:|---|")
    for shape in StepShape:
        found_errors = errors.get(shape, [])
        raw = max((abs(e) for e, _ in found_errors), default=0.0)
        fair = max((abs(e) for _, e in found_errors), default=0.0)
        declared = REPLAY_ERRORS[shape]
        print(
            f"| {shape} | {len(found_errors)} | {raw:.1f} % | {fair:.1f} % | {declared.pairs} "
            f"pairs, within {declared.within_pct} % ({declared.drifted_pct} % drifted) |"
        )
    if "--pairs" in sys.argv[1:]:
        return
    print()
    print(
        "| export | process | steps replayed | measured (ms) | replayed (ms) | error | replay cost |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    paths = sorted(SAMPLES.glob("*.sqlite")) + corpus_trace_paths()
    for path in paths:
        trace, analysis = analyse_export(path, AnalysisOptions(), jobs=1)
        everything = analysis.metrics[REPLAY_MODELS]
        for pid in sorted({m.pid for m in everything.values()}):
            began = time.perf_counter()
            check = check_replay(models_of(everything, pid))
            cost = time.perf_counter() - began
            print(
                f"| {path.stem} | {pid} | {check.steps} | {check.measured_ns / 1e6:.2f} | "
                f"{check.replayed_ns / 1e6:.2f} | {check.error_pct:+.2f} % | {cost * 1e3:.0f} ms |"
            )


if __name__ == "__main__":
    main()
