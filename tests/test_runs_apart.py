"""Exports of different runs: one run only when their collectives say so; any other export
is analysed apart, on its own clock, with a note naming why (issue 40, goal 4)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import PEER_TRACES, shipped_trace
from tests.test_multi import SHIFT_NS, split_process
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.run.alignment import read_side, run_apart_reason
from trace_gaps.run.multi import analyse_exports

runner = CliRunner()


def _analyze(paths: list[Path]) -> tuple[dict, str]:
    as_json = runner.invoke(app, ["analyze", *map(str, paths), "-f", "json"])
    assert as_json.exit_code == 0, as_json.output
    as_text = runner.invoke(app, ["analyze", *map(str, paths)])
    assert as_text.exit_code == 0, as_text.output
    return json.loads(as_json.stdout), as_text.stdout


def _notes(report: dict, code: str) -> list[str]:
    return [note["text"] for note in report["notes"] if note["code"] == code]


def test_the_real_per_rank_pair_is_one_run():
    # Measured: 370 shared all-reduces, ends within p50 0.1 µs, p99 0.5 µs once aligned.
    paths = [shipped_trace("tp_rank0"), shipped_trace("tp_rank1")]
    assert run_apart_reason(read_side(paths[0]), read_side(paths[1])) is None
    report, text = _analyze(paths)
    assert "apart_exports" not in report
    assert not _notes(report, "exports_apart")
    (aligned,) = _notes(report, "exports_aligned")
    assert "p50 0.1 µs, p99 0.5 µs over 370 instances" in aligned
    assert (
        text.splitlines()[0]
        == "Exports: 2 of one run, on one clock: tp_rank0.sqlite, tp_rank1.sqlite"
    )
    assert all(process["unsplit"] is None for process in report["ranks"]["processes"])


@pytest.mark.parametrize(
    ("first", "second", "without"),
    [("tp_rank0", "hf_assisted", "hf_assisted"), ("spec_eager", "spec_sync", "spec_eager")],
)
def test_captures_of_different_runs_without_a_shared_collective_are_analysed_apart(
    first, second, without
):
    # Before: "Exports: 2 of one run, on one clock" at a -95,720.983 ms offset (tp_rank0 +
    # hf_assisted), aligned by session start alone.
    paths = [shipped_trace(first), shipped_trace(second)]
    report, text = _analyze(paths)
    assert report["apart_exports"] == [f"{second}.sqlite"]
    assert not _notes(report, "exports_aligned")
    (apart,) = _notes(report, "exports_apart")
    assert apart.startswith(f"{second}.sqlite is not of {first}.sqlite's run (no collective")
    assert f"in {without}.sqlite" in apart
    assert text.splitlines()[0].startswith("Exports: 2, not of one run: analysed apart")
    assert {p["export_file"] for p in report["processes"]} == {
        f"{first}.sqlite",
        f"{second}.sqlite",
    }


def test_a_rank_beside_another_runs_export_keeps_its_collectives_unsplit():
    report, _ = _analyze([shipped_trace("tp_rank0"), shipped_trace("hf_assisted")])
    (rank,) = report["ranks"]["processes"]
    assert rank["unsplit"]["collective_ns_per_step"] == 9_185_042  # as tp_rank0 alone
    assert report["ranks"]["pace_setter"] is None


def test_two_runs_of_two_gpus_each_are_analysed_apart_with_their_own_waits():
    before = PEER_TRACES / "nsys-ai" / "mfu_2gpu_before.sqlite"
    after = PEER_TRACES / "nsys-ai" / "mfu_2gpu_after.sqlite"
    if not (before.exists() and after.exists()):
        pytest.skip("the peer traces are not on this machine")
    report, _ = _analyze([before, after])
    assert report["apart_exports"] == ["mfu_2gpu_after.sqlite"]
    (apart,) = _notes(report, "exports_apart")
    assert (
        "the collectives disagree: 33 sendrecv instances in mfu_2gpu_before.sqlite, 31 in" in apart
    )
    # Each run's two GPUs still wait for each other, within their own export.
    waits = {p["label"]: p for p in report["ranks"]["processes"]}
    assert set(waits) == {"144", "145", "148", "149"}
    assert waits["149"]["waits_for"][0]["label"] == "148"
    assert all(w["label"] in {"144", "145"} for w in waits["145"]["waits_for"])


def test_an_added_run_leaves_the_run_of_the_first_export_as_it_was():
    run = [shipped_trace("tp_rank0"), shipped_trace("tp_rank1")]
    alone = analyse_exports(run, AnalysisOptions()).report
    added = analyse_exports([*run, shipped_trace("tp_eager")], AnalysisOptions()).report
    assert added.apart_exports == ["tp_eager.sqlite"]
    assert added.ranks.pace_setter == alone.ranks.pace_setter
    assert added.ranks.processes[:2] == alone.ranks.processes
    assert len(added.ranks.processes) == 4  # tp_eager's two processes, matched between them


def _jitter_collectives(path: Path, most_ns: int) -> Path:
    """The export with each NCCL kernel moved later by a different amount up to most_ns."""
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + (rowid * 7919) % ?, "
            '"end" = "end" + (rowid * 7919) % ? WHERE shortName IN '
            "(SELECT id FROM StringIds WHERE value LIKE 'nccl%')",
            (most_ns, most_ns),
        )
    return path


def test_collectives_as_many_but_ending_apart_are_not_one_run(tmp_path):
    # The same collectives one for one, but their ends as another run's would be: up to 1 ms
    # apart after the alignment's median correction (one run's agree within 0.5 µs).
    source = shipped_trace("tp_eager")
    rank0 = split_process(source, tmp_path / "rank0.sqlite", 2604, 0)
    rank1 = _jitter_collectives(
        split_process(source, tmp_path / "rank1.sqlite", 2605, SHIFT_NS), 1_000_000
    )
    found = run_apart_reason(read_side(rank0), read_side(rank1))
    assert found is not None and found[0] == "ends"
    assert found[1]["residual_p50_ns"] > 100_000
    report = analyse_exports([rank0, rank1], AnalysisOptions()).report
    assert report.apart_exports == ["rank1.sqlite"]
    assert any("shared instances differ by p50" in note.text for note in report.notes)


def test_a_run_of_send_recv_pairs_split_per_process_is_still_one_run(tmp_path):
    # Send/recv ends differ by up to 31 µs within one run: residual p50 3.3 µs once aligned.
    source = PEER_TRACES / "nsys-ai" / "mfu_2gpu_before.sqlite"
    if not source.exists():
        pytest.skip("the peer traces are not on this machine")
    parts = [
        split_process(source, tmp_path / "a.sqlite", 144, 0),
        split_process(source, tmp_path / "b.sqlite", 145, SHIFT_NS),
    ]
    assert run_apart_reason(read_side(parts[0]), read_side(parts[1])) is None


def test_an_export_with_other_collective_families_is_analysed_apart(tmp_path):
    source = shipped_trace("tp_eager")
    rank0 = split_process(source, tmp_path / "rank0.sqlite", 2604, 0)
    rank1 = split_process(source, tmp_path / "rank1.sqlite", 2605, SHIFT_NS)
    with sqlite3.connect(rank1) as connection:
        connection.execute(
            "UPDATE StringIds SET value = replace(value, 'AllReduce', 'AllGather') "
            "WHERE value LIKE 'nccl%AllReduce%'"
        )
    found = run_apart_reason(read_side(rank0), read_side(rank1))
    assert found == (
        "no_shared_family",
        {"families": ("allreduce",), "other_families": ("allgather",)},
    )
