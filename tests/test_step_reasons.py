"""The words of how the steps were found and why steps were skipped (report/step_reasons.py)."""

from __future__ import annotations

import pytest

from trace_gaps.records.report import SkipReason, StepChoice, StepFound
from trace_gaps.report.step_reasons import describe_skip_reason, describe_step_choice


@pytest.mark.parametrize(
    ("choice", "name", "words"),
    [
        (
            StepChoice(StepFound.GIVEN, 12, 1),
            "decode_step",
            "given with --step (12 instances)",
        ),
        (
            StepChoice(StepFound.GIVEN, 12, 3),
            "step*",
            "given with --step (12 instances of 3 names)",
        ),
        (
            StepChoice(StepFound.MOST_FREQUENT, 19, 1),
            "decode_step",
            "found: the most frequent NVTX range (19 instances) that repeats, is not nested in "
            "another repeating range and contains other ranges",
        ),
        (
            StepChoice(StepFound.MOST_FREQUENT, 93, 31),
            "step[* bs=*]",
            "found: the most frequent NVTX range family (93 instances of 31 names) that repeats, "
            "is not nested in another repeating range and contains other ranges",
        ),
        (
            StepChoice(StepFound.CYCLE, 8, 1, ["forward", "sample"]),
            "preprocess (cycle)",
            "found: no range encloses an iteration, so a step is the cycle from one "
            "'preprocess' range to the next on its thread (8 instances; the sequence also "
            "repeats 'forward', 'sample'); time in the cycle outside every range is its own "
            "stage",
        ),
        (
            StepChoice(StepFound.NONE),
            None,
            "no NVTX range repeats at least 3 times around other ranges, and no sequence of "
            "sibling ranges repeats: each process is analysed as one step spanning its GPU "
            "work. Pass --step NAME to choose a range.",
        ),
    ],
)
def test_each_way_of_finding_the_steps_has_its_sentence(
    choice: StepChoice, name: str | None, words: str
) -> None:
    assert describe_step_choice(choice, name) == words


def test_each_skip_reason_has_its_words_and_they_sort_as_the_codes_do() -> None:
    words = [describe_skip_reason(reason, "3:6") for reason in SkipReason]
    assert words == [
        "",
        "--skip",
        "loads CUDA modules",
        "longer than 3x the median",
        "outside --steps 3:6",
    ]
    codes = [reason.value for reason in SkipReason]
    assert sorted(codes) == codes and sorted(words) == words
