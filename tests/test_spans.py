"""Window workers that read their own spans of the export (nsys/spans.py, engine/spans.analyse_in_spans)
give the one-process result, byte for byte, on real captures and on copies of one made
awkward: copies and untimed rows spread through the tables (the spans' edges must count
each once and find the row bounds past them), and rows out of order (the spans refuse, the
process streams, which refuses too, and the export is read whole)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import sample_trace_paths
from trace_gaps.analysis.engine import pipeline
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.model import START_NS
from trace_gaps.nsys.cleaning import Cleaner, Tally
from trace_gaps.nsys.head import OP_ROW_KEY
from trace_gaps.nsys.load import load_trace
from trace_gaps.nsys.spans import _first_rowid_from
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report
from trace_gaps.run.one import analyse_export

QUICK = {"spec_eager", "spec_graph_node", "spec_two_ranks"}
SAMPLES = [
    p if p.stem in QUICK else pytest.param(p, marks=pytest.mark.thorough)
    for p in sample_trace_paths()
]


def report_json(path: Path, jobs: int) -> str:
    trace, analysis = analyse_export(path, AnalysisOptions(), window_rows=2_000, jobs=jobs)
    return render_json(build_report(trace, analysis))


@pytest.fixture
def spans_done(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per analysis the spans finished (not refused)."""
    done: list[bool] = []
    in_spans = pipeline.analyse_in_spans

    def spied(*args: object, **kwargs: object) -> object:
        results = in_spans(*args, **kwargs)  # type: ignore[arg-type]
        done.append(True)
        return results

    monkeypatch.setattr(pipeline, "analyse_in_spans", spied)
    return done


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: Path(str(p)).stem)
def test_spans_give_the_one_process_result_on_real_captures(
    path: Path, spans_done: list[bool]
) -> None:
    one = report_json(path, jobs=1)
    assert not spans_done
    assert report_json(path, jobs=3) == one
    assert spans_done, "the spans refused a real capture"


def awkward_copy(source: Path, folder: Path, *, disorder: bool = False) -> Path:
    """The capture with a copy of every 53rd kernel and call beside it, every 61st row of
    both tables untimed (0, 0), and with disorder, two kernels mid-table swapped in time."""
    path = folder / "awkward.sqlite"
    shutil.copy(source, path)
    with sqlite3.connect(path) as connection:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            connection.execute(
                f"CREATE TABLE copied AS SELECT * FROM {table} UNION ALL "
                f"SELECT * FROM {table} WHERE rowid % 53 = 0 ORDER BY start"
            )
            connection.execute(f"DELETE FROM {table}")
            connection.execute(f"INSERT INTO {table} SELECT * FROM copied ORDER BY start")
            connection.execute("DROP TABLE copied")
            connection.execute(f'UPDATE {table} SET start = 0, "end" = 0 WHERE rowid % 61 = 0')
        if disorder:
            rows = connection.execute(
                "SELECT MAX(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL"
            ).fetchone()[0]
            middle = rows * 2 // 3
            connection.execute(
                'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 5000000, "end" = "end" + '
                "5000000 WHERE rowid = ?",
                (middle,),
            )
    return path


def test_copies_and_untimed_rows_are_counted_once_across_the_spans(
    tmp_path: Path, spans_done: list[bool]
) -> None:
    path = awkward_copy(Path("sample_traces/spec_eager.sqlite"), tmp_path)
    one = report_json(path, jobs=1)
    assert '"code": "duplicate_rows"' in one and '"code": "untimed_rows"' in one
    whole = load_trace(path)
    assert render_json(build_report(whole, analyse_trace(whole, AnalysisOptions()))) == one
    assert report_json(path, jobs=3) == one
    assert spans_done


def test_rows_out_of_order_are_refused_by_the_spans_and_read_whole(
    tmp_path: Path, spans_done: list[bool]
) -> None:
    path = awkward_copy(Path("sample_traces/spec_eager.sqlite"), tmp_path, disorder=True)
    one = report_json(path, jobs=1)
    assert report_json(path, jobs=3) == one
    assert not spans_done


def test_a_copy_across_a_chunk_edge_is_found() -> None:
    rows = pd.DataFrame(
        {k: np.array([5, 7, 7, 7], dtype=np.int64) for k in OP_ROW_KEY if k != START_NS}
        | {START_NS: np.array([1, 2, 2, 2], dtype=np.int64)}
    )
    rows["end_ns"] = np.array([9, 9, 9, 9], dtype=np.int64)
    tally = Tally()
    cleaned = Cleaner((None, None), OP_ROW_KEY, calls=False)
    kept = [cleaned(rows.iloc[:2].reset_index(drop=True), tally)]
    kept.append(cleaned(rows.iloc[2:].reset_index(drop=True), tally))
    assert [len(k) for k in kept] == [2, 0]
    assert tally.op_rows.duplicated == 2


def test_row_bounds_step_over_untimed_rows(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    starts = [0, 10, 0, 20, 20, 0, 0, 30, 40, 0]
    with sqlite3.connect(path) as connection:
        connection.execute('CREATE TABLE T (start INTEGER, "end" INTEGER)')
        connection.executemany(
            'INSERT INTO T (rowid, start, "end") VALUES (?, ?, ?)',
            [(i + 1, s, s + 1 if s else 0) for i, s in enumerate(starts)],
        )
        end = len(starts) + 1
        found = {t: _first_rowid_from(connection, "T", t, end) for t in (5, 10, 15, 20, 35, 99)}
    # Every row before the bound starts before the time (or is untimed); the bound's own
    # first timed row starts at or after it.
    assert found == {5: 0, 10: 0, 15: 3, 20: 3, 35: 9, 99: 10}


@pytest.mark.parametrize("value", ["'late'", "1.5e9"], ids=["text", "real"])
def test_a_hostile_start_mid_table_meets_the_one_process_answer(value: str, tmp_path: Path) -> None:
    path = tmp_path / "hostile.sqlite"
    shutil.copy("sample_traces/spec_eager.sqlite", path)
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT MAX(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[
            0
        ]
        connection.execute(
            f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = {value} WHERE rowid = ?", (rows // 2,)
        )

    def answer(jobs: int) -> str:
        try:
            return report_json(path, jobs)
        except Exception as error:  # noqa: BLE001 - the answer compared is the error's
            return f"{type(error).__name__}: {error}"

    assert answer(3) == answer(1)
