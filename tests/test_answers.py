"""The MCP tools' answers (answers.py, bounds.py): each small enough for an agent to read whole, on every
real capture, and the long lists paged or cut with a note, never silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPRESENTATIVE_SAMPLES, sample_trace_paths, shipped_json, sweep
from trace_gaps.mcp import answers, bounds


@pytest.mark.parametrize("path", sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES), ids=str)
def test_the_overview_is_under_4_kb_and_each_drill_down_under_16_kb(path: Path):
    report = shipped_json(path, "--kernels")
    overview = answers.overview_answer(report)
    assert bounds.size_of(overview) <= bounds.OVERVIEW_BYTES
    # Every section is there, with its headline and at least its first verdict (several
    # ranks or kinds: fewer verdicts each, said in `cut`).
    assert len(overview["sections"]) == len(report["processes"])
    for section, process in enumerate(report["processes"]):
        shown = overview["sections"][section]
        assert shown["headline"] == process["headline"]
        verdicts = [c["verdict"] for c in process["candidates"][:3]]
        assert shown["verdicts"] == verdicts[: len(shown["verdicts"])]
        assert shown["verdicts"] or not verdicts
        drill_downs = [
            answers.candidates_answer(report, section=section, offset=0, limit=100),
            answers.kernels_answer(report, stage=None, section=section, offset=0, limit=100),
            answers.notes_answer(report, offset=0, limit=100),
            *(
                answers.stage_answer(report, stage=name, section=section)
                for name in answers.stage_names(process)
            ),
        ]
        first = next(r["step_index"] for r in process["step_rows"] if not r["is_warmup"])
        drill_downs.append(answers.step_answer(report, index=first, section=section))
        for answer in drill_downs:
            assert bounds.size_of(answer) <= bounds.ANSWER_BYTES


def test_a_page_says_where_the_next_one_starts():
    report = shipped_json(sample_trace_paths()[0].parent / "spec_eager.sqlite", "--kernels")
    first = answers.kernels_answer(report, stage=None, section=0, offset=0, limit=5)
    assert len(first["kernels"]) == 5 and first["next_offset"] == 5
    rest = answers.kernels_answer(report, stage=None, section=0, offset=5, limit=100)
    assert rest["next_offset"] is None
    assert len(first["kernels"]) + len(rest["kernels"]) == first["total"]
    one_stage = answers.kernels_answer(
        report, stage="draft_forward", section=0, offset=0, limit=100
    )
    assert {k["stage"] for k in one_stage["kernels"]} == {"draft_forward"}


def test_a_question_the_report_cannot_answer_names_what_it_holds():
    report = shipped_json(sample_trace_paths()[0].parent / "spec_eager.sqlite", "--kernels")
    with pytest.raises(answers.AnswerError, match="its stages: .*verify_forward"):
        answers.stage_answer(report, stage="nosuch", section=0)
    with pytest.raises(answers.AnswerError, match="its steps: 0-14"):
        answers.step_answer(report, index=99, section=0)
    with pytest.raises(answers.AnswerError, match="no section 3: the report has 1"):
        answers.overview_answer(report) and answers.candidates_answer(
            report, section=3, offset=0, limit=1
        )


def test_an_answer_too_big_is_cut_by_its_longest_list_and_says_so():
    answer = {"small": [1, 2], "big": [{"name": "x" * 100} for _ in range(400)]}
    fitted = bounds.fit(answer, 4_000)
    assert bounds.size_of(fitted) <= 4_000
    assert len(fitted["small"]) == 2
    assert fitted["cut"][0] == {"path": "big", "kept": 200, "of": 400}
    assert fitted["cut"][-1]["kept"] == len(fitted["big"])


def test_ns_become_ms_and_long_names_are_shortened_in_the_middle():
    name = "void gemm<" + "T," * 400 + ">"
    assert bounds.compact({"wall_ns": 1_234_567, "ns_per_step": 2_000, "name": name, "x": []}) == {
        "wall_ms": 1.235,
        "ms_per_step": 0.002,
        "name": bounds.short_name(name),
    }
    assert len(bounds.short_name(name)) == bounds.NAME_CHARS
    assert answers.spans([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
