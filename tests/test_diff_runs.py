"""`diff --repeats` on real repeated captures of unchanged code, and repeats told from ranks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.conftest import corpus_trace_paths
from trace_gaps.cli import app

CORPUS = {p.stem: p for p in corpus_trace_paths()}
runner = CliRunner()

pytestmark = pytest.mark.skipif(
    not {"repeat_eager_1", "repeat_eager_2", "repeat_eager_3", "tp_rank0"} <= set(CORPUS),
    reason="the corpus is absent",
)


def _glob(*stems: str) -> str:
    """A quoted glob naming these corpus exports (they share one folder)."""
    folder = CORPUS[stems[0]].parent
    if len(stems) == 1:
        return str(CORPUS[stems[0]])
    return str(folder / f"{stems[0][:-1]}[{''.join(s[-1] for s in stems)}].sqlite")


# Each capture in turn as the after side; the first rotation only by default (the same check on
# the same captures), every one in the thorough run.
ROTATIONS = [
    (("repeat_eager_1", "repeat_eager_2"), ("repeat_eager_3",)),
    (("repeat_eager_2", "repeat_eager_3"), ("repeat_eager_1",)),
    (("repeat_eager_1", "repeat_eager_3"), ("repeat_eager_2",)),
]


@pytest.mark.parametrize(
    ("before", "after"),
    [ROTATIONS[0], *(pytest.param(*r, marks=pytest.mark.thorough) for r in ROTATIONS[1:])],
)
def test_repeats_of_unchanged_code_never_trip_the_gate(
    before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    result = runner.invoke(
        app,
        ["diff", "--repeats", _glob(*before), _glob(*after), "-f", "json", "--fail-if-slower", "3"],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert len(runs["before_run_ns"]) == 2 and len(runs["after_run_ns"]) == 1
    assert runs["is_beyond_noise"] is False


def test_one_capture_a_side_passes_once_the_machines_drift_is_taken_out() -> None:
    # The step time alone calls run-to-run noise a change (+32 %, beyond the step bootstrap);
    # the host ran slower in the after capture, and the code's part stays within the gate.
    result = runner.invoke(
        app,
        [
            "diff",
            str(CORPUS["repeat_eager_2"]),
            str(CORPUS["repeat_eager_3"]),
            "-f",
            "json",
            "--fail-if-slower",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    (process,) = json.loads(result.stdout)["processes"]
    assert process["wall"]["is_beyond_noise"] is True
    assert process["wall"]["ci_pct"]["low_pct"] > 3
    drift = process["drift"]
    assert drift["host"]["time_change_pct"] > 10
    assert drift["machine_ns"] > process["wall"]["change_ns"] / 2


def test_repeats_without_the_flag_and_ranks_with_it_are_refused() -> None:
    repeats = _glob("repeat_eager_1", "repeat_eager_2")
    result = runner.invoke(app, ["diff", repeats, str(CORPUS["repeat_eager_3"])])
    assert result.exit_code == 1 and "pass --repeats" in result.stderr
    ranks = _glob("tp_rank0", "tp_rank1")
    result = runner.invoke(app, ["diff", "--repeats", ranks, ranks])
    assert result.exit_code == 1 and "ranks of one run" in result.stderr
