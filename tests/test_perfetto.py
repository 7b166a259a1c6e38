"""export perfetto: a valid Chrome trace-event file whose steps, stages and idle runs are the
JSON report's, several exports on one clock.

Perfetto's own trace processor (the `perfetto` package) downloads its binary on first use;
offline it cannot run, so the file is checked against the trace-event format here instead:
https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, corpus_trace_paths
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.render.json import render_json
from trace_gaps.render.perfetto import (
    IDLE_CATEGORY,
    METRIC_COUNTERS,
    OP_CATEGORY,
    STAGE_CATEGORY,
    STEP_CATEGORY,
    render_perfetto,
)
from trace_gaps.render.perfetto_links import FLOW_CATEGORY, QUEUE_COUNTER, idle_counter
from trace_gaps.run.timelines import clocked_reports, steps_request
from trace_gaps.vocabulary import SPECIAL_STAGES, Bucket, IdleCause

runner = CliRunner()
Event = dict[str, object]


def _corpus(name: str) -> Path:
    found = next((p for p in corpus_trace_paths() if p.stem == name), None)
    if found is None:
        pytest.skip(f"corpus {name} absent")
    return found


@cache
def _exported(paths: tuple[Path, ...], steps: str | None = None) -> tuple[list[Event], str]:
    """The Perfetto events of the exports, and the JSON report of the same analysis."""
    sources = clocked_reports(list(paths), AnalysisOptions(), steps_request(steps))
    document = json.loads(render_perfetto(sources))
    return document["traceEvents"], render_json(sources[0])


def _ns(us: object) -> int:
    assert isinstance(us, int | float)
    return round(us * 1000)


def assert_trace_event_format(events: list[Event]) -> None:
    """Complete (X), metadata (M), counter (C) and flow (s, f) events only, with the
    fields the format requires, and the X slices of each thread properly nested (what a
    viewer needs to stack them)."""
    named_threads = set()
    for event in events:
        assert event["ph"] in ("X", "M", "C", "s", "f")
        if event["ph"] == "C":
            assert isinstance(event["pid"], int) and isinstance(event["args"], dict)
            assert _ns(event["ts"]) >= 0
            if event["name"] in METRIC_COUNTERS:
                assert 0 <= event["args"]["pct"] <= 100
            else:
                idle_counters = {idle_counter(cause) for cause in IdleCause}
                assert event["name"] == QUEUE_COUNTER or event["name"] in idle_counters
                assert all(isinstance(v, int) and v >= 0 for v in event["args"].values())
            continue
        if event["ph"] in ("s", "f"):  # flows: test_perfetto_flows.py follows each
            assert isinstance(event["id"], int) and event["cat"] == FLOW_CATEGORY
            continue
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["name"], str)
        if event["ph"] == "M":
            assert event["name"] in (
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            )
            if event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
            continue
        assert isinstance(event["cat"], str) and isinstance(event["args"], dict)
        assert _ns(event["ts"]) >= 0 and _ns(event["dur"]) > 0
    by_thread: dict[tuple[object, object], list[tuple[int, int]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            start = _ns(event["ts"])
            by_thread[(event["pid"], event["tid"])].append((start, start + _ns(event["dur"])))
    assert set(by_thread) <= named_threads
    for spans in by_thread.values():
        open_ends: list[int] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], "slices overlap without nesting"
            open_ends.append(end)


def assert_round_trip(events: list[Event], report_json: str, *, shift_ns: int = 0) -> int:
    """Steps, stages and idle runs read back from the file equal the JSON report's step rows
    and step ledger; returns how many steps were compared."""
    report = json.loads(report_json)
    rows = {(p["pid"], r["step_id"]): (r, p) for p in report["processes"] for r in p["step_rows"]}
    steps = [e for e in events if e.get("cat") == STEP_CATEGORY]
    assert steps
    compared = 0
    for step in steps:
        args = step["args"]
        assert isinstance(args, dict)
        pid = step["pid"] if (step["pid"], args["step_id"]) in rows else None
        matches = [(r, p) for (q, s), (r, p) in rows.items() if s == args["step_id"]]
        row, process = rows[(pid, args["step_id"])] if pid is not None else matches[0]
        start, wall = _ns(step["ts"]) - shift_ns, _ns(step["dur"])
        assert (start, wall) == (row["start_offset_ns"], row["wall_ns"])
        assert row["step_index"] == args["step_index"]
        assert (args["busy_ns"], args["idle_ns"], args["wait_ns"]) == (
            row["busy_ns"],
            row["idle_ns"],
            row["wait_ns"],
        )
        inside = [
            e
            for e in events
            if e["pid"] == step["pid"]
            and e["ph"] == "X"
            and start <= _ns(e["ts"]) - shift_ns < start + wall
        ]
        stages = [e for e in inside if e["cat"] == STAGE_CATEGORY and e["tid"] == step["tid"]]
        # Stage slices tile the step, each named for a stage of the report.
        assert sum(_ns(e["dur"]) for e in stages) == wall
        names = {s["name"] for s in process["stages"]} | set(SPECIAL_STAGES)
        assert {e["name"] for e in stages} <= names
        # Idle slices per cause are the step ledger's idle by cause (every stage summed).
        idle: dict[str, int] = defaultdict(int)
        for e in inside:
            if e["cat"] == IDLE_CATEGORY:
                idle[str(e["name"])] += _ns(e["dur"])
        ledger: dict[str, int] = defaultdict(int)
        for entry in process["step_ledger"]:
            if entry["step_id"] == args["step_id"] and entry["bucket"] == Bucket.IDLE.value:
                ledger[entry["cause"]] += entry["duration_ns"]
        assert {k: v for k, v in idle.items() if v} == {k: v for k, v in ledger.items() if v}
        compared += 1
    return compared


@pytest.mark.parametrize(
    "name", ["spec_eager", "spec_graph_node", "spec_graph_graphmode", "spec_two_ranks"]
)
def test_samples_export_valid_trace_events_that_round_trip(name):
    events, report = _exported((SAMPLE_TRACES / f"{name}.sqlite",))
    assert_trace_event_format(events)
    assert assert_round_trip(events, report) >= 10


# A serving capture's cycle steps too in the thorough run.
@pytest.mark.parametrize(
    "name",
    ["hf_assisted", pytest.param("serving_vllm_scopes", marks=pytest.mark.thorough), "tp_eager"],
)
def test_corpus_exports_valid_trace_events_that_round_trip(name):
    events, report = _exported((_corpus(name),), "0:6")
    assert_trace_event_format(events)
    assert assert_round_trip(events, report) >= 3


def test_every_layer_has_a_track_and_candidates_sit_on_analysed_steps():
    events, report = _exported((SAMPLE_TRACES / "spec_eager.sqlite",))
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}  # type: ignore[index]
    assert {"GPU idle (by cause)", "candidates"} <= threads
    assert any(str(t).startswith("CUDA API") for t in threads)
    assert any(str(t).startswith("GPU 0 stream") for t in threads)
    candidates = [e for e in events if e.get("cat") == "candidate"]
    top = json.loads(report)["processes"][0]["candidates"][0]
    assert candidates[0]["args"]["verdict"] == top["verdict"]  # type: ignore[index]
    warm = {
        e["ts"]
        for e in events
        if e.get("cat") == STEP_CATEGORY and e["args"]["is_warmup"]  # type: ignore[index]
    }
    assert warm and not {c["ts"] for c in candidates} & warm


def test_collective_waits_have_their_own_track():
    events, _ = _exported((_corpus("tp_eager"),), "0:6")
    waits = [e for e in events if e.get("cat") == "collective_wait"]
    assert waits and all(e["name"] for e in waits)


def test_two_rank_exports_are_on_one_clock():
    paths = (_corpus("tp_rank0"), _corpus("tp_rank1"))
    events, _ = _exported(paths, "2:8")
    assert_trace_event_format(events)
    steps = [e for e in events if e.get("cat") == STEP_CATEGORY]
    pids = sorted({e["pid"] for e in steps})  # type: ignore[type-var]
    assert len(pids) == 2
    by_index = defaultdict(list)
    for step in steps:
        start = _ns(step["ts"])
        by_index[step["args"]["step_index"]].append((start, start + _ns(step["dur"])))  # type: ignore[index]
    assert len(by_index) == 6
    for spans in by_index.values():
        # The same step of both ranks overlaps once aligned (each export counts from its own
        # session start, seconds apart).
        (a_start, a_end), (b_start, b_end) = spans
        assert a_start < b_end and b_start < a_end
    # Aligned by their collectives: the k-th all-reduce of each rank ends at one time.
    ends: dict[object, list[int]] = defaultdict(list)
    for op in events:
        if op.get("cat") == OP_CATEGORY and "nccl" in str(op["name"]).lower():
            ends[op["pid"]].append(_ns(op["ts"]) + _ns(op["dur"]))
    first, second = (sorted(ends[pid]) for pid in pids)
    assert len(first) == len(second) > 0
    assert max(abs(a - b) for a, b in zip(first, second, strict=True)) < 10_000


def test_the_command_writes_the_file(tmp_path):
    output = tmp_path / "run.json"
    path = SAMPLE_TRACES / "spec_sync.sqlite"
    result = runner.invoke(
        app, ["export", "perfetto", str(path), "-o", str(output), "--steps", "1:3"]
    )
    assert result.exit_code == 0, result.output
    events = json.loads(output.read_text())["traceEvents"]
    assert sorted(e["args"]["step_index"] for e in events if e.get("cat") == STEP_CATEGORY) == [
        1,
        2,
    ]
    assert json.loads(output.read_text())["otherData"]["tool_version"]


def test_the_command_refuses_the_export_as_output_and_a_bad_range(tmp_path):
    path = SAMPLE_TRACES / "spec_sync.sqlite"
    result = runner.invoke(app, ["export", "perfetto", str(path), "-o", str(path)])
    assert result.exit_code == 1 and "destroy" in result.output
    result = runner.invoke(
        app, ["export", "perfetto", str(path), "-o", str(tmp_path / "x.json"), "--steps", "3:1"]
    )
    assert result.exit_code == 2 and "A:B" in result.output  # a usage error


def test_a_long_stage_name_is_written_whole_once(tmp_path):
    """issue 45: the stage name was copied into every op's args (and held 4 bytes a character
    per op: numpy's str dtype); a 100 KB one gave a 630 MB file and 5.1 GB of memory, a 1 MB
    one exhausted the machine's."""
    import resource
    import shutil
    import sqlite3
    import subprocess
    import sys

    export = Path(shutil.copy(SAMPLE_TRACES / "plain_decode.sqlite", tmp_path / "r.sqlite"))
    long_name = "forward_" + "x" * 100_000
    with sqlite3.connect(export) as connection:
        connection.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", (long_name,))
    connection.close()
    out = tmp_path / "t.json"
    command = [
        sys.executable,
        "-m",
        "trace_gaps",
        "export",
        "perfetto",
        str(export),
        "-o",
        str(out),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    # The largest child of this test process so far: this one, or an earlier (smaller) one.
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1_500_000  # KiB
    # 630 MB before; the clean export gives 16 MB (8 MB of slices, 8 MB of flows and counters).
    assert out.stat().st_size < 30_000_000
    document = json.loads(out.read_text())
    events = document["traceEvents"]
    assert_trace_event_format(events)
    full_names = document["otherData"]["full_names"]
    (cut,) = [short for short, full in full_names.items() if full == long_name]
    assert sum(e.get("args", {}).get("stage") == cut for e in events) > 1000  # every op's
    assert all(len(e["name"]) <= 1_000 for e in events)


def test_gpu_metrics_are_counter_tracks_inside_the_steps_drawn():
    # gm_sync_graph, captured with --gpu-metrics-devices=all at 20 kHz.
    events, _ = _exported((_corpus("gm_sync_graph"),), "0:4")
    assert_trace_event_format(events)
    steps = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events if e.get("cat") == "step"]
    counters = [e for e in events if e["ph"] == "C" and e["name"] in METRIC_COUNTERS]
    by_name = {name: [e for e in counters if e["name"] == name] for name in METRIC_COUNTERS}
    # One value a sample (50 us) of each metric: about 40 a 2 ms step.
    assert all(len(found) >= 30 * len(steps) for found in by_name.values()), len(counters)
    assert all(any(lo <= _ns(e["ts"]) < hi for lo, hi in steps) for e in counters)
    assert max(e["args"]["pct"] for e in by_name["GPU DRAM read % of peak"]) > 10


def test_an_export_without_gpu_metrics_has_no_metric_counter_track():
    events, _ = _exported((SAMPLE_TRACES / "spec_eager.sqlite",))
    assert not [e for e in events if e["ph"] == "C" and e["name"] in METRIC_COUNTERS]
