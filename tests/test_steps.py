"""Finding the step range, cutting steps, and skipping warm-up."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.test_ledger import analyse
from trace_gaps.analysis.steps import STEP_ID, step_rows
from trace_gaps.errors import StepNotFoundError


def test_the_most_frequent_outer_range_with_children_is_the_step(export_builder):
    #   [decode_step [draft][verify]] x4, plus "tick" x9 at top level without children
    #   and "layer" x8 nested inside verify (more frequent, but nested in a repeating range)
    b = export_builder()
    for i in range(4):
        o = i * 10_000
        b.range("decode_step", o, o + 9_000).range("draft", o, o + 3_000).range(
            "verify", o + 3_000, o + 9_000
        )
        b.range("layer", o + 3_100, o + 3_200).range("layer", o + 3_300, o + 3_400)
    for i in range(9):
        b.range("tick", 50_000 + i * 10, 50_000 + i * 10 + 5)
    b.launch("k", 100, 200, 300, 400)
    analysis = analyse(b.write())
    assert analysis.selection.name == "decode_step"
    assert len(analysis.steps) == 4


def test_pytorch_op_ranges_never_become_the_step(export_builder):
    #   aten::linear x6 each containing aten::addmm, and decode x3 containing a stage
    b = export_builder()
    for i in range(6):
        b.range(f"aten::linear, seq = {i}, op_id = {i}", i * 100, i * 100 + 50)
        b.range("aten::addmm", i * 100 + 10, i * 100 + 40)
    for i in range(3):
        b.range("decode", 10_000 + i * 1_000, 10_900 + i * 1_000).range(
            "fwd", 10_000 + i * 1_000, 10_500 + i * 1_000
        )
    b.launch("k", 10_100, 10_200, 10_300, 10_400)
    assert analyse(b.write()).selection.name == "decode"


def test_a_step_name_that_does_not_exist_lists_the_names_that_do(export_builder):
    b = export_builder().range("decode_step", 0, 10).range("draft", 1, 5)
    b.launch("k", 1, 2, 3, 4)
    with pytest.raises(StepNotFoundError, match="'decode'.*decode_step"):
        analyse(b.write(), step_name="decode")


def test_no_repeating_range_falls_back_to_one_whole_process_step(export_builder):
    b = export_builder().range("setup", 0, 100)
    b.launch("k", 10, 20, 30, 5_000)
    analysis = analyse(b.write())
    assert analysis.selection.name is None
    # The window spans the GPU ops and API calls of the process: the launch call to the kernel end.
    assert analysis.steps[["start_ns", "end_ns"]].values.tolist() == [[10, 5_000]]


def test_leading_steps_that_load_modules_or_run_long_are_warm_up(export_builder):
    #   step 0 loads a library, step 1 lasts 40_000 (> 3x median 1_000), steps 2..6 are normal,
    #   step 5 is long again but is not leading: kept
    b = export_builder()
    starts = [0, 10_000, 60_000, 70_000, 80_000, 90_000, 200_000]
    lengths = [1_000, 40_000, 1_000, 1_000, 1_000, 50_000, 1_000]
    for start, length in zip(starts, lengths, strict=True):
        b.range("decode_step", start, start + length).range("fwd", start, start + length)
        b.launch("k", start + 10, start + 20, start + 30, start + 40)
    b.call("cuLibraryLoadData", 100, 900)
    steps = analyse(b.write()).steps
    assert steps["is_warmup"].tolist() == [True, True, False, False, False, False, False]
    assert steps["skip_reason"].tolist()[:2] == ["loads_modules", "longer_than_median"]


def test_skip_drops_exactly_the_first_n_steps_of_each_thread(export_builder):
    b = export_builder()
    for tid in (100, 101):
        for i in range(4):
            o = i * 1_000
            b.range("decode_step", o, o + 900, tid=tid).range("fwd", o, o + 500, tid=tid)
    b.launch("k", 10, 20, 30, 40)
    b.call("cuModuleLoadData", 1_100, 1_200)
    steps = analyse(b.write(), skip=1).steps
    assert (
        steps.groupby("global_tid")["is_warmup"].apply(list).tolist()
        == [[True, False, False, False]] * 2
    )


def test_step_rows_finds_each_id_row_or_minus_one() -> None:
    steps = pd.DataFrame({STEP_ID: [5, 2, 9]})
    rows = step_rows(steps, np.array([9, 3, 2, 5, 10, -1]))
    assert rows.tolist() == [2, -1, 1, 0, -1, -1]
    assert step_rows(steps.iloc[:0], np.array([1, 2])).tolist() == [-1, -1]
