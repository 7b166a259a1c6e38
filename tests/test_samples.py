"""Golden reports of the real sample traces (sample_traces/*.sqlite), Markdown and JSON.

When an output change is intended, rewrite them with `pytest tests/test_samples.py
--update-golden` and read the diff: it is the review of what the change did to real reports.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from tests.conftest import (
    REPRESENTATIVE_SAMPLES,
    assert_matches_schema,
    sample_trace_paths,
    shipped_report,
    shipped_trace,
    sweep,
)
from trace_gaps.records.report import Report
from trace_gaps.render.json import render_json
from trace_gaps.render.markdown import escape_markdown, render_markdown

GOLDEN = Path(__file__).parent / "golden" / "samples"
# Every sample in the thorough run (CI's last stage); the representative ones by default.
SAMPLES = sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES)


def sample_report(path: Path) -> Report:
    return shipped_report(path)


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


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_the_sample_is_a_real_export_from_the_gpu_machine(path: Path) -> None:
    report = sample_report(path)
    assert report.export.nsys_version and report.export.nsys_version.startswith("2025.")
    # The GPU machine lends H200s and H100s; captures on the 2-GPU machine list both GPUs,
    # whichever they used.
    gpus = report.export.gpus
    assert 1 <= len(gpus) <= 2, gpus
    assert all(
        gpu in (f"{i}: NVIDIA H200", f"{i}: NVIDIA H100 80GB HBM3") for i, gpu in enumerate(gpus)
    ), gpus


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_markdown_report_matches_golden(path: Path, update_golden: bool) -> None:
    check_golden(f"{path.stem}.md", render_markdown(sample_report(path)), update_golden)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_json_report_matches_golden(path: Path, update_golden: bool) -> None:
    text = render_json(sample_report(path))
    assert_matches_schema(text)
    check_golden(f"{path.stem}.json", text, update_golden)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_every_step_ledger_adds_up_on_real_traces(path: Path) -> None:
    data = json.loads(render_json(sample_report(path)))
    for process in data["processes"]:
        assert (
            sum(e["ns_per_step"] for e in process["ledger"]) == process["steps"]["wall"]["mean_ns"]
        )
        per_step: dict[int, int] = {}
        for entry in process["step_ledger"]:
            per_step[entry["step_id"]] = per_step.get(entry["step_id"], 0) + entry["duration_ns"]
        assert per_step == {row["step_id"]: row["wall_ns"] for row in process["step_rows"]}


def by_stage(path_name: str) -> dict[str, object]:
    path = shipped_trace(path_name)
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


def test_bypassed_graph_sample_tells_only_verify_that_it_captured_a_graph():
    path = shipped_trace("spec_graph_bypassed")
    process = sample_report(path).processes[0]
    said = {c.stage for c in process.candidates if "although it captured one" in c.verdict}
    assert said == {"verify_forward"}
    [capture] = process.graphs.captures
    assert capture.nvtx_path == ["decode_step", "verify_forward"]
    assert capture.stage == "verify_forward"
    assert capture.replays_per_step == 0
    assert capture.node_count == 324  # 316 kernels and 8 memsets
    assert capture.instantiations == 1


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_the_sample_has_a_headline_first(path: Path) -> None:
    report = sample_report(path)
    for process in report.processes:
        assert process.headline.startswith(f"{process.steps.name} ")
        if any(
            r.pid == process.pid and r.unsplit is not None and r.unsplit.peers_decide_levers
            for r in report.ranks.processes
        ):
            # One rank alone, waiting for ranks whose exports are missing: nothing is priced,
            # the headline names the biggest lever by time explained (test_one_rank).
            assert "GPU busy" in process.headline and "biggest lever: " in process.headline
            assert all(c.saving_ns is None for c in process.candidates)
            continue
        if process.replay is not None and not process.replay.real_pairs:
            # A step shape no real pair has checked (analysis/replay/shapes.py): ranked by the
            # time each candidate explains, the headline names that biggest lever.
            assert "GPU busy" in process.headline and "biggest lever: " in process.headline
            assert all(c.saving_ns is None for c in process.candidates)
            continue
        assert "GPU busy" in process.headline and "biggest saving" in process.headline
        # One order (issue 30 item 3): the headline speaks of verdict #1's candidate.
        top = process.candidates[0]
        assert f"biggest saving: {top.stage} " in process.headline
        assert top.saving_ns is not None and top.saving_ns >= max(
            c.saving_ns or 0 for c in process.candidates
        )
    first_process = render_markdown(report).split("## Process", 1)[1].splitlines()
    assert first_process[2] == f"**{escape_markdown(report.processes[0].headline)}**"


def corpus_report(name: str) -> Report:
    return sample_report(shipped_trace(name))


def test_assisted_generation_top_finding_is_long_host_gaps_ending_in_a_library_load():
    # Each step: cudaGetDeviceProperties, ~65 ms of host code reading files, cuLibraryLoadData.
    process = corpus_report("hf_assisted").processes[0]
    top = process.candidates[0]
    assert (top.stage, top.bucket, top.kind) == ("target_verify", "idle", "long_host_gaps")
    assert "launch-bound" not in top.verdict
    assert "cuLibraryLoadData" in top.verdict
    main = top.evidence.long_host_gaps[0]
    assert (main.call_before, main.call_after) == ("cudaGetDeviceProperties", "cuLibraryLoadData")
    assert {"fopen", "fread"} <= set(main.os_calls)
    assert 60_000_000 < main.typical_ns < 70_000_000
    assert main.ends_in_code_load
    assert "long host gaps" in process.headline and "cuLibraryLoadData" in process.headline


def test_dynamic_sampling_forward_is_explained_by_a_long_gap_before_a_load_each_step():
    process = corpus_report("hf_sample_dynamic").processes[0]
    top = process.candidates[0]
    assert (top.stage, top.kind) == ("forward", "long_host_gaps")
    main = top.evidence.long_host_gaps[0]
    assert main.call_after == "cuLibraryLoadData" and main.gaps_per_step == 1
    assert 40_000_000 < main.typical_ns < 45_000_000


def test_sdpa_recompile_draft_is_explained_by_long_gaps_before_loads():
    top = corpus_report("spec_sdpa_recompile").processes[0].candidates[0]
    assert (top.stage, top.kind) == ("draft_forward", "long_host_gaps")
    assert top.evidence.long_host_gaps[0].call_after == "cuLibraryLoadData"


def test_compiled_graph_mode_prepare_inputs_is_neither_launch_bound_nor_told_of_a_capture():
    process = corpus_report("hf_greedy_compiled_graphmode").processes[0]
    prepare = next(
        c for c in process.candidates if (c.stage, c.bucket) == ("prepare_inputs", "idle")
    )
    assert prepare.kind != "launch_bound"
    assert "captured" not in prepare.verdict
    assert process.graphs.graph_events == 8 and process.graphs.captures == []


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_launch_bound_verdicts_on_the_sample_have_evenly_spread_gaps(path: Path) -> None:
    """Launch-bound means per-op dispatch: most short-gap host time in even gaps."""
    for process in sample_report(path).processes:
        stages = {s.name: s for s in process.stages}
        for candidate in process.candidates:
            if candidate.kind == "launch_bound":
                even = stages[candidate.stage].even_gap_fraction
                assert even is not None and even >= 0.5, (path.stem, candidate.stage)


def test_two_rank_sample_counts_graph_captures_per_process():
    report = corpus_report("tp_graph")
    assert [len(p.graphs.captures) for p in report.processes] == [1, 1]
    two = corpus_report("spec_two_ranks")
    assert [len(p.graphs.captures) for p in two.processes] == [0, 0]
