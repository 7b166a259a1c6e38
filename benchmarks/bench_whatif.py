"""Predicted vs measured step time on real before/after pairs (docs/what-if.md).

    python benchmarks/bench_whatif.py            # the pairs in sample_traces/ and its corpus

For each pair: the "before" export analysed, the levers pulled on its replayed steps
(analysis/whatif.py), the predicted mean step against the "after" export's measured mean
step. A third column, drift, is how much an unchanged stage (named per pair) differs
between the two runs: the run-to-run host speed that no model of the before can know.
Also: the unchanged replay's error on every export, and the replay's cost.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import corpus_trace_paths  # noqa: E402
from trace_gaps.analysis.metrics import REPLAY_MODELS  # noqa: E402
from trace_gaps.analysis.pipeline import Analysis, AnalysisOptions  # noqa: E402
from trace_gaps.analysis.replay import parse_levers  # noqa: E402
from trace_gaps.analysis.whatif import check_replay, models_of, predict  # noqa: E402
from trace_gaps.model import Trace  # noqa: E402
from trace_gaps.run import analyse_export  # noqa: E402

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
]


def find(name: str) -> Path:
    plain = SAMPLES / f"{name}.sqlite"
    if plain.exists():
        return plain
    return next(p for p in corpus_trace_paths() if p.stem == name)


def mean_step(analysis: Analysis) -> int:
    steps = analysis.steps[~analysis.steps["is_warmup"]]
    return int((steps["end_ns"] - steps["start_ns"]).mean())


def stage_ms(trace: Trace, analysis: Analysis, stage: str) -> float:
    found = list(analysis.metrics[REPLAY_MODELS].values())
    names = analysis.stage_map.names
    ledger = predict(found, [], names, trace.info.graph_trace_mode, mean_step(analysis)).ledger
    return sum(e.ns_per_step for e in ledger if e.stage == stage) / 1e6


def main() -> None:
    cache: dict[str, tuple[Trace, Analysis]] = {}

    def get(name: str) -> tuple[Trace, Analysis]:
        if name not in cache:
            cache[name] = analyse_export(find(name), AnalysisOptions(), jobs=1)
        return cache[name]

    print(
        "| before | levers | after | measured before (ms) | predicted (ms) | measured after (ms) "
        "| error | drift of the unchanged stage | the fix |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|---|")
    for before, levers, after, unchanged, what in PAIRS:
        trace, analysis = get(before)
        models = list(analysis.metrics[REPLAY_MODELS].values())
        found = predict(
            models,
            parse_levers(levers),
            analysis.stage_map.names,
            trace.info.graph_trace_mode,
            mean_step(analysis),
            with_ledger=False,
        )
        after_trace, after_analysis = get(after)
        measured = mean_step(after_analysis)
        error = 100 * (found.predicted_ns - measured) / measured
        drift_before = stage_ms(trace, analysis, unchanged)
        drift_after = stage_ms(after_trace, after_analysis, unchanged)
        print(
            f"| {before} | `{levers}` | {after} | {mean_step(analysis) / 1e6:.2f} | "
            f"{found.predicted_ns / 1e6:.2f} | {measured / 1e6:.2f} | {error:+.1f} % | "
            f"{unchanged} {drift_before:.2f} → {drift_after:.2f} ms | {what} |"
        )
    print()
    print(
        "| export | process | steps replayed | measured (ms) | replayed (ms) | error | replay cost |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    paths = sorted(SAMPLES.glob("*.sqlite")) + corpus_trace_paths()
    for path in paths:
        trace, analysis = cache.get(path.stem) or analyse_export(path, AnalysisOptions(), jobs=1)
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
