"""Invariants of the step ledger on random exports (hypothesis).

Random steps and stages on one thread; random eager launches, graph-level replays, node-level
graph kernels, copies, ops with no launching call, untimed rows, ops launched from a second
thread; several streams, overlaps, queueing, ops running past their step. For every export:
- each step's ledger adds up to its wall time exactly;
- total busy = the union of op intervals clipped to the steps (no op counted twice, none lost);
- no stage is charged more busy time than its own ops ran inside steps.
And cut into random windows and chunks, in memory and streamed from the file
(stream_export), the export gives the report of one whole pass, or a refusal.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pandas as pd
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from tests.builders import ExportBuilder, projected_frames
from tests.conftest import THOROUGH
from trace_gaps.analysis import grouped
from trace_gaps.analysis.engine.metrics import LEDGER
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions, analyse_trace
from trace_gaps.analysis.ledger import BUCKET, DURATION_NS, _sums_by_key
from trace_gaps.analysis.stages import STAGE
from trace_gaps.analysis.steps import STEP_ID
from trace_gaps.model import NeedsWholeTrace
from trace_gaps.nsys import read
from trace_gaps.nsys.load import load_trace
from trace_gaps.nsys.stream import stream_export
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report
from trace_gaps.run.one import analyse_stream
from trace_gaps.vocabulary import Bucket

STAGE_NAMES = ["draft", "verify", "accept"]
OP_KINDS = ["eager", "eager", "graph_replay", "graph_nodes", "memcpy", "no_call", "untimed"]


@dataclass(frozen=True)
class Op:
    kind: str
    call_start_ns: int
    call_ns: int
    queue_ns: int
    run_ns: int
    stream_id: int
    tid: int
    nodes: int


@st.composite
def ops(draw: st.DrawFn, start_ns: int, end_ns: int) -> Op:
    return Op(
        kind=draw(st.sampled_from(OP_KINDS)),
        call_start_ns=draw(st.integers(start_ns - 500, end_ns)),
        call_ns=draw(st.integers(1, 500)),
        queue_ns=draw(st.integers(-300, 3_000)),
        run_ns=draw(st.integers(1, 5_000)),
        stream_id=draw(st.integers(1, 3)),
        tid=draw(st.sampled_from([100, 100, 100, 101])),
        nodes=draw(st.integers(1, 3)),
    )


@st.composite
def decode_loops(
    draw: st.DrawFn,
) -> tuple[list[tuple[int, int, list[tuple[str, int, int]]]], list[Op]]:
    """Steps (start, end, stages) back to back with random gaps, and the ops launched in them."""
    steps = []
    all_ops: list[Op] = []
    now = 1_000
    for _ in range(draw(st.integers(1, 5))):
        start = now + draw(st.integers(0, 2_000))
        end = start + draw(st.integers(1_000, 20_000))
        cuts = sorted(draw(st.lists(st.integers(start, end), max_size=4, unique=True)))
        bounds = [start, *cuts, end]
        stages = [
            (draw(st.sampled_from(STAGE_NAMES)), a, b)
            for a, b in zip(bounds, bounds[1:], strict=False)
            if b > a and draw(st.booleans())
        ]
        steps.append((start, end, stages))
        all_ops += draw(st.lists(ops(start, end), max_size=6))
        now = end
    return steps, all_ops


def write_export(
    directory: Path, steps, all_ops: list[Op], *, in_start_order: bool = False
) -> tuple[Path, list[tuple[int, int]]]:
    """Write the export; return it and the timed op intervals it holds.

    in_start_order: each activity table's rows sorted by start, as nsys writes them.
    """
    builder = ExportBuilder(directory)
    intervals: list[tuple[int, int]] = []
    for start, end, stages in steps:
        builder.range("decode_step", start, end)
        for name, a, b in stages:
            builder.range(name, a, b)
    # The API call that launches each kind of op ("no_call" ops have none).
    launching_call = {
        "untimed": "cudaLaunchKernel",
        "memcpy": "cudaMemcpyAsync",
        "graph_replay": "cudaGraphLaunch",
        "graph_nodes": "cudaGraphLaunch",
        "eager": "cudaLaunchKernel",
    }
    correlation = 1
    # A stream runs one op at a time: an op starts no earlier than the one before it on its
    # stream ended (the export is checked for ops that hold the next op of their stream:
    # tests/test_timelines.py). Copies and graph-level replays share the builder's stream 7.
    free_at: dict[int, int] = {}
    for op in all_ops:
        call_end = op.call_start_ns + op.call_ns
        stream = 7 if op.kind in ("memcpy", "graph_replay") else op.stream_id
        op_start = max(0, call_end + op.queue_ns, free_at.get(stream, 0))
        op_end = op_start + op.run_ns
        if op.kind != "untimed":
            nodes = op.nodes if op.kind == "graph_nodes" else 1
            free_at[stream] = op_start + nodes * op.run_ns
        correlation += 1
        if op.kind != "no_call":
            api = launching_call[op.kind]
            builder.call(api, op.call_start_ns, call_end, tid=op.tid, correlation_id=correlation)
        if op.kind == "untimed":
            builder.kernel("k", 0, 0, stream_id=op.stream_id, correlation_id=correlation)
            continue
        if op.kind == "no_call":
            builder.kernel(
                "orphan",
                op_start,
                op_end,
                stream_id=op.stream_id,
                correlation_id=10_000 + correlation,
            )
        elif op.kind == "memcpy":
            builder.memcpy(op_start, op_end, correlation_id=correlation)
        elif op.kind == "graph_replay":
            builder.graph_replay(op_start, op_end, correlation_id=correlation)
        elif op.kind == "graph_nodes":
            for node in range(op.nodes):
                # Nodes run one after another, each as long as the op.
                node_start = op_start + node * op.run_ns
                builder.kernel(
                    f"node{node}",
                    node_start,
                    node_start + op.run_ns,
                    stream_id=op.stream_id,
                    correlation_id=correlation,
                    graph_node_id=node,
                )
                intervals.append((node_start, node_start + op.run_ns))
            continue
        else:
            builder.kernel(
                "gemm", op_start, op_end, stream_id=op.stream_id, correlation_id=correlation
            )
        intervals.append((op_start, op_end))
    if in_start_order:
        builder.in_start_order()
    return builder.write(), intervals


def union_inside(intervals: list[tuple[int, int]], windows: list[tuple[int, int]]) -> int:
    """ns covered by at least one interval, inside the (disjoint) windows."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return sum(
        max(0, min(end, w_end) - max(start, w_start))
        for start, end in merged
        for w_start, w_end in windows
    )


