"""The per-stage figures, declared once in trace_gaps/figures.py, and what is made from them."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.conftest import ROOT
from trace_gaps.changes import StageSide, stage_side
from trace_gaps.figures import (
    STAGE_FIGURES,
    StageInputs,
    StageSummary,
    Total,
    figures_doc,
    stage_columns,
    summarise_stage,
)

JSON_DOC = ROOT / "docs" / "json.md"
BLOCK = re.compile(r"(<!-- stage figures: begin -->\n)(.*?)(<!-- stage figures: end -->)", re.S)


def inputs(**totals: int) -> StageInputs:
    every = dict.fromkeys(Total, 0) | {Total(name): value for name, value in totals.items()}
    return StageInputs("verify", 4, every, 3_000, 1_000, 20_000, 1_000_000, 0.8, 2, 600_000)


def test_a_misspelt_figure_name_raises_instead_of_reading_zero() -> None:
    with pytest.raises(KeyError):
        STAGE_FIGURES["sync_per_step"]
    with pytest.raises(ValueError):
        Total("sync")
    with pytest.raises(AttributeError):
        getattr(Total, "SYNC")  # noqa: B009 (the misspelling is the point)


def test_a_total_missing_from_the_stage_frame_raises_instead_of_reading_zero() -> None:
    totals = {total: 0 for total in Total if total is not Total.SYNCS}
    stage = dataclasses.replace(inputs(), totals=totals)
    with pytest.raises(KeyError, match="syncs"):
        summarise_stage(stage)


def test_every_field_of_the_stage_summary_is_a_declared_figure() -> None:
    assert list(STAGE_FIGURES) == [f.name for f in dataclasses.fields(StageSummary)]
    assert all(f.doc and f.unit for f in STAGE_FIGURES.values())


def test_figures_are_computed_from_totals_per_analysed_step() -> None:
    #   4 steps: 10 syncs (2.5/step) taking 1 ms in all; 6 kernel and 2 graph launches
    stage = summarise_stage(
        inputs(
            syncs=10,
            sync_ns=1_000_001,
            kernel_launches=6,
            graph_launches=2,
            graph_ops=10,
            eager_ops=6,
            queue_ns=8_000,
        )
    )
    assert stage.syncs_per_step == 2.5
    assert stage.sync_ns_per_step == 250_000
    assert stage.launches_per_step == {"kernel": 1.5, "graph": 0.5, "memcpy": 0.0, "memset": 0.0}
    assert stage.execution == "mixed"
    assert stage.nodes_per_replay == 5.0
    assert stage.queue_delay_mean_ns_per_launch == 1_000
    assert stage.long_gaps_per_step == 0.5


def test_the_stage_table_columns_have_one_place_each() -> None:
    places = [column.at for _, column in stage_columns()]
    assert places == list(range(len(places)))


def test_the_diff_compares_the_stage_figures_it_declares() -> None:
    stage = summarise_stage(inputs(kernel_launches=8, memcpy_launches=2, memset_launches=2))
    assert stage_side(stage, 5) == StageSide(5, "none", 3.0, 0.0, 2.0, 1.0, None)
    assert stage_side(None, 5) == StageSide(5, "none", 0.0, 0.0, 0.0, 0.0, None)


def test_docs_json_lists_the_declared_figures(update_golden: bool) -> None:
    text = JSON_DOC.read_text(encoding="utf-8")
    found = BLOCK.search(text)
    assert found, "docs/json.md lacks its <!-- stage figures --> markers"
    if update_golden:
        text = BLOCK.sub(lambda m: m.group(1) + figures_doc() + m.group(3), text)
        JSON_DOC.write_text(text, encoding="utf-8")
        found = BLOCK.search(text)
        assert found
    assert found.group(2) == figures_doc(), f"run pytest {__file__} --update-golden"
