"""export perfetto's flows (each CUDA call to the GPU op it launched) and its counter tracks
(queue depth, idle so far by cause), checked against the export itself read with sqlite3."""

from __future__ import annotations

import bisect
import json
import sqlite3
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.render.perfetto import API_CATEGORY, IDLE_CATEGORY, OP_CATEGORY, render_perfetto
from trace_gaps.render.perfetto_links import FLOW_CATEGORY, QUEUE_COUNTER, idle_counter
from trace_gaps.run.timelines import clocked_reports, steps_request

Event = dict[str, object]
SPEC_EAGER = SAMPLE_TRACES / "spec_eager.sqlite"


@cache
def _document(path: Path, steps: str) -> dict[str, object]:
    reports = clocked_reports([path], AnalysisOptions(), steps_request(steps))
    document: dict[str, object] = json.loads(render_perfetto(reports))
    return document


def _ns(us: object) -> int:
    assert isinstance(us, int | float)
    return round(us * 1000)


Tracks = dict[tuple[object, object], tuple[list[int], list[Event]]]


def _tracks(events: list[Event]) -> Tracks:
    """The X slices of each (pid, tid), in time order, with their starts."""
    tracks: Tracks = defaultdict(lambda: ([], []))
    for event in sorted((e for e in events if e["ph"] == "X"), key=lambda e: _ns(e["ts"])):
        starts, slices = tracks[(event["pid"], event["tid"])]
        starts.append(_ns(event["ts"]))
        slices.append(event)
    return tracks


def _enclosing(tracks: Tracks, event: Event) -> Event:
    """The slice on the event's track whose [ts, ts + dur) holds the event's ts (the tracks
    that flows join hold no overlapping slices)."""
    starts, slices = tracks[(event["pid"], event["tid"])]
    at = bisect.bisect_right(starts, _ns(event["ts"])) - 1
    assert at >= 0
    found = slices[at]
    assert _ns(found["ts"]) <= _ns(event["ts"]) < _ns(found["ts"]) + _ns(found["dur"])
    return found


def _launches_with_ops_in_steps(path: Path, steps: list[tuple[int, int, int, int]]) -> int:
    """GPU ops (kernels, memcpys, memsets) overlapping a drawn step of their process whose
    runtime call, on that step's thread, overlaps a drawn step: counted from the export.
    steps: (pid, tid, start_ns, end_ns) on the export's clock."""
    with sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True) as conn:
        calls = conn.execute(
            "SELECT correlationId, start, end, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        ).fetchall()
        ops = [
            row
            for table in ("KERNEL", "MEMCPY", "MEMSET")
            for row in conn.execute(
                "SELECT correlationId, start, end, globalPid FROM CUPTI_ACTIVITY_KIND_" + table
            ).fetchall()
        ]

    def in_steps(pid: int, tid: int | None, start: int, end: int) -> bool:
        return start < end and any(
            p == pid and (tid is None or t == tid) and start < hi and end > lo
            for p, t, lo, hi in steps
        )

    launched = {
        (global_tid >> 24 & 0xFFFFFF, correlation_id)
        for correlation_id, start, end, global_tid in calls
        if in_steps(global_tid >> 24 & 0xFFFFFF, global_tid & 0xFFFFFF, start, end)
    }
    return sum(
        (global_pid >> 24 & 0xFFFFFF, correlation_id) in launched
        and in_steps(global_pid >> 24 & 0xFFFFFF, None, start, end)
        for correlation_id, start, end, global_pid in ops
    )


@pytest.mark.parametrize("name", ["spec_eager", "spec_graph_node", "spec_two_ranks"])
def test_each_flow_joins_a_launch_call_to_the_op_of_its_correlation_id(name):
    path = SAMPLE_TRACES / f"{name}.sqlite"
    document = _document(path, "0:20")
    events = document["traceEvents"]
    assert isinstance(events, list)
    slices = _tracks(events)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)
    assert len(starts) == sum(e["ph"] == "s" for e in events)  # ids are unique
    for flow_id, start in starts.items():
        end = ends[flow_id]
        assert start["cat"] == end["cat"] == FLOW_CATEGORY and end["bp"] == "e"
        call, op = _enclosing(slices, start), _enclosing(slices, end)
        assert (call["cat"], op["cat"]) == (API_CATEGORY, OP_CATEGORY)
        call_args, op_args = call["args"], op["args"]
        assert isinstance(call_args, dict) and isinstance(op_args, dict)
        assert call_args["correlation_id"] == op_args["correlation_id"]
        # Launches, and the calls that also wait (cudaMemcpy is a sync that queues a copy).
        assert call_args["category"] != "other", call["name"]

    # As many flows as launches with an op in the drawn steps, recounted from the export.
    origin = int(str(document["otherData"]["trace_start_ns"]))  # type: ignore[index]
    steps = [
        (e["pid"], e["tid"], origin + _ns(e["ts"]), origin + _ns(e["ts"]) + _ns(e["dur"]))
        for e in events
        if e.get("cat") == "step"
    ]
    assert steps
    assert len(starts) == _launches_with_ops_in_steps(path, steps)  # type: ignore[arg-type]


def test_queue_depth_and_idle_by_cause_are_counter_tracks():
    events = _document(SPEC_EAGER, "0:20")["traceEvents"]
    assert isinstance(events, list)
    depth = [e["args"]["ops"] for e in events if e["name"] == QUEUE_COUNTER]
    assert depth and min(depth) >= 0 and max(depth) >= 1
    # Each cause's last value is the idle of that cause the slices show, summed.
    by_cause: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == IDLE_CATEGORY:
            by_cause[str(e["name"])] += _ns(e["dur"])
    assert len(by_cause) >= 3
    for cause, idle_ns in by_cause.items():
        values = [e for e in events if e["name"] == idle_counter(cause)]
        assert values[0]["args"] == {"ns": 0}
        assert max(values, key=lambda e: _ns(e["ts"]))["args"] == {"ns": idle_ns}