def analyse(path: Path, step_name: str | None) -> Analysis:
    return analyse_trace(load_trace(path), AnalysisOptions(step_name=step_name, skip=0))


@given(loop=decode_loops(), named=st.booleans())
# Found by CI: the only launching thread is not the step thread, so it is borrowed.
@example(loop=([(1000, 2000, [])], [Op("eager", 1000, 1, 0, 1, 1, 101, 1)]), named=True)
def test_the_ledger_adds_up_and_counts_every_op_once(loop, named):
    steps, all_ops = loop
    if not any(op.kind != "untimed" for op in all_ops):
        all_ops = [*all_ops, Op("eager", steps[0][0], 10, 10, 100, 1, 100, 1)]
    with tempfile.TemporaryDirectory() as directory:
        path, intervals = write_export(Path(directory), steps, all_ops)
        analysis = analyse(path, "decode_step" if named else None)
        projected = projected_frames(load_trace(path), analysis)[1]

    ledger, cut = analysis.metrics[LEDGER], analysis.steps
    assert (ledger[DURATION_NS] > 0).all()
    walls = (cut["end_ns"] - cut["start_ns"]).set_axis(cut[STEP_ID])
    charged = ledger.groupby(STEP_ID)[DURATION_NS].sum().reindex(walls.index, fill_value=0)
    assert charged.to_dict() == walls.to_dict()

    windows = list(zip(cut["start_ns"], cut["end_ns"], strict=True))
    busy = ledger[ledger[BUCKET] == Bucket.BUSY.value]
    assert int(busy[DURATION_NS].sum()) == union_inside(intervals, windows)

    for stage, charged_ns in busy.groupby(STAGE)[DURATION_NS].sum().items():
        own = projected[projected[STAGE] == stage]
        own_intervals = list(zip(own["start_ns"], own["end_ns"], strict=True))
        ran_ns = sum(union_inside([interval], windows) for interval in own_intervals)
        assert charged_ns <= ran_ns, analysis.stage_map.names[int(stage)]


