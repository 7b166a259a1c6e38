"""Every real trace, run the way a new user runs it first: `trace-gaps analyze FILE`, no flags.

For each sample trace (ours and the corpus made by other people's code) and each peer
trace: the step range found, nearly every step analysed, and the top candidate equal to the
one recounted by sample_traces/generate/measure.py, which reads the export with plain SQL
and Python and imports nothing from trace_gaps.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, peer_trace_paths, sample_trace_paths
from trace_gaps.cli import app

runner = CliRunner()
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
    result = runner.invoke(app, ["analyze", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


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
        top = process["candidates"][0]
        stage, bucket, ns_per_step = expected["top"]
        assert (top["stage"], top["bucket"]) == (stage, bucket)
        assert top["ns_per_step"] == pytest.approx(ns_per_step, rel=0.02)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_with_no_flags_matches_the_recount(path: Path) -> None:
    check(path, "decode_step")


@pytest.mark.skipif(not PEERS, reason="../shared/peer_traces is absent")
@pytest.mark.parametrize("path", PEERS, ids=lambda p: p.stem)
def test_peer_trace_with_no_flags_matches_the_recount(path: Path) -> None:
    # None of the peer exports has a repeating NVTX range around others: whole-process steps.
    check(path, None)


def test_the_corpus_is_there() -> None:
    names = {p.stem for p in SAMPLES}
    assert {"hf_assisted", "hf_greedy_static_eager", "hf_greedy_compiled", "tp_eager"} <= names
