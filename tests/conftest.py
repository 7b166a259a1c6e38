"""Shared fixtures: the export builder, real traces, and the --update-golden flag."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builders import ExportBuilder

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = ROOT / "sample_traces"
PEER_TRACES = ROOT.parent / "shared" / "peer_traces"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite tests/golden/ files.")


@pytest.fixture
def export_builder(tmp_path: Path) -> Callable[[], ExportBuilder]:
    """A factory of ExportBuilders writing into the test's tmp_path."""
    return lambda: ExportBuilder(tmp_path)


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def peer_trace_paths() -> list[Path]:
    """Every SQLite export in ../shared/peer_traces (empty when the folder is absent)."""
    return sorted(PEER_TRACES.glob("*/*.sqlite")) if PEER_TRACES.is_dir() else []


def sample_trace_paths() -> list[Path]:
    """Every real sample export shipped in sample_traces/."""
    return sorted(SAMPLE_TRACES.glob("*.sqlite"))