@given(
    loop=decode_loops(),
    window_rows=st.integers(1, 3),
    chunk_rows=st.integers(1, 12),
)
# Found by this test (session 5): a copy call across two steps that returned after its op
# finished (a sync) lost its op when the first window ended, and became a launch after.
@example(
    loop=(
        [(2391, 4391, []), (4391, 5391, [("draft", 4391, 5391)]), (5391, 6391, [])],
        [
            Op("eager", 1891, 1, 0, 1, 1, 100, 1),
            Op("eager", 3891, 1, 0, 1, 1, 100, 1),
            Op("eager", 3891, 1, 0, 1, 1, 100, 1),
            Op("memcpy", 4305, 189, -149, 1, 1, 100, 1),
        ],
    ),
    window_rows=1,
    chunk_rows=1,
)
def test_any_cut_into_windows_gives_the_whole_trace_report(loop, window_rows, chunk_rows):
    # Random loops (queued, graph, untimed, other-thread and call-less ops; syncs across
    # steps) cut into random windows and chunks, in memory and streamed from the file: the
    # same report as one pass, or a refusal.
    steps, all_ops = loop
    if not any(op.kind != "untimed" for op in all_ops):
        all_ops = [*all_ops, Op("eager", steps[0][0], 10, 10, 100, 1, 100, 1)]
    options = AnalysisOptions(step_name="decode_step", skip=0)
    with tempfile.TemporaryDirectory() as directory:
        # In start order, as nsys writes it: the streamed reader refuses other orders.
        path, _ = write_export(Path(directory), steps, all_ops, in_start_order=True)
        trace = load_trace(path)
        whole = render_json(build_report(trace, analyse_trace(trace, options)))
        try:
            windowed = analyse_trace(trace, options, window_rows=window_rows, chunk_rows=chunk_rows)
            event("one window" if windowed.windows == 1 else "several windows")
            assert render_json(build_report(trace, windowed)) == whole
        except NeedsWholeTrace:
            event("refused in memory")  # the CLI analyses it whole, which is `whole`
        with patch.object(read, "CHUNK_ROWS", chunk_rows), stream_export(path) as export:
            try:
                streamed = analyse_stream(export, options, window_rows=window_rows)
            except NeedsWholeTrace:
                event("refused streamed")
                return
            assert render_json(build_report(export.trace(), streamed)) == whole


