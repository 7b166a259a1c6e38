"""The per-stage figures, declared once in trace_gaps/figures/, and what is made from them."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, shipped_report
from trace_gaps.analysis.launches import stage_step_values
from trace_gaps.analysis.long_gaps import LAUNCH_GAP_NS, launch_gaps
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.diff.changes import StageSide, stage_side
from trace_gaps.figures.inputs import StageInputs
from trace_gaps.figures.stage import (
    STAGE_FIGURES,
    StageSummary,
    StepValue,
    Total,
    figures_doc,
    stage_columns,
    summarise_stage,
)
from trace_gaps.model import CALL_CATEGORY, END_NS, PID, START_NS, CallCategory
from trace_gaps.report.tables import STAGE_TABLE, stage_table

JSON_DOC = ROOT / "docs" / "json.md"
BLOCK = re.compile(r"(<!-- stage figures: begin -->\n)(.*?)(<!-- stage figures: end -->)", re.S)


def inputs(**totals: int) -> StageInputs:
    every = dict.fromkeys(Total, 0) | {Total(name): value for name, value in totals.items()}
    p90s = {StepValue.HOST_GAP_P90_NS: (10_000, 30_001)}  # two of the four steps have gaps
    return StageInputs("verify", 4, every, 3_000, 1_000, 20_000, 1_000_000, 0.8, 2, 600_000, p90s)


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
    assert stage.host_ns_per_launch_p90 == 20_000  # the mean over the steps that have one


def test_the_p90_of_a_stage_s_launch_gaps_is_numpy_s_nearest_percentile_per_step() -> None:
    # Two steps of one thread; launches of stages 0 and 1 interleaved, random host gaps.
    rng = np.random.default_rng(7)
    rows = []
    for step_id in (1, 2):
        at = step_id * 10_000_000
        for i in range(int(rng.integers(2, 40))):
            at += int(rng.integers(0, 50_000))
            rows.append((step_id, i % 2, at, at + 3_000))
            at += 3_000
    calls = pd.DataFrame(rows, columns=[STEP_ID, STAGE, START_NS, END_NS]).assign(
        **{PID: 5, CALL_CATEGORY: CallCategory.LAUNCH_KERNEL.value}
    )
    gaps = launch_gaps(calls)
    expected = {
        key: int(np.percentile(group[LAUNCH_GAP_NS], 90, method="nearest"))
        for key, group in gaps.groupby([PID, STAGE, STEP_ID])
    }
    found = stage_step_values(calls)
    assert {
        (pid, stage, step): p90
        for pid, stage, step, p90 in found[
            [PID, STAGE, STEP_ID, StepValue.HOST_GAP_P90_NS]
        ].itertuples(index=False)
    } == expected


def test_the_stage_table_shows_every_declared_column_once() -> None:
    headers = [column.header for _, column in stage_columns()]
    assert set(STAGE_TABLE) <= set(headers)  # placed: only declared columns
    assert len(set(STAGE_TABLE)) == len(STAGE_TABLE)
    process = shipped_report(ROOT / "sample_traces" / "plain_decode.sqlite").processes[0]
    shown = stage_table(process).columns
    assert sorted(shown) == sorted(headers)
    assert shown[: len(STAGE_TABLE)] == list(STAGE_TABLE)


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
