"""Several exports of one run in every output: header, bundle title, provenance, process
sections, and diff rank by rank with the run's step time gated on its slowest rank."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import corpus_trace_paths
from trace_gaps.cli import app

runner = CliRunner()


def _corpus(name: str) -> Path:
    found = next((p for p in corpus_trace_paths() if p.stem == name), None)
    if found is None:
        pytest.skip(f"corpus {name} absent")
    return found


@pytest.fixture
def ranks(tmp_path: Path) -> list[Path]:
    """The real per-rank pair (one nsys session per rank), as rank0.sqlite and rank1.sqlite."""
    folder = tmp_path / "run"
    folder.mkdir()
    return [
        Path(shutil.copyfile(_corpus(f"tp_rank{r}"), folder / f"rank{r}.sqlite")) for r in (0, 1)
    ]


def test_analyze_names_every_export_and_each_process_its_own(ranks):
    result = runner.invoke(app, ["analyze", str(ranks[0].parent / "rank*.sqlite"), "-f", "md"])
    assert result.exit_code == 0, result.output
    header = result.stdout.split("## Process")[0]
    # Before: "Export: rank0.sqlite (2.8 MB), ..." and nothing about rank1.sqlite.
    assert "Exports: 2 of one run, on one clock: rank0.sqlite, rank1.sqlite" in header
    assert "- rank0.sqlite (2.8 MB)" in header and "- rank1.sqlite (2.7 MB)" in header
    assert "## Process 2947 (python3) — rank0.sqlite" in result.stdout
    assert "## Process 2950 (python3) — rank1.sqlite" in result.stdout
    data = json.loads(runner.invoke(app, ["analyze", *map(str, ranks), "-f", "json"]).stdout)
    assert [p["export_file"] for p in data["processes"]] == ["rank0.sqlite", "rank1.sqlite"]


def test_one_export_keeps_its_one_line_header(ranks):
    result = runner.invoke(app, ["analyze", str(ranks[0]), "-f", "md"])
    assert "Export: rank0.sqlite (2.8 MB), Nsight Systems 2025.3.2.0" in result.stdout
    assert "## Process 2947 (python3)\n" in result.stdout
    assert (
        json.loads(runner.invoke(app, ["analyze", str(ranks[0]), "-f", "json"]).stdout)[
            "processes"
        ][0]["export_file"]
        == ""
    )


def test_the_bundle_titles_and_proves_every_export(ranks, tmp_path):
    bundle = tmp_path / "bundle"
    result = runner.invoke(app, ["report", *map(str, ranks), "-o", str(bundle), "-q"])
    assert result.exit_code == 0, result.output
    markdown = (bundle / "report.md").read_text()
    # Before: "# trace-gaps report: rank0.sqlite" and rank0's sha256 only.
    assert markdown.startswith("# trace-gaps report: rank0.sqlite, rank1.sqlite\n")
    provenance = markdown.split("## Provenance")[1].split("## Pictures")[0]
    for path, started in zip(ranks, ["13:35:55.074997322", "13:35:55.079043062"], strict=True):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        row = next(line for line in provenance.splitlines() if f"`{digest}`" in line)
        assert path.name.replace("_", "\\_") in row and "2025.3.2.0" in row and started in row
    assert "Capture settings of rank1.sqlite" in provenance
    assert "**Process 2950 (python3) — rank1.sqlite:" in markdown


def test_one_exports_bundle_gives_its_session_start(ranks, tmp_path):
    bundle = tmp_path / "bundle"
    runner.invoke(app, ["report", str(ranks[1]), "-o", str(bundle), "-q"])
    markdown = (bundle / "report.md").read_text()
    assert "| session start | 2026-11-30 13:35:55.079043062 UTC |" in markdown


def test_diff_of_two_runs_compares_rank_by_rank_and_names_each_file(ranks):
    # Before: only the lowest pids were compared, each named by its side's first file.
    eager = _corpus("tp_eager")  # the same 2-GPU decode, both ranks in one export
    pattern = str(ranks[0].parent / "rank*.sqlite")
    result = runner.invoke(app, ["diff", str(eager), pattern, "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    pairs = [
        (p["before"]["pid"], p["before"]["file"], p["after"]["pid"], p["after"]["file"])
        for p in data["processes"]
    ]
    assert pairs == [
        (2604, "tp_eager.sqlite", 2947, "rank0.sqlite"),
        (2605, "tp_eager.sqlite", 2950, "rank1.sqlite"),
    ]
    run = data["run"]
    assert (run["before"]["pid"], run["after"]["pid"]) == (2605, 2950)  # the slowest of each
    means = run["after"]["wall"]["mean_ns"] - run["before"]["wall"]["mean_ns"]
    assert abs(run["wall"]["change_ns"] - means) <= 1
    text = runner.invoke(app, ["diff", str(eager), pattern]).stdout
    assert text.startswith("Run step time (its slowest rank) +1.98 ms/step")


def test_fail_if_slower_gates_on_the_slowest_rank_and_names_it(ranks):
    eager, pattern = str(_corpus("tp_eager")), str(ranks[0].parent / "rank*.sqlite")
    graph = str(_corpus("tp_graph"))
    # Graph -> eager, the run 9 times as slow: the code's part of the run's step trips.
    gated = runner.invoke(app, ["diff", graph, pattern, "--fail-if-slower", "5", "-f", "json"])
    assert gated.exit_code == 3, gated.output
    assert gated.stderr.strip() == (
        "error: the code's part of the run's step time (its slowest rank: before process 2771 "
        "in tp_graph.sqlite, after process 2950 in rank1.sqlite; the machine's drift taken "
        "out) grew more than 5 % beyond noise"
    )
    # The same eager code captured twice: the run's step time grew 12.9 % (CI +5.6 to
    # +20.5 %), past a 5 % gate on the step time alone; its code's part did not (the
    # machine: test_diff_drift_ranks.py).
    passed = runner.invoke(app, ["diff", eager, pattern, "--fail-if-slower", "5", "-f", "json"])
    assert passed.exit_code == 0, passed.output
    wall = json.loads(passed.stdout)["run"]["wall"]
    assert wall["ci_pct"]["low_pct"] > 5
