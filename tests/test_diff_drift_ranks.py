"""The machine's drift with several ranks a side (issue 42 item 4), on the corpus's real TP=2
captures: the same eager decode captured twice, once as one nsys session over both ranks
(`tp_eager`, 15.4 ms/step) and once as a session per rank (`tp_rank0` + `tp_rank1`, 17.4
ms/step: the pace setter's host ×1.20 slower), and the forward as a CUDA graph (`tp_graph`).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, corpus_trace_paths
from trace_gaps.cli import app
from trace_gaps.diff.drift import run_machine_ns

runner = CliRunner()


def _path(name: str) -> str:
    return str({p.stem: p for p in corpus_trace_paths()}[name])


def _ranks() -> str:
    """Both per-rank exports, as a user names them: a quoted glob."""
    return str(
        next(p for p in corpus_trace_paths() if p.stem == "tp_rank0").parent / "tp_rank*.sqlite"
    )


@cache
def diff(before: str, after: str) -> tuple[int, dict[str, Any], str]:
    sides = [_ranks() if side == "ranks" else _path(side) for side in (before, after)]
    result = runner.invoke(app, ["diff", *sides, "--format", "json", "--fail-if-slower", "3"])
    return result.exit_code, json.loads(result.stdout), result.stderr


@pytest.mark.parametrize(("before", "after"), [("tp_eager", "ranks"), ("ranks", "tp_eager")])
def test_an_unchanged_two_rank_run_trips_no_gate_though_its_step_time_alone_would(
    before: str, after: str
) -> None:
    code, out, stderr = diff(before, after)
    run = out["run"]
    # The run's step changed by 11 to 13 % beyond noise: the machine, not the code.
    assert abs(run["wall"]["change_pct"]) > 10 and run["wall"]["is_beyond_noise"], run["wall"]
    assert run["code"]["is_beyond_noise"] is False, run["code"]
    assert abs(run["code"]["change_pct"]) < abs(run["wall"]["change_pct"]) / 2
    # The machine's part has the step change's sign and most of its size.
    assert run["machine_ns"] * run["wall"]["change_ns"] > 0
    assert code == 0, stderr
    # Every rank's speed is measured, on the side of several exports too.
    assert len(out["processes"]) == 2
    assert all(p["drift"] is not None for p in out["processes"])
    assert {p["drift"]["host"]["time_change_pct"] is not None for p in out["processes"]} == {True}


def test_the_slower_run_trips_the_gate_on_the_code_s_part() -> None:
    code, out, stderr = diff("tp_graph", "tp_eager")
    assert code == 3
    assert "the code's part of the run's step time" in stderr
    assert out["run"]["code"]["ci_pct"]["low_pct"] > 3


def test_the_run_split_is_in_the_schema_and_the_markdown() -> None:
    _, out, _ = diff("tp_eager", "ranks")
    schema = json.loads((ROOT / "docs" / "diff.schema.json").read_text())
    jsonschema.validate(out, schema)
    result = runner.invoke(app, ["diff", _path("tp_eager"), _ranks(), "--format", "md"])
    assert result.exit_code == 0
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("The run")]
    assert "no code change beyond noise" in line and "the machine +" in line
    # Each rank's line names its pair.
    assert (
        sum(line.startswith("Process ") and "→" in line for line in result.stdout.splitlines()) >= 2
    )


def test_a_rank_whose_host_slowed_takes_the_pace() -> None:
    # Rank 0 set the pace at 10 ms (own pace), rank 1 at 8 ms; at the after's speeds rank 0
    # runs 9 and rank 1 12: the run goes from 10 to 12.
    assert run_machine_ns([(10_000, 9_000), (8_000, 12_000)]) == 2_000
    assert run_machine_ns([(10_000, 9_000), (8_000, 8_500)]) == -1_000
