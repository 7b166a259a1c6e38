"""Golden reports of the real sample traces (sample_traces/*.sqlite), Markdown and JSON.

When an output change is intended, rewrite them with `pytest tests/test_samples.py
--update-golden` and read the diff: it is the review of what the change did to real reports.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import sample_trace_paths
from trace_gaps.analysis.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.nsys.load import load_trace
from trace_gaps.render.json import render_json
from trace_gaps.render.markdown import render_markdown
from trace_gaps.report import Report, build_report

GOLDEN = Path(__file__).parent / "golden" / "samples"
SAMPLES = sample_trace_paths()


@cache
def sample_report(path: Path) -> Report:
    trace = load_trace(path)
    return build_report(trace, analyse_trace(trace, AnalysisOptions()))


def check_golden(name: str, text: str, update_golden: bool) -> None:
    golden = GOLDEN / name
    if update_golden:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return
    assert golden.exists(), f"no golden file {golden}; run pytest --update-golden"
    expected = golden.read_text(encoding="utf-8")
    if expected != text:
        diff = "\n".join(
            difflib.unified_diff(
                expected.splitlines(), text.splitlines(), "golden", "now", lineterm="", n=1
            )
        )
        pytest.fail(f"{name} changed (run --update-golden if intended):\n{diff[:4000]}")


def test_every_sample_is_a_real_export_from_the_gpu_machine():
    assert len(SAMPLES) >= 5
    for path in SAMPLES:
        report = sample_report(path)
        assert report.export.nsys_version and report.export.nsys_version.startswith("2025.")
        # Captures on the 2-GPU machine list both GPUs, whichever they used.
        assert report.export.gpus in (["0: NVIDIA H200"], ["0: NVIDIA H200", "1: NVIDIA H200"])


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_markdown_report_matches_golden(path: Path, update_golden: bool) -> None:
    check_golden(f"{path.stem}.md", render_markdown(sample_report(path)), update_golden)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_json_report_matches_golden(path: Path, update_golden: bool) -> None:
    check_golden(f"{path.stem}.json", render_json(sample_report(path)), update_golden)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_step_ledger_adds_up_on_real_traces(path: Path) -> None:
    data = json.loads(render_json(sample_report(path)))
    for process in data["processes"]:
        assert (
            sum(e["ns_per_step"] for e in process["ledger"]) == process["steps"]["wall_ns"]["mean"]
        )
        per_step: dict[int, int] = {}
        for entry in process["step_ledger"]:
            per_step[entry["step_id"]] = per_step.get(entry["step_id"], 0) + entry["duration_ns"]
        assert per_step == {row["step_id"]: row["wall_ns"] for row in process["step_rows"]}


def by_stage(path_name: str) -> dict[str, object]:
    path = next((p for p in SAMPLES if p.stem == path_name), None)
    if path is None:
        pytest.skip(f"{path_name} not present")
    return {stage.name: stage for stage in sample_report(path).processes[0].stages}


def test_eager_sample_verify_is_eager_with_hundreds_of_launches():
    verify = by_stage("spec_eager")["verify_forward"]
    assert verify.execution == "eager"  # type: ignore[attr-defined]
    assert verify.launches_per_step["kernel"] > 300  # type: ignore[attr-defined]


def test_graph_samples_replay_verify_from_one_graph_launch_per_step():
    for name in ("spec_graph_node", "spec_graph_graphmode"):
        verify = by_stage(name)["verify_forward"]
        assert verify.launches_per_step["graph"] == 1  # type: ignore[attr-defined]
        assert verify.execution in ("graph", "mixed")  # type: ignore[attr-defined]


def test_bypassed_graph_sample_is_called_eager_although_a_graph_was_captured():
    path = next((p for p in SAMPLES if p.stem == "spec_graph_bypassed"), None)
    if path is None:
        pytest.skip("spec_graph_bypassed not present")
    verdicts = " ".join(c.verdict for c in sample_report(path).processes[0].candidates)
    assert "although this process captured one" in verdicts
