"""Every real trace, run the way a new user runs it first: `trace-gaps analyze FILE`, no flags.

For each sample trace (ours and the corpus made by other people's code) and each peer
trace: the step range found, nearly every step analysed, and the top candidate equal to the
one recounted by sample_traces/generate/measure.py, which reads the export with plain SQL
and Python and imports nothing from trace_gaps.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import (
    REPRESENTATIVE_PEERS,
    ROOT,
    peer_trace_paths,
    sample_trace_paths,
    shipped_json,
    sweep,
)

SAMPLES = sample_trace_paths()
PEERS = peer_trace_paths()


def _measure() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "measure", ROOT / "sample_traces" / "generate" / "measure.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEASURE = _measure()


def analyse_with_no_flags(path: Path) -> dict:  # type: ignore[type-arg]
    return shipped_json(path)


def check(path: Path, step_name: str | None) -> None:
    report = analyse_with_no_flags(path)
    recount = MEASURE.ledger_top(str(path), step_name)
    assert {p["pid"] for p in report["processes"]} == set(recount)
    for process in report["processes"]:
        steps = process["steps"]
        assert steps["name"] == step_name
        total = steps["steps_analysed"] + steps["steps_skipped"]
        assert steps["steps_analysed"] >= total - max(3, total // 10), steps
        expected = recount[process["pid"]]
        assert steps["steps_analysed"] == expected["analysed"]
        # The recount ranks by time explained; the report ranks by what-if saving.
        top = min(process["candidates"], key=lambda c: c["explained_rank"])
        assert top["explained_rank"] == 1
        stage, bucket, ns_per_step = expected["top"]
        assert (top["stage"], top["bucket"]) == (stage, bucket)
        assert top["ns_per_step"] == pytest.approx(ns_per_step, rel=0.02)


# The serving corpus (sample_traces/README.md): how measure.py's recount forms its steps,
# the step family trace-gaps should find with no flags, and whether the steps come in kinds.
SERVING = {
    "serving_vllm_scopes": (
        {"cycle": "gpu_model_runner: preprocess"},
        "gpu_model_runner: preprocess (cycle)",
        False,
    ),
    "serving_batch_names": ({"step_glob": "step[*"}, "step[* bs=* tokens=*]", True),
    "serving_sglang": ({"step_glob": "run_batch"}, "run_batch", True),
    "serving_layerwise": ({"step_glob": "step[*"}, "step[* bs=* tokens=*]", True),
    "serving_layerwise_hooks": ({"step_glob": "run_batch"}, "run_batch", True),
    "serving_two_threads": ({"step_glob": "scheduler_step"}, "scheduler_step", False),
    "serving_named_domain": ({"step_glob": "step[*"}, "step[* bs=* tokens=*]", True),
    "serving_autograd_nvtx": ({"step_glob": "step[*"}, "step[* bs=* tokens=*]", True),
    # batch_names again, 30 served iterations with GPU metrics on an H100 (issue 41).
    "gm_serving": ({"step_glob": "step[*"}, "step[* bs=* tokens=*]", True),
}
SERVING_PATHS = [p for p in SAMPLES if p.stem in SERVING]
# By default one capture with kinds of steps and one without; every one in the thorough run.
SERVING_SWEEP = sweep(SERVING_PATHS, ("serving_batch_names", "serving_two_threads"))


@pytest.mark.parametrize(
    "path",
    sweep(
        [p for p in SAMPLES if p.stem not in SERVING],
        ("spec_eager", "spec_two_ranks", "hf_assisted"),
    ),
    ids=lambda p: p.stem,
)
def test_sample_with_no_flags_matches_the_recount(path: Path) -> None:
    check(path, STEP_NAMES.get(path.stem, "decode_step"))


# Captures whose step range is not decode_step (runahead.py's loops name theirs "step").
STEP_NAMES = {
    name: "step"
    for name in (
        "gm_sync_graph",
        "gm_ra_eager",
        "gm_sync_fp32",
        "gm_sync_bf16",
        "gm_ra_graph_fp32",
        "gm_ra_graph_bf16",
        "runahead_eager",
        "runahead_graph",
        "runahead_sync",
        "runahead_detok_m1",
        "runahead_graph_m1",
        "runahead3_detok",
        "runahead3_graph",
        "serving_worker_eager",
        "serving_worker_graph",
        "gp_eager",
        "gp_graph",
        "gp_graph_detok",
        "gp_graph_x2",
        "gp_graph_gm",
    )
}


def test_the_serving_corpus_is_there() -> None:
    assert {p.stem for p in SERVING_PATHS} == set(SERVING)


@pytest.mark.parametrize("path", SERVING_SWEEP, ids=lambda p: p.stem)
def test_serving_capture_with_no_flags_analyses_every_kind_apart(path: Path) -> None:
    """No flags: the step family found, each kind's iterations analysed but for 10 % of them
    or one warm-up step (gm_serving has 9 prefills), decode first in the headline; the kinds
    are the recount's."""
    how, step_name, has_kinds = SERVING[path.stem]
    report = analyse_with_no_flags(path)
    recount = MEASURE.serving(str(path), skip=0, **how)
    (thread,) = recount["threads"]
    kinds = {p["kind"] for p in report["processes"]}
    assert kinds == (set(thread["kinds"]) if has_kinds else {""})
    if has_kinds:
        assert report["processes"][0]["kind"] == "DECODE"
        assert "(DECODE steps)" in report["processes"][0]["headline"]
    for process in report["processes"]:
        steps = process["steps"]
        assert steps["name"] == step_name
        iterations = thread["kinds"][process["kind"]]["steps"] if has_kinds else thread["steps"]
        assert steps["steps_analysed"] + steps["steps_skipped"] == iterations
        assert steps["steps_analysed"] >= iterations - max(1, iterations // 10)


@pytest.mark.parametrize("path", SERVING_SWEEP, ids=lambda p: p.stem)
def test_serving_capture_each_kinds_ledger_matches_the_recount(path: Path) -> None:
    """With the recount's warm-up (--skip 3), each kind's step time, GPU busy time and
    per-stage time agree with measure.py within 2 % of the step."""
    how, _, has_kinds = SERVING[path.stem]
    report = shipped_json(path, "--skip", "3")
    (thread,) = MEASURE.serving(str(path), skip=3, **how)["threads"]
    for process in report["processes"]:
        kinds = thread["kinds"]
        expected = kinds[process["kind"]] if has_kinds else next(iter(kinds.values()))
        assert process["steps"]["steps_analysed"] == expected["measured"]
        wall_ms = process["steps"]["wall"]["mean_ns"] / 1e6
        assert wall_ms == pytest.approx(expected["mean_ms"], rel=0.001)
        ledger = process["ledger"]
        busy_ms = sum(e["ns_per_step"] for e in ledger if e["bucket"] == "busy") / 1e6
        assert busy_ms == pytest.approx(expected["busy_ms"], abs=0.02 * wall_ms)
        for stage, figures in expected["stages"].items():
            ours = sum(e["ns_per_step"] for e in ledger if e["stage"] == stage) / 1e6
            theirs = figures["wall_ms"] if stage != "(no stage)" else figures["idle_ms"]
            assert ours == pytest.approx(theirs, abs=0.02 * wall_ms), stage


@pytest.mark.skipif(not PEERS, reason="../shared/peer_traces is absent")
@pytest.mark.parametrize("path", sweep(PEERS, REPRESENTATIVE_PEERS), ids=lambda p: p.stem)
def test_peer_trace_with_no_flags_matches_the_recount(path: Path) -> None:
    # None of the peer exports has a repeating NVTX range around others: whole-process steps.
    check(path, None)


def test_the_corpus_is_there() -> None:
    names = {p.stem for p in SAMPLES}
    assert {"hf_assisted", "hf_greedy_static_eager", "hf_greedy_compiled", "tp_eager"} <= names