@given(
    st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**30)), min_size=0, max_size=300),
    st.integers(1, 50),
)
def test_sums_by_key_match_a_group_by_on_narrow_and_wide_keys(
    pairs: list[tuple[int, int]], spread: int
) -> None:
    # Narrow keys (divided by a large spread land in few bins) take the binned path; the
    # raw keys span up to 2**40 and take the sorted one: both must equal a pandas group-by.
    for keys in ([k // (2**40 // spread) for k, _ in pairs], [k for k, _ in pairs]):
        key = np.array(keys, dtype=np.int64)
        values = np.array([v for _, v in pairs], dtype=np.int64)
        unique, sums = _sums_by_key(key, values)
        expected = pd.Series(values).groupby(key).sum()
        assert unique.tolist() == expected.index.tolist()
        assert sums.dtype == np.int64
        assert sums.tolist() == expected.tolist()


@given(
    st.lists(
        st.tuples(
            st.sampled_from([3, 7, 2**40]),  # pid
            st.integers(0, 4),  # stage
            st.one_of(st.none(), st.sampled_from(["b", "a", "c"])),  # name (None: missing)
            st.one_of(st.integers(0, 2**31), st.integers(2**50, 2**56)),  # duration
        ),
        max_size=60,
    ),
    st.sampled_from(["dense", "sorted", "pandas"]),
    st.sampled_from(["categorical", "text"]),
)
def test_summed_by_matches_a_pandas_group_by(
    rows: list[tuple[int, int, str | None, int]], path, names
):
    # Names categorical with an unused category and categories out of alphabetical order,
    # or plain text (pandas' str dtype, an extension dtype); durations large enough to take
    # the exact integer sums; each grouping path forced.
    name_values = [r[2] for r in rows]
    frame = pd.DataFrame(
        {
            "pid": np.array([r[0] for r in rows], dtype=np.int64),
            "stage": np.array([r[1] for r in rows], dtype=np.int64),
            "name": pd.Categorical(name_values, categories=["c", "a", "b", "unused"])
            if names == "categorical"
            else pd.array(name_values, dtype="str"),
        }
    )
    values = np.array([r[3] for r in rows], dtype=np.int64)
    keys = ["pid", "stage", "name"]
    with (
        patch.object(grouped, "DENSE_SLACK", 0 if path == "sorted" else grouped.DENSE_SLACK),
        patch.object(grouped, "COMBINED_MAX", 1 if path == "pandas" else grouped.COMBINED_MAX),
    ):
        found = grouped.summed_by(frame, keys, {"total": values}, "count")
    expected = (
        frame.assign(total=values)
        .groupby(keys, observed=True)
        .agg(total=("total", "sum"), count=("total", "size"))
        .reset_index()
    )
    pd.testing.assert_frame_equal(found, expected, check_index_type=False)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),  # step (steps 0-1 in pid 10, 2-4 in pid 20, 5 a warm-up)
            st.integers(0, 3),  # stage
            st.integers(0, 10_000),  # start
            st.integers(1, 40),  # duration: small, so that ties are common
        ),
        max_size=80,
    ),
    st.integers(1, 4),
)
def test_longest_gaps_keep_what_sorting_every_gap_keeps(rows, top):
    # longest_gaps sorts only the gaps as long as their group's top-th longest; the rows
    # kept, and their order, must be those of sorting every gap (merge_longest_gaps).
    from trace_gaps.analysis.engine.metrics import longest_gaps, merge_longest_gaps
    from trace_gaps.analysis.ledger import CAUSE
    from trace_gaps.analysis.steps import IS_WARMUP
    from trace_gaps.model import END_NS, PID, START_NS

    steps = pd.DataFrame(
        {
            STEP_ID: np.arange(6, dtype=np.int64),
            PID: np.array([10, 10, 20, 20, 20, 20], dtype=np.int64),
            IS_WARMUP: np.array([False] * 5 + [True]),
        }
    )
    gaps = pd.DataFrame(
        {
            STEP_ID: np.array([r[0] for r in rows], dtype=np.int64),
            STAGE: np.array([r[1] for r in rows], dtype=np.int64),
            START_NS: np.array([r[2] for r in rows], dtype=np.int64),
            END_NS: np.array([r[2] + r[3] for r in rows], dtype=np.int64),
            CAUSE: ["host"] * len(rows),
        }
    )
    analysed = gaps[gaps[STEP_ID] < 5]
    every = analysed.assign(**{PID: np.where(analysed[STEP_ID] < 2, 10, 20)})
    every = every.assign(duration=every[END_NS] - every[START_NS])
    expected = merge_longest_gaps([every], top)
    pd.testing.assert_frame_equal(longest_gaps(gaps, steps, top), expected)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([1, 2, 70_000]),  # pid
            st.one_of(st.just(-1), st.integers(0, 40), st.integers(2**36, 2**36 + 3)),  # id
        ),
        max_size=60,
    ),
    st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(-2, 45)), max_size=40),  # looked up
    st.integers(0, 70),  # prefix
    st.sampled_from(["dense", "sorted"]),
)
def test_launch_index_finds_the_first_call_of_each_key(calls, wanted, prefix, path):
    # The first call (lowest position) with each (pid, correlation id), or -1, whichever
    # lookup answers: a dense table per process (ids near each other) or sorted keys (ids
    # 2**36 apart force the sorted one on its own; `path` forces it on any ids).
    from trace_gaps.analysis.launch_index import LaunchIndex, _DenseLookup

    staged = pd.DataFrame(
        {
            "pid": np.array([c[0] for c in calls], dtype=np.int64),
            "correlation_id": np.array([c[1] for c in calls], dtype=np.int64),
        }
    )
    index = LaunchIndex.of(staged, dense=path == "dense").prefix(prefix)
    if path == "sorted":
        assert not isinstance(index.lookup, _DenseLookup)
    seen = staged.iloc[: min(prefix, len(staged))]

    def first(pid: int, cid: int) -> int:
        hits = np.flatnonzero((seen["pid"] == pid).to_numpy() & (seen["correlation_id"] == cid))
        return int(hits[0]) if cid >= 0 and len(hits) else -1

    pids = np.array([w[0] for w in wanted], dtype=np.int64)
    ids = np.array([w[1] for w in wanted], dtype=np.int64)
    assert index.find(pids, ids).tolist() == [first(p, c) for p, c in wanted]
    own = [first(p, c) for p, c in zip(seen["pid"], seen["correlation_id"], strict=True)]
    assert index.first_calls().tolist() == own


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(-(2**40), 2**40)),
        max_size=50,
    ),
)
def test_running_max_per_step_matches_a_group_by(rows):
    # find_host_gaps and launch_spacing take running maxima per step in one accumulate.
    from trace_gaps.analysis.long_gaps import _running_max

    step = np.array([r[0] for r in rows], dtype=np.int64)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    end = np.array([r[2] for r in rows], dtype=np.int64)
    order = np.lexsort((-end, start, step))
    step, end = step[order], end[order]
    first = np.r_[True, step[1:] != step[:-1]] if len(step) else np.zeros(0, dtype=bool)
    by_pandas = pd.Series(end, dtype="int64").groupby(step).cummax().to_numpy()
    assert _running_max(end, first).tolist() == by_pandas.tolist()


