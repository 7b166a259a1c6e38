"""plot timeline and plot steps of several exports: the exports of one run (one per rank)
drawn as analyze analyses them, on one time axis; an export of another run refused."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, corpus_trace_paths
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.plot import plot_steps, plot_timeline
from trace_gaps.records.report import Report
from trace_gaps.report.timeline import StepPick, TimelineRequest
from trace_gaps.run.timelines import run_report

runner = CliRunner()


def _corpus_pair() -> list[Path]:
    found = {p.stem: p for p in corpus_trace_paths()}
    if "tp_rank0" not in found or "tp_rank1" not in found:
        pytest.skip("corpus tp_rank0/tp_rank1 absent")
    return [found["tp_rank0"], found["tp_rank1"]]


@cache
def _pair_report() -> Report:
    """The corpus's two ranks as plot timeline draws them by default: the median step of
    each, every process."""
    request = TimelineRequest(StepPick.MEDIAN, all_processes=True)
    return run_report(_corpus_pair(), AnalysisOptions(), timelines=(request,))


def test_two_exports_of_one_run_draw_both_ranks_lanes_under_one_title():
    report = _pair_report()
    pids = sorted({t.pid for t in report.timelines})
    assert len(pids) == 2  # rank 0's process and rank 1's
    ax = plot_timeline(report).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    for pid in pids:
        assert f"{pid} · step" in labels and f"{pid} · GPU idle: cause" in labels
        assert f"{pid} · stages (thread {pid})" in labels
        assert any(label.startswith(f"{pid} · GPU ") and "stream" in label for label in labels)
    title = ax.get_title(loc="left")
    assert title.startswith("tp_rank0.sqlite + tp_rank1.sqlite — processes ")
    assert "on one time axis" in title


def test_the_steps_plot_of_two_exports_has_a_panel_per_rank_naming_its_export():
    fig = plot_steps(_pair_report())
    assert fig.get_suptitle().startswith("tp_rank0.sqlite + tp_rank1.sqlite — ")
    titles = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    assert len(titles) == 2
    assert " of tp_rank0.sqlite — " in titles[0] and " of tp_rank1.sqlite — " in titles[1]


def test_plot_timeline_of_two_exports_on_the_command_line(tmp_path):
    rank0, rank1 = _corpus_pair()
    out = tmp_path / "ranks.png"
    drawn = runner.invoke(app, ["plot", "timeline", str(rank0), str(rank1), "-o", str(out)])
    assert drawn.exit_code == 0, drawn.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    refused = runner.invoke(
        app,
        ["plot", "timeline", str(rank0), str(rank1), "--process", "1", "-o", str(out)],
    )
    assert refused.exit_code == 2
    assert "several exports draw every process" in refused.stderr


@pytest.mark.parametrize("kind", ["timeline", "steps"])
def test_an_export_of_another_run_is_refused_with_analyzes_reason(tmp_path, kind):
    rank0, _ = _corpus_pair()
    other = SAMPLE_TRACES / "spec_eager.sqlite"
    out = tmp_path / "mixed.png"
    refused = runner.invoke(app, ["plot", kind, str(rank0), str(other), "-o", str(out)])
    assert refused.exit_code == 1, refused.output
    assert "spec_eager.sqlite is not of tp_rank0.sqlite's run" in refused.stderr
    assert "draw spec_eager.sqlite on its own" in refused.stderr
    assert not out.exists()


def test_the_same_export_twice_is_refused(tmp_path):
    path = SAMPLE_TRACES / "spec_eager.sqlite"
    refused = runner.invoke(
        app, ["plot", "steps", str(path), str(path), "-o", str(tmp_path / "s.png")]
    )
    assert refused.exit_code == 1, refused.output
