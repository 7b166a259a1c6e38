"""Shared fixtures: the export builder, real traces, and the --update-golden flag."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import tempfile
from collections.abc import Callable, Collection, Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import settings
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from trace_gaps.analysis.engine.picks import TimelineRequest
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.cli import app
from trace_gaps.nsys.load import load_trace
from trace_gaps.nsys.read import ARROW_READER_ENV
from trace_gaps.records.report import Report
from trace_gaps.render.schema import SCHEMAS, json_schema
from trace_gaps.report.build import build_report

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = ROOT / "sample_traces"
PEER_TRACES = ROOT.parent / "shared" / "peer_traces"

# Property tests: a quick default for the edit-test loop, and a thorough run for CI and before
# a merge (TRACE_GAPS_THOROUGH=1 pytest -q). Examples are exports written to disk and analysed
# whole and windowed, about a second each on 2 cores, so the counts are small. Properties of
# pure functions set their own larger counts, a tenth of them by default.
THOROUGH = os.environ.get("TRACE_GAPS_THOROUGH", "") not in ("", "0")
settings.register_profile("quick", max_examples=5, deadline=None)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile("thorough" if THOROUGH else "quick")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "thorough: run only with TRACE_GAPS_THOROUGH=1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if THOROUGH:
        return
    skip = pytest.mark.skip(reason="thorough run only: TRACE_GAPS_THOROUGH=1 pytest")
    for item in items:
        if "thorough" in item.keywords:
            item.add_marker(skip)


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
    """Every real sample export shipped in sample_traces/, the corpus included."""
    return sorted(SAMPLE_TRACES.glob("*.sqlite")) + corpus_trace_paths()


# A default run sweeps one or two real captures per behaviour; the thorough run (CI's last
# stage) sweeps every one. Ours: eager, node-level graphs, two processes on one GPU; other
# people's code: transformers' assisted generation, a serving loop with kinds of steps.
REPRESENTATIVE_SAMPLES = (
    "spec_eager",
    "spec_graph_node",
    "spec_two_ranks",
    "hf_assisted",
    "serving_batch_names",
)
# Peer captures: a real program on 2 GPUs, and nsys-ai's mock with no NVTX at all.
REPRESENTATIVE_PEERS = ("mfu_2gpu_before", "mock")


def sweep(paths: Iterable[Path], keep: Collection[str]) -> list[Any]:
    """The captures as test parameters: those named in `keep` (stems) in every run, the
    others marked thorough. A kept name missing from non-empty `paths` fails collection."""
    paths = list(paths)
    missing = set(keep) - {p.stem for p in paths}
    if paths and missing:
        raise ValueError(f"representative captures missing: {sorted(missing)}")
    return [p if p.stem in keep else pytest.param(p, marks=pytest.mark.thorough) for p in paths]


def shipped_trace(name: str) -> Path:
    """The sample or corpus export of this stem; the repository ships it, so a missing one
    fails the test (a skip would let a renamed or deleted capture pass unseen)."""
    found = next((p for p in sample_trace_paths() if p.stem == name), None)
    if found is None:
        pytest.fail(f"the shipped capture {name} is missing from sample_traces/")
    return found


def corpus_trace_paths() -> list[Path]:
    """The corpus of captures made by other people's code (sample_traces/corpus/*.sqlite.xz),
    decompressed once into a cache folder named by the archives' contents."""
    return list(_corpus_trace_paths())


@cache
def _corpus_trace_paths() -> tuple[Path, ...]:
    """Once per process: hashing the archives (20 MB) cost every collecting module and every
    shipped_trace() call a read of them all."""
    return _decompressed("corpus")


def _decompressed(folder_name: str) -> tuple[Path, ...]:
    """sample_traces/FOLDER/*.sqlite.xz decompressed once into a cache folder named by the
    archives' contents."""
    archives = sorted((SAMPLE_TRACES / folder_name).glob("*.sqlite.xz"))
    if not archives:
        return ()
    digest = hashlib.sha256(b"".join(a.read_bytes() for a in archives)).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"trace-gaps-{folder_name}-{digest}"
    folder.mkdir(exist_ok=True)
    paths = []
    for archive in archives:
        path = folder / archive.name.removesuffix(".xz")
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.part")
            partial.write_bytes(lzma.decompress(archive.read_bytes()))
            partial.replace(path)
        paths.append(path)
    return tuple(paths)


def drift_trace_paths() -> dict[str, Path]:
    """The diff's drift captures (sample_traces/drift/*.sqlite.xz, every archive there: one
    synchronous decode captured unchanged six times, with a CPU stage added and with a wider
    MLP three times each; and on an H200 and on an H100, unchanged and with a wider MLP three
    times each), by name, decompressed once into a cache folder as the corpus is."""
    return {path.stem: path for path in _drift_trace_paths()}


@cache
def _drift_trace_paths() -> tuple[Path, ...]:
    return _decompressed("drift")


DEFAULT_OPTIONS = AnalysisOptions()


def shipped_report(
    path: Path,
    options: AnalysisOptions = DEFAULT_OPTIONS,
    timelines: tuple[TimelineRequest, ...] = (),
) -> Report:
    """The Report (frozen records) of a capture no test edits, loaded and analysed whole: once
    per test process, options and reader, as several modules compare with the same one."""
    return _shipped_report(path, options, timelines, os.environ.get(ARROW_READER_ENV, ""))


@cache
def _shipped_report(
    path: Path, options: AnalysisOptions, timelines: tuple[TimelineRequest, ...], no_arrow: str
) -> Report:
    trace = load_trace(path)
    return build_report(trace, analyse_trace(trace, options, timelines=timelines))


def shipped_json(path: Path, *args: str) -> dict[str, Any]:
    """The JSON report of `trace-gaps analyze PATH -f json ARGS` on a capture no test edits:
    run once per test process and reader (TRACE_GAPS_NO_ARROW), as several tests compare with it."""
    return json.loads(_shipped_json_text(path, args, os.environ.get(ARROW_READER_ENV, "")))  # type: ignore[no-any-return]


@cache
def _shipped_json_text(path: Path, args: tuple[str, ...], no_arrow: str) -> str:
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json", *args])
    assert result.exception is None, result.exception
    assert result.exit_code == 0, result.output
    return result.stdout


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json_schema(SCHEMAS[kind]))


def assert_matches_schema(text: str, kind: str = "report") -> None:
    """The JSON text is valid against the generated schema of `kind` ("report" or "diff")."""
    errors = sorted(_validator(kind).iter_errors(json.loads(text)), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message[:200]}" for e in errors[:10])


@pytest.fixture(autouse=True)
def no_terminal_width_from_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text output takes its width from COLUMNS when set (commands/output_options.text_terminal), and
    pytest-xdist's workers start with COLUMNS=80: tests see the stable width of a pipe, as
    `pytest -n 0` does, unless they set COLUMNS themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
