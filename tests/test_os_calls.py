"""A window's OS calls, read by rowid blocks where the window is analysed (nsys/os_calls.py),
give the index that the calls read whole give."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from tests.builders import global_tid
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.analysis.host import OsCallIndex, held_os_calls, outermost_calls
from trace_gaps.errors import NotAnExportError
from trace_gaps.model import NeedsWholeTrace
from trace_gaps.nsys import os_calls
from trace_gaps.nsys.export import list_tables, open_export
from trace_gaps.nsys.load import load_trace
from trace_gaps.run.one import analyse_export

PID = 100


def _random_calls(builder, seed: int) -> None:
    """Two threads' calls, nested, partly overlapping, zero-length, repeated and long, stored
    in runs that go back in time (as nsys stores OSRT_API)."""
    rng = np.random.default_rng(seed)
    rows = []
    for tid in (1, 2):
        at = 0
        for _ in range(200):
            start = at + int(rng.integers(0, 60))
            length = int(rng.choice([0, 0, 5, 40, 400, 5_000]))
            rows.append((str(rng.choice(["poll", "read", "ioctl"])), start, start + length, tid))
            if rng.random() < 0.05:
                rows.append(rows[-1])  # the same call twice
            at = start + int(rng.integers(-40, 80))
    runs = [rows[i : i + 25] for i in range(0, len(rows), 25)]
    for run in [runs[i] for i in rng.permutation(len(runs))]:
        for name, start, end, tid in sorted(run, key=lambda row: row[1]):
            builder.os_call(name, start, end, pid=PID, tid=tid)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_window_reads_the_calls_the_whole_table_chooses(
    export_builder, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    builder = export_builder().launch("k", 100, 200, 300, 400)
    _random_calls(builder, seed)
    path = builder.write()
    whole = held_os_calls(load_trace(path).os_calls)
    monkeypatch.setattr(os_calls, "BLOCK_ROWS", 16)
    with open_export(path) as connection:
        blocks = os_calls.map_os_calls(connection, path, list_tables(connection, path))
    rng = np.random.default_rng(seed)
    threads = [np.array([global_tid(PID, 1)]), np.array([global_tid(PID, 1), global_tid(PID, 2)])]
    for _ in range(60):
        lo = int(rng.integers(0, 12_000))
        hi = lo + int(rng.integers(1, 3_000))
        for tids in threads:
            expected = OsCallIndex.of(outermost_calls(whole(lo, hi, tids)())).overlapping(lo, hi)
            read = OsCallIndex.of(outermost_calls(blocks.near(lo, hi, tids)())).overlapping(lo, hi)
            pd.testing.assert_frame_equal(
                read.reset_index(drop=True), expected.reset_index(drop=True)
            )


def test_a_value_that_is_no_integer_sends_the_export_to_the_whole_read(export_builder) -> None:
    path = export_builder().launch("k", 100, 200, 300, 400).os_call("poll", 50, 80).write()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE OSRT_API SET \"end\" = 'soon'")
    connection.close()
    with open_export(path) as connection, pytest.raises(NeedsWholeTrace):
        os_calls.map_os_calls(connection, path, list_tables(connection, path))
    # Read whole, the value is refused as before, naming the column.
    with pytest.raises(NotAnExportError, match="OSRT_API"):
        analyse_export(path, AnalysisOptions())


def test_the_whole_read_does_not_map_the_os_calls_as_well(monkeypatch) -> None:
    """load_trace reads the OS calls whole: a map beside it would scan the table again."""
    from tests.conftest import SAMPLE_TRACES

    maps: list[object] = []
    mapped = os_calls.map_os_calls
    monkeypatch.setattr(os_calls, "map_os_calls", lambda *a, **k: maps.append(a) or mapped(*a, **k))
    trace = load_trace(SAMPLE_TRACES / "spec_eager.sqlite")
    assert len(trace.os_calls) == 11472 and maps == []
    # A windowed analysis maps them (the spy sees it), on the stream's own thread.
    analyse_export(SAMPLE_TRACES / "spec_eager.sqlite", AnalysisOptions())
    assert len(maps) == 1
