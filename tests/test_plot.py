"""Timeline data and figures: lanes, titles, legends, colours, step choice, bars per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from tests.conftest import (
    REPRESENTATIVE_PEERS,
    REPRESENTATIVE_SAMPLES,
    peer_trace_paths,
    sample_trace_paths,
    shipped_report,
    sweep,
)
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.cli import app
from trace_gaps.nsys.load import load_trace
from trace_gaps.plot import plot_steps, plot_timeline
from trace_gaps.plot.lanes import merge_spans
from trace_gaps.plot.palette import stage_colours
from trace_gaps.plot.steps import MAX_BARS, WARMUP_ALPHA
from trace_gaps.records.report import Report
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report
from trace_gaps.report.timeline import StepPick, TimelineRequest

STEP_SPACING_NS = 1_600_000
WORST_STEP = 3


def decode_loop(builder: ExportBuilder, steps: int = 6) -> ExportBuilder:
    """A decode loop: draft (eager launches), verify (a graph + a side stream), accept (a sync).

    Per step at offset o (us from o); step 0 also loads a module (warm-up), step 3 is slow:
      thread  [decode_step 0 .......................................... 1000 (1300 in step 3)]
              [draft 0..300     ][verify 300..800 (1100)           ][accept ..+200        ]
      calls    |l|l|l|...(20)     |graphLaunch|  |l|                 [sync 20..100] |l|
      str 7      [k][k][k]...         [graph 400 (700) us ........]                 [k]
      str 13                                 [k 50 us]
    """
    for step in range(steps):
        o = step * STEP_SPACING_NS
        slow = 300_000 if step == WORST_STEP else 0
        end = o + 1_000_000 + slow
        builder.range("decode_step", o, end)
        builder.range("draft", o, o + 300_000)
        builder.range("verify", o + 300_000, o + 800_000 + slow)
        builder.range("accept", o + 800_000 + slow, end)
        if step == 0:
            builder.call("cuModuleLoadData", o + 1_000, o + 9_000)
        for k in range(20):
            t = o + 10_000 + k * 14_000
            builder.launch("draft_gemm", t, t + 5_000, t + 7_000, t + 15_000)
        corr = builder.next_correlation
        builder.call("cudaGraphLaunch", o + 310_000, o + 320_000, correlation_id=corr)
        builder.graph_replay(o + 330_000, o + 730_000 + slow, correlation_id=corr)
        builder.launch(
            "verify_side", o + 330_000, o + 335_000, o + 340_000, o + 390_000, stream_id=13
        )
        a = o + 800_000 + slow
        builder.call("cudaStreamSynchronize", a + 20_000, a + 100_000)
        builder.launch("accept_kernel", a + 110_000, a + 115_000, a + 120_000, a + 150_000)
    return builder


def decode_report(path: Path, *requests: TimelineRequest, **options: object) -> Report:
    trace = load_trace(path)
    analysis = analyse_trace(
        trace,
        AnalysisOptions(**options),  # type: ignore[arg-type]
        timelines=requests or (TimelineRequest(),),
    )
    return build_report(trace, analysis)


@pytest.fixture
def decode_export(export_builder) -> Path:  # type: ignore[no-untyped-def]
    return decode_loop(export_builder()).write("decode.sqlite")


def lane_colours(ax: Axes) -> dict[str, set[str]]:
    """Per lane (its y tick label), the face colours of the opaque bars drawn on it."""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    found: dict[str, set[str]] = {label: set() for label in labels}
    for collection in ax.collections:
        if not isinstance(collection, PolyCollection) or collection.get_alpha() not in (None, 1.0):
            continue
        for path, face in zip(
            collection.get_paths(),
            np.broadcast_to(collection.get_facecolors(), (len(collection.get_paths()), 4)),
            strict=True,
        ):
            lane = int(round(path.vertices[:, 1].mean()))
            found[labels[lane]].add(to_hex(face))
    return found


def legend_colours(fig: Figure) -> dict[str, str]:
    return {
        text.get_text(): to_hex(patch.get_facecolor())
        for legend in fig.legends
        for text, patch in zip(legend.get_texts(), legend.get_patches(), strict=True)
    }


def test_the_timeline_has_a_lane_for_the_step_stages_api_each_stream_and_idle(decode_export):
    fig = plot_timeline(decode_report(decode_export))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "step",
        "stages (thread 100)",
        "CUDA API (thread 100)",
        "GPU 0 stream 7",
        "GPU 0 stream 13",
        "GPU idle: cause",
    ]
    assert all(lane_colours(ax).values()), "a lane is empty"


def test_the_title_names_the_file_process_step_and_wall_time(decode_export):
    ax = plot_timeline(decode_report(decode_export)).axes[0]
    assert ax.get_xlabel() == "ms from the step start"
    title = ax.get_title(loc="left")
    assert "decode.sqlite" in title
    assert "process 100 (python3)" in title
    assert "median step: decode_step #" in title
    assert "wall 1.00 ms" in title


def test_the_legend_lists_stages_call_kinds_and_idle_causes_present(decode_export):
    entries = legend_colours(plot_timeline(decode_report(decode_export)))
    assert {
        "draft",
        "verify",
        "accept",
        "call: launch",
        "call: sync",
        "idle: sync",
        "idle: host",
    } <= set(entries)
    assert "call: setup (load/alloc/capture)" not in entries  # the median step loads nothing


def test_ops_have_the_colour_of_the_stage_that_launched_them(decode_export):
    report = decode_report(decode_export)
    fig = plot_timeline(report)
    lanes, legend = lane_colours(fig.axes[0]), legend_colours(fig)
    colours = stage_colours(report)
    assert legend["verify"] == colours["verify"]
    # Stream 13 runs only verify's side kernel; stream 7 runs ops of all three stages.
    assert lanes["GPU 0 stream 13"] == {colours["verify"]}
    assert lanes["GPU 0 stream 7"] == {colours[s] for s in ("draft", "verify", "accept")}
    assert lanes["GPU 0 stream 7"] <= lanes["stages (thread 100)"]
    assert len({colours[s] for s in ("draft", "verify", "accept")}) == 3


def test_median_worst_index_and_range_choose_the_right_steps(decode_export):
    report = decode_report(
        decode_export,
        TimelineRequest(StepPick.MEDIAN),
        TimelineRequest(StepPick.WORST),
        TimelineRequest(StepPick.INDEX, first=0),
        TimelineRequest(StepPick.RANGE, first=2, stop=5),
    )
    chosen = {}
    for timeline in report.timelines:
        chosen.setdefault(timeline.view, []).append(
            (timeline.step_index, timeline.wall_ns, timeline.is_warmup)
        )
    assert chosen["median"] == [(1, 1_000_000, False)]  # ties go to the earliest analysed step
    assert chosen["worst"] == [(WORST_STEP, 1_300_000, False)]
    assert chosen["step-0"] == [(0, 1_000_000, True)]
    assert [i for i, _, _ in chosen["steps-2-5"]] == [2, 3, 4]
    ax = plot_timeline(report, "steps-2-5").axes[0]
    assert "steps decode_step #2–#4" in ax.get_title(loc="left")
    assert ax.get_xlabel() == "ms from the first step's start"
    assert ax.get_xlim() == (0, 2 * STEP_SPACING_NS + 1_000_000)  # step 2 start to step 4 end


def test_timeline_idle_runs_add_up_to_the_steps_idle_time_in_the_ledger(decode_export):
    report = decode_report(decode_export, TimelineRequest(StepPick.RANGE, first=0, stop=6))
    idle_by_step = {r.step_id: r.idle_ns for r in report.processes[0].step_rows}
    for timeline in report.timelines:
        idle = timeline.idle
        assert (
            sum(e - s for s, e in zip(idle.start_ns, idle.end_ns, strict=True))
            == idle_by_step[timeline.step_id]
        )
        spans = [
            timeline.stages,
            timeline.api_calls,
            timeline.idle,
            *(lane.ops for lane in timeline.streams),
        ]
        for span in spans:
            assert all(
                0 <= s < e <= timeline.wall_ns
                for s, e in zip(span.start_ns, span.end_ns, strict=True)
            )


def test_the_warmup_step_shows_its_module_load_on_the_api_lane(decode_export):
    report = decode_report(decode_export, TimelineRequest(StepPick.INDEX, first=0))
    fig = plot_timeline(report)
    assert "call: setup (load/alloc/capture)" in legend_colours(fig)
    assert "(warm-up)" in fig.axes[0].get_title(loc="left")


def test_spans_closer_than_a_pixel_merge_and_tiny_ones_widen_to_a_pixel():
    starts, ends = merge_spans(
        np.array([0, 150, 1_000, 5_000]), np.array([100, 400, 1_010, 5_001]), 200
    )
    assert starts.tolist() == [0, 1_000, 5_000]
    assert ends.tolist() == [400, 1_200, 5_200]


def test_a_lane_of_thousands_of_ops_is_one_artist_per_colour(export_builder):
    #   one step, 2000 back-to-back 1 us kernels launched in one stage
    builder = export_builder()
    for step in range(3):
        o = step * 10_000_000
        builder.range("decode_step", o, o + 5_000_000).range("forward", o, o + 5_000_000)
        for k in range(2000 if step == 1 else 1):
            t = o + 1_000 + k * 2_000
            builder.launch("tiny", t, t + 500, t + 600, t + 1_600)
    report = decode_report(builder.write(), TimelineRequest(StepPick.INDEX, first=1))
    ax = plot_timeline(report).axes[0]
    row = [t.get_text() for t in ax.get_yticklabels()].index("GPU 0 stream 7")
    on_lane = [
        c
        for c in ax.collections
        if isinstance(c, PolyCollection)
        and c.get_alpha() in (None, 1.0)
        and round(c.get_paths()[0].vertices[:, 1].mean()) == row
    ]
    assert len(on_lane) == 1
    assert len(on_lane[0].get_paths()) < 100  # merged at pixel width, not 2000 rectangles
    assert len(ax.texts) < 300


def test_the_steps_plot_has_one_bar_per_step_and_fades_warmup(decode_export):
    report = decode_report(decode_export)
    fig = plot_steps(report)
    ax = fig.axes[0]
    n_steps = len(report.processes[0].step_rows)
    assert n_steps == 6
    assert ax.containers and all(len(container) == n_steps for container in ax.containers)
    first_bars = [container[0] for container in ax.containers]  # step 0: the warm-up
    assert all(bar.get_facecolor()[3] == pytest.approx(WARMUP_ALPHA) for bar in first_bars)
    assert all(container[1].get_facecolor()[3] == 1.0 for container in ax.containers)
    assert "warm-up step (skipped)" in legend_colours(fig)
    # Stacks add up to each step's wall time.
    heights = np.sum(
        [[bar.get_height() for bar in container] for container in ax.containers], axis=0
    )
    walls = [row.wall_ns / 1e6 for row in report.processes[0].step_rows]
    assert heights == pytest.approx(walls)


def test_many_steps_are_drawn_as_stacked_bands_that_reach_each_steps_wall(export_builder):
    # 450 steps of 10-14 µs, two stages, one kernel each: bars would be under a pixel wide.
    builder = export_builder()
    steps = MAX_BARS + 50
    walls = [10_000 + 1_000 * (i % 5) for i in range(steps)]
    starts = np.cumsum([0, *walls[:-1]])
    for o, wall in zip(starts, walls, strict=True):
        builder.range("decode_step", int(o), int(o + wall))
        builder.range("draft", int(o), int(o + 4_000)).range(
            "verify", int(o + 4_000), int(o + wall)
        )
    for o in starts:
        builder.launch("k", int(o + 100), int(o + 600), int(o + 1_000), int(o + 3_000))
    trace = load_trace(builder.write())
    report = build_report(trace, analyse_trace(trace, AnalysisOptions(skip=2)))
    ax = plot_steps(report).axes[0]
    assert not ax.containers  # no bars
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) >= 3  # draft and verify, busy and idle
    # The top band's upper edge over each step (a flat run from i + 0.5 back to i - 0.5)
    # is that step's wall time.
    edge = bands[-1].get_paths()[0].vertices
    tops = {
        round(x2 + 0.5): y1
        for (x1, y1), (x2, y2) in zip(edge[:-1], edge[1:], strict=True)
        if y1 == y2 and x1 - x2 == pytest.approx(1.0)
    }
    expected = [row.wall_ns / 1e6 for row in report.processes[0].step_rows]
    assert [tops[i] for i in (2, 100, steps - 2)] == pytest.approx(
        [expected[i] for i in (2, 100, steps - 2)]
    )
    # The two warm-up steps are veiled.
    veils = [p for p in ax.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert len(veils) == 1 and veils[0].get_x() == pytest.approx(-0.5)


def test_stage_colours_agree_between_the_steps_plot_and_the_timeline(decode_export):
    report = decode_report(decode_export)
    timeline, steps = legend_colours(plot_timeline(report)), legend_colours(plot_steps(report))
    for stage in ("draft", "verify", "accept"):
        assert timeline[stage] == steps[stage]


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_plot_commands_write_png_and_svg(decode_export, tmp_path, suffix, magic):
    for command in (["timeline", "--worst"], ["steps"]):
        out = tmp_path / f"{command[0]}{suffix}"
        result = CliRunner().invoke(app, ["plot", *command, str(decode_export), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert out.read_bytes().startswith(magic)


@pytest.mark.parametrize(
    "options, message, exit_code",
    [
        (["-o", "x.pdf"], "name a .png or .svg file", 2),
        (["-o", "x.png", "--steps", "5:3"], "is not a range A:B", 2),
        (["-o", "x.png", "--step-index", "99"], "no step 99", 1),
        (["-o", "x.png", "--worst", "--median"], "choose one of", 2),
    ],
)
def test_plot_timeline_user_errors(decode_export, tmp_path, options, message, exit_code):
    # Options that cannot be drawn are usage errors (2); a step the export lacks is its input's (1).
    options = [str(tmp_path / o) if o.startswith("x.") else o for o in options]
    result = CliRunner().invoke(app, ["plot", "timeline", str(decode_export), *options])
    assert result.exit_code == exit_code
    assert message in result.output


# Two peer captures and the representative samples by default; every capture in the thorough run.
REAL_TRACES = [
    *sweep(peer_trace_paths(), REPRESENTATIVE_PEERS),
    *sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES),
]


@pytest.mark.skipif(not REAL_TRACES, reason="no peer or sample traces here")
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_real_traces_draw_every_lane_and_bar(path):
    views = (TimelineRequest(StepPick.MEDIAN), TimelineRequest(StepPick.WORST))
    report = shipped_report(path, AnalysisOptions(), views)
    fig = plot_timeline(report, "median")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    streams = {
        (s.device_id, s.stream_id)
        for t in report.timelines
        if t.view == "median"
        for s in t.streams
    }
    # the GPU metrics lane, where the capture has GPU metrics (gm_*)
    metrics = any(t.gpu_metrics is not None for t in report.timelines if t.view == "median")
    assert len(labels) == 4 + len(streams) + int(metrics)
    assert any(label.startswith("GPU metrics") for label in labels) == metrics
    steps = plot_steps(report)
    for ax, process in zip(steps.axes, [p for p in report.processes if p.step_rows], strict=True):
        assert all(len(container) == len(process.step_rows) for container in ax.containers)


def test_a_towering_warmup_step_is_cut_at_the_analysed_steps_height_and_labelled(export_builder):
    #   step 0: 10 ms (warm-up: > 3x the median); steps 1-4: 1 ms each, step 3: 1.2 ms
    builder = export_builder()
    walls = [10_000_000, 1_000_000, 1_000_000, 1_200_000, 1_000_000]
    start = 0
    for wall in walls:
        builder.range("decode_step", start, start + wall).range("forward", start, start + wall)
        builder.launch("k", start + 1_000, start + 2_000, start + 3_000, start + 500_000)
        start += wall + 100_000
    report = decode_report(builder.write())
    assert [r.is_warmup for r in report.processes[0].step_rows] == [
        True,
        False,
        False,
        False,
        False,
    ]
    ax = plot_steps(report).axes[0]
    assert ax.get_ylim()[1] == pytest.approx(1.2 * 1.15)
    assert [t.get_text() for t in ax.texts] == ["10 ms ↑"]


def test_a_stage_keeps_its_colour_when_the_time_ranking_changes():
    # Eager verify is the biggest stage, replayed verify among the smallest: the colours come
    # from the names, so both sides of a diff draw each stage alike; none is a cause colour.
    from tests.conftest import SAMPLE_TRACES
    from trace_gaps.plot.palette import CAUSE_COLOURS

    paths = [SAMPLE_TRACES / "spec_eager.sqlite", SAMPLE_TRACES / "spec_graph_node.sqlite"]
    if not all(p.exists() for p in paths):
        pytest.skip("samples absent")
    eager, graph = (stage_colours(decode_report(p)) for p in paths)
    stages = ["draft_forward", "verify_forward", "build_tree", "accept_sample_commit"]
    assert [eager[s] for s in stages] == [graph[s] for s in stages]
    assert len({eager[s] for s in stages}) == len(stages)
    assert not set(CAUSE_COLOURS.values()) & {eager[s] for s in stages}


def test_a_dense_column_is_drawn_by_duration_share_not_by_the_last_span():
    from matplotlib.figure import Figure as Fig

    from trace_gaps.plot.lanes import LANE_HEIGHT, draw_lane

    # One 1000 ns pixel column: 3 launch calls of 100 ns (30 % of it), then 4 thin "other"
    # calls of 10 ns (4 %) drawn after them, in every one of 20 columns.
    starts, ends, faces = [], [], []
    for column in range(20):
        o = column * 1_000
        for k in range(3):
            starts.append(o + 50 + k * 300), ends.append(o + 150 + k * 300)
            faces.append("#1f4e9c")
        for k in range(4):
            starts.append(o + 160 + k * 200), ends.append(o + 170 + k * 200)
            faces.append("#aaaaaa")
    ax = Fig().add_subplot()
    saturated = draw_lane(
        ax,
        2,
        np.array(starts),
        np.array(ends),
        np.array(faces, dtype=object),
        min_ns=1_000,
    )
    assert saturated
    heights: dict[str, float] = {}
    for collection in ax.collections:
        face = to_hex(collection.get_facecolors()[0])
        for path in collection.get_paths():
            ys, xs = path.vertices[:, 1], path.vertices[:, 0]
            assert xs.min() >= 0 and xs.max() <= 20_000
            assert ys.min() >= 2 - LANE_HEIGHT / 2 - 1e-9 and ys.max() <= 2 + LANE_HEIGHT / 2 + 1e-9
            heights[face] = ys.max() - ys.min()
    assert heights["#1f4e9c"] == pytest.approx(0.30 * LANE_HEIGHT)
    assert heights["#aaaaaa"] == pytest.approx(0.04 * LANE_HEIGHT)
    # Launch time is stacked from the lane's bottom (the larger y: the axis is inverted).
    launch = next(c for c in ax.collections if to_hex(c.get_facecolors()[0]) == "#1f4e9c")
    assert launch.get_paths()[0].vertices[:, 1].max() == pytest.approx(2 + LANE_HEIGHT / 2)


def test_a_sparse_gpu_lane_reads_sparse_and_says_it_is_saturated_until_zoomed(export_builder):
    # 1000 kernels of 0.3 us every 2.5 us: the GPU is 12 % busy over 2.5 ms.
    builder = export_builder()
    for step in range(3):
        o = step * 10_000_000
        builder.range("decode_step", o, o + 3_000_000).range("forward", o, o + 3_000_000)
        for k in range(1000 if step == 1 else 1):
            t = o + 1_000 + k * 2_500
            builder.launch("tiny", t, t + 200, t + 1_000, t + 1_300)
    report = decode_report(builder.write(), TimelineRequest(StepPick.INDEX, first=1))
    ax = plot_timeline(report).axes[0]
    row = [t.get_text() for t in ax.get_yticklabels()].index("GPU 0 stream 7")
    area = 0.0
    for collection in ax.collections:
        if collection.get_alpha() not in (None, 1.0):
            continue
        for path in collection.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            if round(ys.mean()) == row:
                area += (xs.max() - xs.min()) * (ys.max() - ys.min())
    busy_ns = 1000 * 300
    assert area / (busy_ns / 0.12 * 0.8) == pytest.approx(0.12, abs=0.03)  # not a solid bar
    marks = [t for t in ax.texts if t.get_text().startswith("saturated at this zoom")]
    assert row in {round(t.get_position()[1]) for t in marks}

    zoomed = plot_timeline(report, window_ns=(1_000_000, 1_050_000)).axes[0]
    assert zoomed.get_xlim() == (1_000_000, 1_050_000)
    assert not [t for t in zoomed.texts if t.get_text().startswith("saturated")]
    for collection in zoomed.collections:
        for path in collection.get_paths():
            xs = path.vertices[:, 0]
            assert xs.min() >= 1_000_000 - 1 and xs.max() <= 1_050_000 + 1


def test_from_and_to_zoom_the_timeline_and_a_reversed_window_is_a_usage_error(
    decode_export, tmp_path
):
    out = tmp_path / "t.png"
    runner = CliRunner()
    zoomed = runner.invoke(
        app,
        ["plot", "timeline", str(decode_export), "-o", str(out), "--from", "0.2", "--to", "0.4"],
    )
    assert zoomed.exit_code == 0, zoomed.output
    reversed_window = runner.invoke(
        app, ["plot", "timeline", str(decode_export), "-o", str(out), "--from", "2", "--to", "1"]
    )
    assert reversed_window.exit_code == 2


def test_the_steps_axis_is_clipped_by_the_steady_steps_even_when_every_step_is_warmup(
    export_builder,
):
    #   step 0: 27.5 ms, steps 1-9: 1.5 ms, all marked warm-up (as in a process of a
    #   multi-process export whose steps the skip rule all dropped)
    import dataclasses

    builder = export_builder()
    walls = [27_500_000] + [1_500_000] * 9
    start = 0
    for wall in walls:
        builder.range("decode_step", start, start + wall).range("forward", start, start + wall)
        builder.launch("k", start + 1_000, start + 2_000, start + 3_000, start + 500_000)
        start += wall + 100_000
    trace = load_trace(builder.write())
    report = build_report(trace, analyse_trace(trace, AnalysisOptions(skip=1)))
    process = report.processes[0]
    rows = [dataclasses.replace(r, is_warmup=True) for r in process.step_rows]
    report = dataclasses.replace(report, processes=[dataclasses.replace(process, step_rows=rows)])
    ax = plot_steps(report).axes[0]
    assert ax.get_ylim()[1] == pytest.approx(1.5 * 1.15)
    assert [t.get_text() for t in ax.texts] == ["28 ms ↑"]


def two_ranks(builder: ExportBuilder) -> ExportBuilder:
    """Two processes, 4 steps of 2 ms each; pid 200 starts each step 0.5 ms after pid 100."""
    for pid, late in ((100, 0), (200, 500_000)):
        for step in range(4):
            o = step * 3_000_000 + late
            builder.range("decode_step", o, o + 2_000_000, pid=pid, tid=pid)
            builder.range("forward", o, o + 2_000_000, pid=pid, tid=pid)
            builder.launch("k", o + 1_000, o + 2_000, o + 3_000, o + 900_000, pid=pid, tid=pid)
    return builder


def test_ranks_draw_every_process_on_one_time_axis_for_the_same_step(export_builder):
    path = two_ranks(export_builder()).write("ranks.sqlite")
    request = TimelineRequest(StepPick.INDEX, first=2, all_processes=True)
    report = decode_report(path, request)
    assert sorted((t.pid, t.step_index) for t in report.timelines) == [(100, 2), (200, 2)]
    ax = plot_timeline(report).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        f"{pid} · {lane}"
        for pid in (100, 200)
        for lane in (
            "step",
            f"stages (thread {pid})",
            f"CUDA API (thread {pid})",
            "GPU 0 stream 7",
            "GPU idle: cause",
        )
    ]
    # The late rank's step bar starts 0.5 ms right of the early one's.
    step_bars = {}
    for collection in ax.collections:
        for path_ in collection.get_paths():
            row = round(path_.vertices[:, 1].mean())
            if labels[row].endswith("· step"):
                step_bars[labels[row]] = path_.vertices[:, 0].min()
    assert step_bars == {"100 · step": 0, "200 · step": 500_000}
    assert "processes 100, 200 on one time axis" in ax.get_title(loc="left")
    assert "step start after 100: 200 +500.0 µs" in ax.get_title(loc="left")


def test_ranks_on_the_command_line_and_not_with_process(export_builder, tmp_path):
    path = two_ranks(export_builder()).write("ranks.sqlite")
    out = tmp_path / "ranks.png"
    runner = CliRunner()
    drawn = runner.invoke(app, ["plot", "timeline", str(path), "--ranks", "-o", str(out)])
    assert drawn.exit_code == 0, drawn.output
    refused = runner.invoke(
        app, ["plot", "timeline", str(path), "--ranks", "--process", "100", "-o", str(out)]
    )
    assert (
        refused.exit_code == 2
        and "--ranks and several exports draw every process" in refused.stderr
    )


def test_a_capture_with_gpu_metrics_has_a_metrics_lane_under_the_gpu_streams():
    # gm_sync_graph (--gpu-metrics-devices=all, 20 kHz); load_trace alone reads no metrics.
    from tests.conftest import shipped_trace
    from trace_gaps.plot.metrics_lane import METRICS_LANE
    from trace_gaps.run.one import analyse_export

    trace, analysis = analyse_export(
        shipped_trace("gm_sync_graph"), AnalysisOptions(), timelines=(TimelineRequest(),), jobs=1
    )
    report = build_report(trace, analysis)
    (timeline,) = report.timelines
    lane = timeline.gpu_metrics
    assert lane is not None
    # The samples tile the step (50 us each, cut to it), values in % of peak or of the SMs.
    assert lane.start_ns[0] == 0 and lane.end_ns[-1] == timeline.wall_ns
    assert all(b == c for b, c in zip(lane.end_ns, lane.start_ns[1:], strict=False))
    assert len(lane.start_ns) >= timeline.wall_ns // 50_000
    assert all(0 <= v <= 100 for v in lane.dram_read_pct + lane.sm_active_pct)
    assert max(lane.dram_read_pct) > 10
    fig = plot_timeline(report)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    row = labels.index(METRICS_LANE)
    assert labels[row - 1].startswith("GPU 0 stream") and labels[row + 1] == "GPU idle: cause"
    assert {"GPU DRAM read % of peak", "GPU SMs active %"} <= set(legend_colours(fig))


def test_a_capture_without_gpu_metrics_has_no_metrics_lane(decode_export):
    report = decode_report(decode_export)
    assert all(t.gpu_metrics is None for t in report.timelines)
    assert '"gpu_metrics"' not in render_json(report)
