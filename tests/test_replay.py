"""What-if: the replay of unchanged steps reproduces the measured steps, and levers do what
they say (docs/what-if.md)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_TRACES, corpus_trace_paths, sweep
from trace_gaps.analysis.engine.metrics import REPLAY_MODELS
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions
from trace_gaps.analysis.replay.codes import EAGER_LAUNCHES, LAUNCH_GRAPH, SYNC
from trace_gaps.analysis.replay.levers import LeverError, apply_lever, parse_levers
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.schedule import replay
from trace_gaps.analysis.replay.whatif import check_replay, models_of, predict
from trace_gaps.cli import app
from trace_gaps.model import GraphTraceMode, Trace
from trace_gaps.records.whatif import NotApplicable
from trace_gaps.report.build import build_report
from trace_gaps.report.levers import check_levers, lever_words
from trace_gaps.run.one import analyse_export

# Every sample in the thorough run; by default an eager one, a graph one and two ranks.
SAMPLES = sweep(
    sorted(SAMPLE_TRACES.glob("*.sqlite")), ("spec_eager", "spec_graph_node", "spec_two_ranks")
)
CORPUS = {p.stem: p for p in corpus_trace_paths()}


@cache
def analysed(path: Path) -> tuple[Trace, Analysis]:
    return analyse_export(path, AnalysisOptions(), jobs=1)


def models(path: Path) -> list[StepModel]:
    return list(analysed(path)[1].metrics[REPLAY_MODELS].values())


def mean_step(analysis: Analysis) -> int:
    steps = analysis.steps[~analysis.steps["is_warmup"]]
    return int((steps["end_ns"] - steps["start_ns"]).mean())


def stage_wall(ledger: list[tuple[str, int]], stage: str) -> int:
    return sum(ns for name, ns in ledger if name == stage)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_the_unchanged_replay_is_within_2_pct_of_every_sample(path: Path) -> None:
    found = models(path)
    assert found
    for pid in sorted({m.pid for m in found}):
        check = check_replay(models_of(analysed(path)[1].metrics[REPLAY_MODELS], pid))
        assert abs(check.error_pct) < 2.0, (pid, check)


@pytest.mark.parametrize(
    "name", ["whatif_plain_eager", "whatif_spec_sync", "repeat_eager_1", "hf_greedy_static_eager"]
)
def test_the_unchanged_replay_is_within_2_pct_on_corpus_captures(name: str) -> None:
    if name not in CORPUS:
        pytest.skip(f"{name} not in the corpus")
    check = check_replay(models(CORPUS[name]))
    assert abs(check.error_pct) < 2.0, check


def test_a_graph_lever_on_spec_eager_predicts_spec_graph_verify_within_5_pct() -> None:
    # The two samples ran with different host speeds (draft_forward, unchanged, takes 8.3 vs
    # 5.5 ms/step), so the stage the lever changes is compared: verify_forward's wall. The
    # graph holds memsets, so the lever's starts its first node 13 % into its launch call,
    # as the real one did (55 us into a 345 us call); from the call's end, as it first did,
    # the prediction was high by that overlap, up to 30 % (docs/what-if.md).
    trace, analysis = analysed(SAMPLE_TRACES / "spec_eager.sqlite")
    found = predict(
        models(SAMPLE_TRACES / "spec_eager.sqlite"),
        parse_levers("verify_forward=graph"),
        analysis.stage_map.names,
        trace.info.graph_trace_mode,
        mean_step(analysis),
    )
    predicted = stage_wall([(e.stage, e.ns_per_step) for e in found.ledger], "verify_forward")
    _, after = analysed(SAMPLE_TRACES / "spec_graph_node.sqlite")
    after_models = models(SAMPLE_TRACES / "spec_graph_node.sqlite")
    replayed = predict(
        after_models, [], after.stage_map.names, GraphTraceMode.NODE, mean_step(after)
    )
    measured = stage_wall([(e.stage, e.ns_per_step) for e in replayed.ledger], "verify_forward")
    assert predicted == pytest.approx(measured, rel=0.05)
    assert found.saving_ns > 0.3 * found.measured_ns


def test_a_graph_lever_on_a_same_session_pair_predicts_the_step_within_10_pct() -> None:
    if "repeat_eager_3" not in CORPUS or "whatif_spec_graph" not in CORPUS:
        pytest.skip("what-if pairs not in the corpus")
    trace, analysis = analysed(CORPUS["repeat_eager_3"])
    found = predict(
        models(CORPUS["repeat_eager_3"]),
        parse_levers("verify_forward=graph"),
        analysis.stage_map.names,
        trace.info.graph_trace_mode,
        mean_step(analysis),
    )
    after = mean_step(analysed(CORPUS["whatif_spec_graph"])[1])
    assert found.predicted_ns == pytest.approx(after, rel=0.10)


def test_levers_change_what_they_say() -> None:
    path = SAMPLE_TRACES / "spec_sync.sqlite"
    trace, analysis = analysed(path)
    names = analysis.stage_map.names
    model = models(path)[0]
    code = names.index("accept_sample_commit")
    base = replay(model).wall_ns
    mode = trace.info.graph_trace_mode
    nosync = apply_lever(model, code, "nosync", mode)
    assert not (nosync.call_category[nosync.call_stage == code] == SYNC).any()
    assert replay(nosync).wall_ns < base
    nohost = apply_lever(model, code, "nohost", mode)
    assert nohost.item_ns[(nohost.item_stage == code) & (nohost.item_call < 0)].sum() == 0
    half = apply_lever(model, code, "host50", mode)
    assert replay(nohost).wall_ns <= replay(half).wall_ns <= base
    # hostN: the stage's host time between calls N % shorter (host50 halves it).
    gaps = (model.item_stage == code) & (model.item_call < 0)
    assert half.item_ns[gaps].sum() == pytest.approx(model.item_ns[gaps].sum() / 2, abs=len(gaps))
    most = apply_lever(model, code, "host87", mode)
    assert most.item_ns[gaps].sum() == pytest.approx(
        0.13 * model.item_ns[gaps].sum(), abs=len(gaps)
    )
    assert np.array_equal(most.item_ns[~gaps], model.item_ns[~gaps])
    assert replay(nohost).wall_ns <= replay(most).wall_ns <= replay(half).wall_ns
    assert lever_words("host87") == "host code 87 % shorter"
    assert lever_words("host50") == "host code halved"
    faster = apply_lever(model, code, "gpu50", mode)
    here = model.op_stage == code
    assert np.all(faster.op_ns[here] <= (model.op_ns[here] + 1) // 2 + 1)
    assert replay(faster).wall_ns <= base


def test_bad_levers_name_the_stages_or_say_why_they_do_not_apply() -> None:
    trace, analysis = analysed(SAMPLE_TRACES / "spec_graph_node.sqlite")
    args = (analysis.stage_map.names, trace.info.graph_trace_mode, mean_step(analysis))
    found = models(SAMPLE_TRACES / "spec_graph_node.sqlite")
    with pytest.raises(LeverError, match="verify=graph: no_stage"):
        predict(found, parse_levers("verify=graph"), *args)
    sections = [(analysis.stage_map.names, found)]
    with pytest.raises(LeverError, match="stages: accept_sample_commit, build_tree"):
        check_levers(parse_levers("verify=graph"), sections)
    with pytest.raises(LeverError, match="already replays a CUDA graph"):
        check_levers(parse_levers("verify_forward=graph"), sections)
    with pytest.raises(LeverError, match="unknown lever"):
        parse_levers("verify_forward=fast")
    for kind in ("host0", "host100", "host5x"):
        with pytest.raises(LeverError, match="hostN"):
            parse_levers(f"verify_forward={kind}")
    with pytest.raises(LeverError, match="not STAGE=LEVER"):
        parse_levers("verify_forward")


def test_a_lever_for_a_stage_one_kind_lacks_is_not_applicable_to_that_kind_only() -> None:
    # serving_sglang's steps come in two kinds: DECODE steps run forward_decode, EXTEND
    # steps forward_extend; both run sample.
    if "serving_sglang" not in CORPUS:
        pytest.skip("serving_sglang not in the corpus")
    trace, analysis = analysed(CORPUS["serving_sglang"])
    report = build_report(trace, analysis, what_if="forward_decode=graph,sample=nosync")
    by_kind = {p.kind: p.what_if for p in report.processes}
    decode, extend = by_kind["DECODE"], by_kind["EXTEND"]
    assert decode is not None and extend is not None
    assert decode.levers == ["forward_decode=graph", "sample=nosync"]
    assert decode.not_applicable == []
    # the saving is of the kind's mean step (predicted + saving), not the priced steps' mean
    assert decode.saving_ns > 0.5 * (decode.predicted_ns + decode.saving_ns)
    assert extend.levers == ["sample=nosync"]
    assert extend.not_applicable == [
        NotApplicable("forward_decode=graph", "forward_decode", "graph", "no_stage")
    ]
    with pytest.raises(LeverError, match="stages: forward_decode, forward_extend, process_bat"):
        build_report(trace, analysis, what_if="forward=graph")
    with pytest.raises(LeverError, match="process_batch_result=graph does not apply"):
        build_report(trace, analysis, what_if="process_batch_result=graph")


def test_a_graph_lever_is_cut_at_the_stages_host_syncs_and_keeps_them() -> None:
    # spec_sync's prepare_for_verify launches 20 ops around 4 host syncs (.item(), .cpu()):
    # a graph cannot be captured across a sync, so each run of launches between two syncs
    # becomes one graph launch, and the syncs, with the host time around them, stay.
    path = SAMPLE_TRACES / "spec_sync.sqlite"
    trace, analysis = analysed(path)
    code = analysis.stage_map.names.index("prepare_for_verify")
    mode = trace.info.graph_trace_mode
    for model in models(path):
        here = model.call_stage == code
        launches = np.flatnonzero(here & np.isin(model.call_category, list(EAGER_LAUNCHES)))
        runs = len(np.unique(np.cumsum(model.call_cuts_graph)[launches]))
        graphed = apply_lever(model, code, "graph", mode)
        assert runs > 1
        assert (graphed.call_category[here] == LAUNCH_GRAPH).sum() == runs
        assert (graphed.call_category[here] == SYNC).sum() == (
            model.call_category[here] == SYNC
        ).sum()
        removed = int(model.item_ns.sum() - graphed.item_ns.sum())
        # The dispatch removed is saved (the graph's ops are not held behind a blocking
        # copy's op launched later, as they were when the ops kept their measured order).
        assert replay(model).wall_ns - replay(graphed).wall_ns > removed // 2
        both = apply_lever(apply_lever(model, code, "nosync", mode), code, "graph", mode)
        assert replay(both).wall_ns < replay(graphed).wall_ns


def test_a_stage_whose_syncs_hold_its_time_is_priced_by_removing_them() -> None:
    # spec_sync's accept_sample_commit spends 0.84 of its 0.89 ms/step inside 7.4 host syncs
    # (one .item() per candidate child): removing them saves more than a graph cut at each
    # of them; its verdict kind (launch- or host-bound) alone would have picked the graph.
    trace, analysis = analysed(SAMPLE_TRACES / "spec_sync.sqlite")
    report = build_report(trace, analysis)
    (process,) = report.processes
    levers = {(c.stage, c.bucket): c.lever for c in process.candidates}
    assert levers["accept_sample_commit", "idle"] == "nosync"
    assert levers["prepare_for_verify", "idle"] == "graph"
    assert levers["draft_forward", "idle"] == "graph"


def test_analyze_what_if_on_a_serving_capture_says_which_kind_a_lever_does_not_apply_to() -> None:
    if "serving_sglang" not in CORPUS:
        pytest.skip("serving_sglang not in the corpus")
    path = CORPUS["serving_sglang"]
    result = CliRunner().invoke(
        app, ["analyze", "-q", "-f", "md", str(path), "--what-if", "forward_decode=graph"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("**What-if ") == 2
    assert (
        "**What-if no lever: predicted 9.15 ms/step (measured 9.15, saving 0.00); not applicable "
        "to these steps: forward\\_decode=graph (no stage forward\\_decode in these steps)"
    ) in result.stdout


def _host_timeline_by_loop(start, end, c_start, c_end, c_stage, stage_map, tid):
    """The host timeline as first written, one gap at a time: the reference the vectorised
    host_timeline.host_timeline must equal."""
    from trace_gaps.analysis.replay.codes import NO_INDEX
    from trace_gaps.analysis.stages import thread_stage_at

    thread = stage_map.threads.get(tid)
    cuts = np.zeros(0, dtype=np.int64)
    if thread is not None:
        edges = [*thread.level_starts, *thread.level_ends]
        if edges:
            cuts = np.unique(np.concatenate(edges))
            cuts = cuts[(cuts > start) & (cuts < end)]
    gap_lo = np.r_[start, c_end].astype(np.int64)
    gap_hi = np.maximum(np.r_[c_start, end].astype(np.int64), gap_lo)
    calls, lengths, stages = [], [], []
    for g in range(len(gap_lo)):
        lo, hi = int(gap_lo[g]), int(gap_hi[g])
        bounds = np.r_[lo, cuts[(cuts > lo) & (cuts < hi)], hi]
        if hi > lo:
            mids = (bounds[:-1] + bounds[1:]) // 2
            codes = thread_stage_at(stage_map, thread, mids) if thread is not None else 0 * mids
            for piece, code in zip(np.diff(bounds), codes, strict=True):
                calls.append(NO_INDEX)
                lengths.append(int(piece))
                stages.append(int(code))
        if g < len(c_start):
            calls.append(g)
            lengths.append(0)
            stages.append(int(c_stage[g]))
    return calls, lengths, stages


def test_the_host_timeline_is_the_gap_by_gap_one_on_random_calls() -> None:
    from trace_gaps.analysis.replay.host_timeline import host_timeline

    _, analysis = analysed(SAMPLE_TRACES / "spec_eager.sqlite")
    stage_map = analysis.stage_map
    tid = next(iter(stage_map.threads))
    steps = analysis.steps
    rng = np.random.default_rng(7)
    for _ in range(200):
        step = steps.iloc[int(rng.integers(len(steps)))]
        start, end = int(step["start_ns"]), int(step["end_ns"])
        n = int(rng.integers(0, 40))
        starts = np.sort(rng.integers(start, end, n))
        ends = np.minimum(starts + rng.integers(0, (end - start) // 4 + 2, n), end)
        # Calls may overlap (a call ending after the next starts): the gap is then empty.
        stages = rng.integers(0, len(stage_map.names), n)
        for thread in (tid, -1):  # a step thread, and a thread with no stages
            got = host_timeline(start, end, starts, ends, stages, stage_map, thread)
            want = _host_timeline_by_loop(start, end, starts, ends, stages, stage_map, thread)
            assert [a.tolist() for a in got] == [list(w) for w in want]


@pytest.mark.parametrize(
    ("export", "stage", "early"),
    [
        ("repeat_eager_3", "verify_forward", True),  # 8 memsets a step (cuDNN attention)
        ("tp_eager", "forward", True),  # NCCL all-reduces
        ("whatif_plain_eager", "forward", False),  # kernels only
        ("runahead_eager", "forward", False),
    ],
)
def test_a_lever_graph_of_more_than_kernels_starts_early_in_its_launch(
    export: str, stage: str, early: bool
) -> None:
    # The real graphs of these loops (whatif_spec_graph, tp_graph) start their first node
    # 12 to 16 % into the cudaGraphLaunch call; the kernel-only ones (whatif_plain_graph,
    # runahead_graph) as it returns.
    trace, analysis = analysed(CORPUS[export])
    model = models(CORPUS[export])[2]
    code = analysis.stage_map.names.index(stage)
    pulled = apply_lever(model, code, "graph", trace.info.graph_trace_mode)
    (launch,) = pulled.lever_graphs
    assert (launch in pulled.early_graphs) is early
    graph_ops = np.flatnonzero(pulled.op_call == launch)
    start = replay(pulled).item_start[np.flatnonzero(pulled.item_call == launch)[0]]
    first = replay(pulled).op_start[graph_ops].min() - start
    call = pulled.call_ns[launch]
    # Early: 13 % into the call (its stream idle); else no sooner than the call's end.
    assert bool(first < call // 2) is early, (first, call)


@pytest.mark.parametrize(
    ("export", "filling", "within_pct"),
    [("gp_graph", 1, 0.5), ("gp_graph_x2", 1, 0.5), ("runahead_graph", 0, 1.0)],
)
def test_the_check_leaves_out_a_gpu_paced_loop_filling_its_queue(
    export: str, filling: int, within_pct: float
) -> None:
    # gp_graph's first analysed step ran 0.85 ms while the loop filled the GPU's queue (its
    # sync found the step before's work done), the others 6.2-6.4 ms: a chain replayed to
    # its steady period read +3.3 % with it. The host-paced runahead_graph blocks in only
    # some steps: nothing is left out there.
    found = models(CORPUS[export])
    check = check_replay(found)
    assert check.filling_steps == filling
    assert check.steps == len(found) - filling
    assert abs(check.error_pct) < within_pct, check
    if filling:
        first = min(found, key=lambda m: m.start_ns)
        assert first.end_ns - first.start_ns < 0.5 * check.measured_ns
