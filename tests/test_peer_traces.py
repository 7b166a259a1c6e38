"""Real exports from other projects (../shared/peer_traces): each one analysed, its notes checked.

Skipped when the folder is absent. Also: no command ever changes its input file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import (
    PEER_TRACES,
    REPRESENTATIVE_PEERS,
    peer_trace_paths,
    sample_trace_paths,
    shipped_json,
    sweep,
)
from trace_gaps.cli import app

runner = CliRunner()

# Substrings the notes of each file must contain.
EXPECTED_NOTES: dict[str, list[str]] = {
    "flameox/nsight-2025.5.2.sqlite": [
        "No NVTX_EVENTS table",
        "Graph-level CUDA graph trace: 2 graph replays",
    ],
    "nsys-ai/h100_2gpu_1s.sqlite": [
        "No step range, whole-trace analysis",
        "GPU ops have no launching call in the export",
        "2 processes ran GPU work (111 on GPU 0; 112 on GPU 1)",
        "only a time window of the capture (DERIVED_WINDOW_NS=",
    ],
    "nsys-ai/mfu_2gpu_after.sqlite": [
        "2 processes ran GPU work",
        "NVTX ranges of domains never named",
    ],
    "nsys-ai/mfu_2gpu_before.sqlite": [
        "2 processes ran GPU work",
        "NVTX ranges of domains never named",
    ],
    "nsys-ai/mock.sqlite": ["No NVTX_EVENTS table", "profiler-overhead rows"],
    "pipit/perlmutter-cloverleaf-cuda.sqlite": ["No NVTX_EVENTS table"],
    "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite": [
        "Older export schema (EXPORT_META_DATA, Nsight Systems 2022.2.1.31, schema 2.9.1)",
    ],
}

PEERS = peer_trace_paths()
# Two peer captures by default; every one in the thorough run.
PEER_SWEEP = sweep(PEERS, REPRESENTATIVE_PEERS)
needs_peers = pytest.mark.skipif(not PEERS, reason="../shared/peer_traces is absent")


def peer_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def analysed(path: Path) -> dict[str, Any]:
    """The JSON report of one export through the CLI (once per test process)."""
    return shipped_json(path)


@needs_peers
@pytest.mark.parametrize("path", PEER_SWEEP, ids=peer_id)
def test_every_peer_trace_gives_a_report_whose_steps_add_up(path):
    report = analysed(path)
    assert report["processes"], "no process analysed"
    for process in report["processes"]:
        walls = {row["step_id"]: row["wall_ns"] for row in process["step_rows"]}
        charged = dict.fromkeys(walls, 0)
        for entry in process["step_ledger"]:
            charged[entry["step_id"]] += entry["duration_ns"]
        assert charged == walls


@needs_peers
@pytest.mark.parametrize("path", PEER_SWEEP, ids=peer_id)
def test_every_peer_trace_has_the_notes_its_quirks_call_for(path):
    expected = EXPECTED_NOTES.get(peer_id(path))
    if expected is None:
        pytest.skip(f"no expectations written down for {peer_id(path)} yet")
    notes = " | ".join(note["text"] for note in analysed(path)["notes"])
    for fragment in expected:
        assert fragment in notes


@needs_peers
def test_every_peer_trace_has_its_expectations_written_down():
    assert {peer_id(p) for p in PEERS} == set(EXPECTED_NOTES)


@needs_peers
@pytest.mark.parametrize("path", PEER_SWEEP, ids=peer_id)
def test_every_peer_trace_renders_in_markdown_and_info(path):
    for args in (["analyze", str(path), "-f", "md"], ["info", str(path)]):
        result = runner.invoke(app, args)
        assert result.exception is None, result.exception
        assert result.exit_code == 0, result.output


REPORTS = sorted((PEER_TRACES / "FlagGems").glob("*.nsys-rep")) if PEER_TRACES.is_dir() else []


@pytest.mark.skipif(not REPORTS, reason="no .nsys-rep in ../shared/peer_traces/FlagGems")
@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.name)
def test_a_real_nsys_report_without_nsys_gives_the_export_command(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys there
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: {path}: is an Nsight Systems report, not its SQLite export, and nsys is not on "
        f"PATH; export it first: nsys export --type sqlite -o {path.with_suffix('.sqlite')} {path}"
    ]


def fingerprint(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_mtime_ns, stat.st_size


COMMANDS = [
    ["analyze", "-f", "text"],
    ["analyze", "-f", "md"],
    ["analyze", "-f", "json"],
    ["analyze", "-f", "csv"],
    ["info"],
    ["info", "--json"],
]


def unchanged_inputs() -> list[Path]:
    """The smallest peer trace and the smallest sample trace, when present."""
    groups = (PEERS, sample_trace_paths())
    return [min(paths, key=lambda p: p.stat().st_size) for paths in groups if paths]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_no_command_changes_the_export(command, export_builder, tmp_path):
    builder = export_builder()
    for offset in (0, 10_000, 20_000):
        builder.range("decode_step", offset, offset + 10_000).range("draft", offset, offset + 5_000)
        builder.launch("gemm", offset + 100, offset + 600, offset + 1_000, offset + 3_000)
    inputs = [builder.write(), *unchanged_inputs()]
    for path in inputs:
        before = fingerprint(path)
        result = runner.invoke(app, [*command, str(path)])
        assert result.exit_code == 0, result.output
        assert fingerprint(path) == before, path
        # Opened read-only: no journal or WAL file appears beside it either.
        assert not list(path.parent.glob(f"{path.name}-*"))