@given(
    threads=st.lists(
        st.lists(st.tuples(st.integers(0, 50), st.integers(1, 50)), max_size=6),
        min_size=1,
        max_size=3,
    ),
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-10, 700)), max_size=40),
)
@example(threads=[[(0, 10)]], rows=[(0, 5), (1, 5)])  # a row off the only stepped thread
@example(threads=[[(5, 10)], [(0, 10)]], rows=[(0, 0), (1, 0), (0, 5), (1, 14)])
@settings(max_examples=300 if THOROUGH else 30)  # a pure function: cheap examples
def test_step_at_finds_the_step_open_on_each_rows_thread(threads, rows):
    # step_at's paths: one thread with steps (all rows on it, or some elsewhere) and
    # several, against a search of every step. Steps: per thread, gaps and lengths.
    from trace_gaps.analysis.steps import step_at
    from trace_gaps.model import END_NS, GLOBAL_TID, START_NS

    steps = []
    for tid, gaps_and_lengths in enumerate(threads):
        at = 0
        for gap, length in gaps_and_lengths:
            steps.append((len(steps), tid, at + gap, at + gap + length))
            at += gap + length
    frame = pd.DataFrame(steps, columns=[STEP_ID, GLOBAL_TID, START_NS, END_NS], dtype="int64")
    tids = np.array([tid for tid, _ in rows], dtype=np.int64)
    times = np.array([time for _, time in rows], dtype=np.int64)
    expected = [
        next((s for s, t, lo, hi in steps if t == tid and lo <= time < hi), -1)
        for tid, time in rows
    ]
    assert step_at(frame, tids, times).tolist() == expected


@given(
    n=st.integers(0, 400),
    ranks=st.lists(st.integers(0, 400), max_size=60),
    less=st.none() | st.lists(st.integers(0, 400), max_size=60),
    sort=st.booleans(),
)
@example(n=100, ranks=[3, 3, 50], less=[10], sort=True)  # few ranks: the repeated steps
@example(n=10, ranks=[0, 2, 2, 9, 10], less=[1, 5], sort=False)  # many: the bins
@settings(max_examples=300 if THOROUGH else 30)  # a pure function: cheap examples
def test_the_ledgers_running_count_matches_counting_each_position(n, ranks, less, sort):
    # running_count's two paths (bins when the ranks are many, steps when few; sorted or
    # not) against a count at every position.
    from trace_gaps.analysis.segments import running_count

    ranks = [min(r, n) for r in (sorted(ranks) if sort else ranks)]
    less = None if less is None else [min(r, n) for r in less]
    expected = [
        sum(r <= k for r in ranks) - (0 if less is None else sum(r <= k for r in less))
        for k in range(n)
    ]
    got = running_count(
        np.array(ranks, dtype=np.int64), n, None if less is None else np.array(less, dtype=np.int64)
    )
    assert got.dtype == np.int64 and got.tolist() == expected
