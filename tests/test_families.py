"""Range families, step globs, cycle steps and named NVTX domains (families.py, steps.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.builders import note_facts
from tests.conftest import shipped_json
from tests.test_ledger import analyse
from trace_gaps.analysis.families import family_key, matches, phase_of, without_phase
from trace_gaps.analysis.steps import STEP_KIND
from trace_gaps.errors import StepNotFoundError
from trace_gaps.records.notes import NoteCode


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("step[DECODE bs=3 tokens=3]", "step[DECODE bs=* tokens=*]"),
        ("Iteration 57", "Iteration *"),
        ("model.layers.12.mlp", "model.layers.*.mlp"),
        ("aten::add", "aten::add"),
        ("fp8_gemm", "fp8_gemm"),
        ("sm90_xmma_gemm", "sm90_xmma_gemm"),
        ("gpu_model_runner: preprocess", "gpu_model_runner: preprocess"),
        ("copy x[1, 4096]", "copy x[*]"),
        ("obj 0x7f3ab0", "obj *"),
        ("mode=DECODE n=4", "mode=DECODE n=*"),
    ],
)
def test_a_family_replaces_numbers_and_parameters_only(name, family):
    assert family_key(name) == family


def test_phase_words_name_the_kind_and_join_the_step_family():
    assert phase_of("step[PREFILL bs=1 tokens=512]") == "PREFILL"
    assert phase_of("forward_decode") == "DECODE"
    assert phase_of("decoder_layer") == ""  # a word that starts with a phase word is not one
    assert without_phase("step[PREFILL bs=* tokens=*]") == without_phase(
        "step[DECODE bs=* tokens=*]"
    )


def test_step_patterns_are_exact_names_families_or_globs():
    names = pd.Index(
        ["step[DECODE bs=3 tokens=3]", "step[DECODE bs=4 tokens=4]", "step[PREFILL bs=1]"]
    )
    assert matches("step[DECODE bs=3 tokens=3]", names).tolist() == [True, False, False]
    assert matches("step[DECODE bs=* tokens=*]", names).tolist() == [True, True, False]
    assert matches("step[DECODE*", names).tolist() == [True, True, False]
    assert matches("step?PREFILL*", names).tolist() == [False, False, True]


def _batched(b, names):  # type: ignore[no-untyped-def]
    """One step per name, 10 us apart, each with a forward stage and one kernel."""
    for i, name in enumerate(names):
        o = i * 10_000
        b.range(name, o, o + 9_000).range("forward", o + 1_000, o + 8_000)
        b.launch("k", o + 1_100, o + 1_200, o + 2_000, o + 3_000)
    return b


def test_steps_whose_names_carry_the_batch_are_one_family(export_builder):
    names = [f"step[DECODE bs={i % 4 + 1} tokens={i % 4 + 1}]" for i in range(10)]
    analysis = analyse(_batched(export_builder(), names).write())
    assert analysis.selection.name == "step[DECODE bs=* tokens=*]"
    assert len(analysis.steps) == 10  # every batch size, not the most frequent name only


def test_prefill_and_decode_steps_are_one_step_family_of_two_kinds(export_builder):
    names = [
        "step[PREFILL bs=1 tokens=512]" if i % 4 == 0 else f"step[DECODE bs={i} tokens={i}]"
        for i in range(12)
    ]
    analysis = analyse(_batched(export_builder(), names).write())
    assert analysis.selection.name == "step[* bs=* tokens=*]"
    # Each kind analysed on its own, decode first; no step of one kind in the other's.
    assert [a.kind for a in analysis.by_kind()] == ["DECODE", "PREFILL"]
    kinds = {a.kind: a.steps[STEP_KIND].unique().tolist() for a in analysis.by_kind()}
    assert kinds == {"DECODE": ["DECODE"], "PREFILL": ["PREFILL"]}
    counts = analysis.kinds.set_index(STEP_KIND)
    assert (counts["steps"] + counts["skipped"]).to_dict() == {"DECODE": 9, "PREFILL": 3}


def test_a_step_glob_picks_its_members_and_a_miss_names_the_closest(export_builder):
    names = ["step[PREFILL bs=1]" if i % 3 == 0 else f"step[DECODE bs={i}]" for i in range(9)]
    path = _batched(export_builder(), names).write()
    assert len(analyse(path, step_name="step[DECODE*").steps) == 6
    assert len(analyse(path, step_name="step[DECODE bs=*]").steps) == 6
    with pytest.raises(StepNotFoundError, match=r"Closest: step\[DECODE bs=\*\]"):
        analyse(path, step_name="step[DECODE bs]")


def test_sibling_scopes_with_no_enclosing_range_make_cycle_steps(export_builder):
    # vLLM V1's scopes: preprocess, forward, sample, postprocess; the scheduler between them
    b = export_builder()
    for i in range(6):
        o = i * 20_000
        b.range("gpu_model_runner: preprocess", o, o + 2_000)
        b.range("gpu_model_runner: forward", o + 2_000, o + 12_000)
        b.range("gpu_model_runner: sample", o + 12_000, o + 14_000)
        b.range("gpu_model_runner: postprocess", o + 14_000, o + 15_000)
        b.launch("k", o + 2_100, o + 2_200, o + 3_000, o + 11_000)
    analysis = analyse(b.write())
    assert analysis.selection.cycle
    assert analysis.selection.name == "gpu_model_runner: preprocess (cycle)"
    spans = analysis.steps[["start_ns", "end_ns"]].to_numpy().tolist()
    # Each cycle runs to the next preprocess; the last to the end of its postprocess.
    assert spans[0] == [0, 20_000] and spans[-1] == [100_000, 115_000]
    stages = set(analysis.stage_map.names)
    assert {"gpu_model_runner: forward", "gpu_model_runner: sample"} <= stages


def test_ranges_of_a_user_domain_are_steps_and_library_domains_never(export_builder):
    b = export_builder().domain("my_server", 1).domain("CCCL", 2)
    for i in range(4):
        o = i * 10_000
        b.range("decode_step", o, o + 9_000, domain_id=1)
        b.range("forward", o + 1_000, o + 8_000, domain_id=1)
        b.range("cub::DeviceReduce", o + 1_500, o + 1_600, domain_id=2)
        b.launch("k", o + 1_100, o + 1_200, o + 2_000, o + 3_000)
    path = b.write()
    analysis = analyse(path)
    assert analysis.selection.name == "decode_step"
    assert "cub::DeviceReduce" not in analysis.stage_map.names
    assert len(analyse(path, step_name="decode_step").steps) == 4


def _serving(name: str):  # type: ignore[no-untyped-def]
    from tests.conftest import corpus_trace_paths

    found = [p for p in corpus_trace_paths() if p.stem == name]
    if not found:
        pytest.skip(f"{name} is not in the corpus")
    return found[0]


def _json(path: str, *args: str) -> dict:  # type: ignore[type-arg]
    return shipped_json(Path(path), *args)


def test_kind_picks_one_kind_and_a_missing_kind_names_those_present():
    from typer.testing import CliRunner

    from trace_gaps.cli import app

    path = _serving("serving_sglang")
    report = _json(str(path), "--kind", "extend")
    assert [p["kind"] for p in report["processes"]] == ["EXTEND"]
    assert [(k["kind"], k["steps"] + k["skipped"]) for k in report["kinds"]] == [
        ("DECODE", 68),
        ("EXTEND", 25),
    ]
    result = CliRunner().invoke(app, ["analyze", str(path), "--kind", "mixed"])
    assert result.exit_code == 1
    assert "kinds present: DECODE, EXTEND" in result.stderr


def test_domain_picks_the_ranges_of_one_domain():
    path = _serving("serving_named_domain")
    found = _json(str(path))
    assert found["processes"][0]["steps"]["name"] == "step[* bs=* tokens=*]"
    assert note_facts(path)[NoteCode.NAMED_DOMAINS_USED].numbers["domains"] == ("llm_server",)
    # No range in the default domain: an error naming the domains there (issue 44), as --kind.
    from typer.testing import CliRunner

    from trace_gaps.cli import app

    default_only = CliRunner().invoke(app, ["analyze", str(path), "--domain", "default"])
    assert default_only.exit_code == 1
    assert "pass one of these to --domain: llm_server" in default_only.stderr


def test_a_launching_thread_is_charged_to_the_step_thread_by_time():
    report = _json(str(_serving("serving_two_threads")))
    process = report["processes"][0]
    stages = {e["stage"] for e in process["ledger"] if e["bucket"] == "busy"}
    assert "(other thread)" not in stages and "wait_for_forward" in stages
    assert NoteCode.LAUNCHING_THREAD_BORROWED in [note["code"] for note in report["notes"]]
    assert process["candidates"][0]["evidence"]["launches_per_step"] > 200
