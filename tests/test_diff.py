"""trace-gaps diff: step time with a noise estimate, stage/bucket changes, launches, candidates."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.builders import ExportBuilder
from tests.conftest import (
    PEER_TRACES,
    REPRESENTATIVE_SAMPLES,
    SAMPLE_TRACES,
    assert_matches_schema,
    sample_trace_paths,
    shipped_json,
    shipped_report,
    shipped_trace,
    sweep,
)
from trace_gaps import __version__
from trace_gaps.analysis.engine.pipeline import AnalysisOptions, analyse_trace
from trace_gaps.cli import app
from trace_gaps.diff.build import Diff, ProcessDiff, diff_reports
from trace_gaps.diff.changes import (
    BucketChange,
    NsInterval,
    PctInterval,
    Side,
    StageChange,
    StageSide,
    WallChange,
)
from trace_gaps.nsys.load import load_trace
from trace_gaps.records.report import Report, WallStats
from trace_gaps.render.diff import render_diff_markdown
from trace_gaps.report.build import build_report

runner = CliRunner()

# Per-step extra host time in draft, so that step times vary like a real run's.
JITTER_NS = (0, 150, 300, 100, 250, 50, 200, 350)
STEPS = 8


def eager_verify(launches: int):  # type: ignore[no-untyped-def]
    """verify: `launches` eager kernels, one every 200 ns (call 100 ns, kernel 50 ns)."""

    #   thread [verify ..............................................]
    #   calls    [call][call]...   (every 200 ns, 100 ns each)
    #   GPU         [k]   [k] ...  (50 ns each, 150 ns after each call starts)
    def body(b: ExportBuilder, start: int) -> int:
        for j in range(launches):
            t = start + j * 200
            b.launch("verify_k", t, t + 100, t + 150, t + 200)
        end = start + launches * 200 + 100
        b.range("verify", start, end)
        return end

    return body


def graph_verify(b: ExportBuilder, start: int) -> int:
    """verify: one cudaGraphLaunch (100..300) replaying a graph for 2500 ns (400..2900)."""
    correlation = b._correlation(None)
    b.call("cudaGraphLaunch", start + 100, start + 300, correlation_id=correlation)
    b.graph_replay(start + 400, start + 2_900, correlation_id=correlation)
    b.range("verify", start, start + 3_000)
    return start + 3_000


def decode_loop(
    builder: ExportBuilder,
    verify,
    *,
    draft_kernel_ns: int = 1_500,
    pid: int = 100,
    steps: int = STEPS,
    accept: bool = False,
) -> ExportBuilder:  # type: ignore[no-untyped-def]  # noqa: E501
    """`steps` decode steps: draft (one launch, jittered host tail), verify, optionally accept.

    #   thread [decode_step ..........................................]
    #          [draft .............][verify ...........][accept ..]
    #   GPU        [draft_k]          (verify's kernels or graph)
    """
    t = 0
    for i in range(steps):
        start = t
        kernel_end = start + 400 + draft_kernel_ns
        draft_end = kernel_end + 100 + JITTER_NS[i % len(JITTER_NS)]
        builder.range("draft", start, draft_end, pid=pid)
        builder.launch("draft_k", start + 100, start + 300, start + 400, kernel_end, pid=pid)
        end = verify(builder, draft_end)
        if accept:
            builder.range("accept", end, end + 500, pid=pid)
            end += 500
        builder.range("decode_step", start, end, pid=pid)
        t = end + 1_000
    return builder


def diff_of(before: Path, after: Path, **options: object) -> Diff:
    return diff_reports(report_of(before, **options), report_of(after, **options))


def report_of(path: Path, **options: object) -> Report:
    trace = load_trace(path)
    return build_report(trace, analyse_trace(trace, AnalysisOptions(**options)))  # type: ignore[arg-type]


@pytest.fixture
def eager_and_graph(export_builder) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    before = decode_loop(export_builder(), eager_verify(50)).write("before.sqlite")
    after = decode_loop(export_builder(), graph_verify).write("after.sqlite")
    return before, after


def test_eager_to_graph_shows_verify_as_the_top_change_with_its_launches(eager_and_graph):
    # verify before: 50 × 200 + 100 = 10_100 ns; after: 3_000 ns → −7_100 ns per step.
    diff = diff_of(*eager_and_graph, skip=0)
    (process,) = diff.processes
    assert process.wall.change_ns == -7_100
    assert process.wall.is_beyond_noise is True
    assert process.wall.ci_ns is not None and process.wall.ci_ns.high_ns < 0
    top = process.buckets[0]
    assert (top.stage, top.bucket) == ("verify", "idle launch")
    changes = [abs(b.change_ns_per_step) for b in process.buckets]
    assert changes == sorted(changes, reverse=True)
    verify = next(s for s in process.stages if s.stage == "verify")
    assert verify.change_ns_per_step == -7_100
    assert (verify.before.execution, verify.before.eager_launches_per_step) == ("eager", 50.0)  # type: ignore[union-attr]
    assert (verify.after.execution, verify.after.graph_launches_per_step) == ("graph", 1.0)  # type: ignore[union-attr]
    assert process.verdict.startswith("Step time −7.1 µs/step (−")
    assert "95 % CI" in process.verdict
    assert "verify idle launch −" in process.verdict
    assert "verify: eager 50 launches/step → graph 1" in process.verdict
    assert "no change beyond noise" not in process.verdict


def test_bucket_changes_add_up_to_the_step_time_change(eager_and_graph):
    (process,) = diff_of(*eager_and_graph, skip=0).processes
    assert sum(b.before_ns_per_step for b in process.buckets) == process.before.wall.mean_ns
    assert sum(b.after_ns_per_step for b in process.buckets) == process.after.wall.mean_ns


def test_a_slower_stage_is_the_top_change_and_fails_the_gate(export_builder):
    # draft's kernel runs 1_500 ns before and 6_500 ns after: +5_000 ns busy per step.
    before = decode_loop(export_builder(), eager_verify(5)).write("before.sqlite")
    after = decode_loop(export_builder(), eager_verify(5), draft_kernel_ns=6_500).write(
        "after.sqlite"
    )
    (process,) = diff_of(before, after, skip=0).processes
    top = process.buckets[0]
    assert (top.stage, top.bucket, top.change_ns_per_step) == ("draft", "busy", 5_000)
    assert top.is_beyond_noise is True
    assert process.wall.change_ns == 5_000
    assert process.verdict.startswith("Step time +5.0 µs/step (+")
    assert "draft busy +5.0 µs/step" in process.verdict
    draft = next(c for c in process.candidates if (c.stage, c.bucket) == ("draft", "busy"))
    assert draft.status == "grew"

    args = ["diff", str(before), str(after), "--skip", "0", "--fail-if-slower"]
    gated = runner.invoke(app, [*args, "10"])
    assert gated.exit_code == 3, gated.output
    assert "grew more than 10 % beyond noise" in gated.stderr
    # The step grew by about 5_000 / 4_700 ≈ 100 %: a 200 % budget passes.
    assert runner.invoke(app, [*args, "200"]).exit_code == 0


def test_identical_inputs_give_no_change_beyond_noise(export_builder):
    path = decode_loop(export_builder(), eager_verify(20)).write()
    (process,) = diff_of(path, path, skip=0).processes
    assert process.wall.change_ns == 0
    assert process.wall.is_beyond_noise is False
    assert process.verdict.startswith("Step time +0 ns/step (+0.0 %, 95 % CI −")
    assert process.verdict.endswith(": no change beyond noise")
    assert all(b.change_ns_per_step == 0 and not b.is_beyond_noise for b in process.buckets)
    assert {c.status for c in process.candidates} == {"unchanged"}
    result = runner.invoke(
        app, ["diff", str(path), str(path), "--skip", "0", "--fail-if-slower", "0"]
    )
    assert result.exit_code == 0, result.output
    assert "no change beyond noise" in result.stdout


def test_a_stage_on_one_side_only_is_listed_as_such(export_builder):
    before = decode_loop(export_builder(), eager_verify(5)).write("before.sqlite")
    after = decode_loop(export_builder(), eager_verify(5), accept=True).write("after.sqlite")
    (process,) = diff_of(before, after, skip=0).processes
    accept = next(s for s in process.stages if s.stage == "accept")
    assert (accept.presence, accept.before, accept.change_ns_per_step) == ("after only", None, 500)
    assert {b.presence for b in process.buckets if b.stage == "accept"} == {"after only"}
    markdown = runner.invoke(app, ["diff", str(before), str(after), "--skip", "0", "-f", "md"])
    assert "- Stages after only: accept" in markdown.stdout
    assert "**Step wall time (µs)**" in markdown.stdout  # steps under 1 ms: tables in µs


def test_fewer_than_two_steps_give_no_noise_estimate_and_the_gate_uses_the_change(export_builder):
    before = decode_loop(export_builder(), eager_verify(5), steps=1).write("before.sqlite")
    after = decode_loop(export_builder(), eager_verify(5), steps=1, draft_kernel_ns=6_500).write(
        "after.sqlite"
    )
    (process,) = diff_of(before, after, skip=0).processes
    assert process.wall.ci_ns is None and process.wall.is_beyond_noise is None
    assert "no noise estimate" in process.verdict
    result = runner.invoke(
        app, ["diff", str(before), str(after), "--skip", "0", "--fail-if-slower", "50"]
    )
    assert result.exit_code == 3


def test_two_ranks_of_one_file_are_compared_with_process_before_and_after(export_builder):
    builder = decode_loop(export_builder(), eager_verify(5), pid=100)
    path = decode_loop(builder, eager_verify(5), pid=200, draft_kernel_ns=3_500).write()
    result = runner.invoke(
        app,
        [
            "diff",
            str(path),
            str(path),
            "--skip",
            "0",
            "--process-before",
            "100",
            "--process-after",
            "200",
            "-f",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    (process,) = json.loads(result.stdout)["processes"]
    assert (process["before"]["pid"], process["after"]["pid"]) == (100, 200)
    assert process["wall"]["change_ns"] == 2_000


def test_matching_pids_are_compared_process_by_process_else_rank_by_rank_else_the_lowest(
    export_builder,
):
    def two_ranks(name: str, pids: tuple[int, int]) -> Path:
        builder = decode_loop(export_builder(), eager_verify(5), pid=pids[0])
        return decode_loop(builder, eager_verify(5), pid=pids[1]).write(name)

    same = diff_of(two_ranks("a.sqlite", (100, 200)), two_ranks("b.sqlite", (100, 200)), skip=0)
    assert [(p.before.pid, p.after.pid) for p in same.processes] == [(100, 100), (200, 200)]
    # Another run of the same two ranks (new pids): every rank compared, in order.
    other = diff_of(two_ranks("a.sqlite", (100, 200)), two_ranks("c.sqlite", (300, 400)), skip=0)
    assert [(p.before.pid, p.after.pid) for p in other.processes] == [(100, 300), (200, 400)]
    assert any("Compared rank by rank" in note and "200 → 400" in note for note in other.notes)
    assert other.run is not None
    one = decode_loop(export_builder(), eager_verify(5), pid=300).write("d.sqlite")
    fewer = diff_of(two_ranks("a.sqlite", (100, 200)), one, skip=0)
    assert [(p.before.pid, p.after.pid) for p in fewer.processes] == [(100, 300)]
    assert any("compared the lowest pid of each, 100 with 300" in note for note in fewer.notes)
    assert fewer.run is None


def test_json_has_schema_version_integer_ns_and_is_reproducible(eager_and_graph):
    args = ["diff", *map(str, eager_and_graph), "--skip", "0", "-f", "json"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert next(iter(data)) == "schema_version" and data["schema_version"] == 2
    assert list(data)[1] == "tool_version" and data["tool_version"] == __version__
    assert_matches_schema(first.stdout, "diff")
    wall = data["processes"][0]["wall"]
    assert isinstance(wall["ci_ns"]["low_ns"], int) and isinstance(wall["change_ns"], int)
    assert isinstance(data["processes"][0]["buckets"][0]["change_ns_per_step"], int)


def test_csv_is_not_offered_and_output_goes_to_the_file(eager_and_graph, tmp_path):
    assert "csv" not in runner.invoke(app, ["diff", "--help"]).stdout
    refused = runner.invoke(app, ["diff", *map(str, eager_and_graph), "-f", "csv"])
    assert refused.exit_code == 2  # a usage error, before any export is read
    assert refused.stderr == "error: --format/-f 'csv': choose one of: text, md, json.\n"
    out = tmp_path / "diff.md"
    written = runner.invoke(app, ["diff", *map(str, eager_and_graph), "-f", "md", "-o", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text().startswith("# trace-gaps diff\n\n**Step time −")


def test_markdown_of_a_hand_built_diff():
    wall = WallStats(
        mean_ns=10_000_000, p50_ns=9_900_000, p90_ns=10_500_000, max_ns=11_000_000, min_ns=9_000_000
    )
    faster = WallStats(
        mean_ns=6_000_000, p50_ns=6_000_000, p90_ns=6_200_000, max_ns=6_400_000, min_ns=5_900_000
    )
    process = ProcessDiff(
        before=Side("a.sqlite", 7, "python3", "decode_step", 40, 2, wall),
        after=Side("b.sqlite", 9, "python3", "decode_step", 40, 2, faster),
        verdict="Step time −4.00 ms/step (−40.0 %, 95 % CI −4.20 ms to −3.80 ms): "
        "verify idle host −4.00 ms/step",
        wall=WallChange(
            -4_000_000, -40.0, NsInterval(-4_200_000, -3_800_000), PctInterval(-42.0, -38.0), True
        ),
        buckets=[
            BucketChange(
                "verify",
                "idle host",
                "both",
                4_500_000,
                500_000,
                -4_000_000,
                NsInterval(-4_100_000, -3_900_000),
                True,
            ),
            BucketChange(
                "verify|x", "busy", "after only", 0, 10_000, 10_000, NsInterval(9_000, 11_000), True
            ),
        ],
        stages=[
            StageChange(
                "verify",
                "both",
                StageSide(5_000_000, "eager", 354.0, 0.0),
                StageSide(1_000_000, "graph", 0.0, 1.0),
                -4_000_000,
            ),
            StageChange(
                "verify|x", "after only", None, StageSide(10_000, "none", 0.0, 0.0), 10_000
            ),
        ],
        candidates=[],
    )
    assert (
        render_diff_markdown(Diff([process], ["a note"]))
        == """\
# trace-gaps diff

**Step time −4.00 ms/step (−40.0 %, 95 % CI −4.20 ms to −3.80 ms): verify idle host −4.00 ms/step**

## Process 7 → 9

before: a.sqlite, process 7 (python3), step decode\\_step, 40 analysed (2 warm-up skipped)  
after: b.sqlite, process 9 (python3), step decode\\_step, 40 analysed (2 warm-up skipped)  

**Step wall time (ms)**

|  | before | after | change | 95 % CI of change |
|---|---:|---:|---:|---:|
| mean | 10.00 | 6.00 | −4.00 | −4.20 to −3.80 |
| p50 | 9.90 | 6.00 | −3.90 |  |
| p90 | 10.50 | 6.20 | −4.30 |  |

**Changes by stage and bucket (ms per step, largest first)**

| stage | bucket | before | after | change | 95 % CI | beyond noise |
|---|---|---:|---:|---:|---:|---|
| verify | idle host | 4.50 | 0.50 | −4.00 | −4.10 to −3.90 | yes |
| verify\\|x | busy | — | 0.01 | +0.01 | +0.01 to +0.01 | yes |

**Stages (ms per step; mode and launches per step)**

| stage | present | before | after | change | before: mode launches | after: mode launches |
|---|---|---:|---:|---:|---|---|
| verify | both | 5.00 | 1.00 | −4.00 | eager 354 | graph 1 |
| verify\\|x | after only | — | 0.01 | +0.01 | — | none 0 |

- verify: eager 354 launches/step → graph 1
- Stages after only: verify\\|x

## Notes

- a note
"""
    )


MFU = PEER_TRACES / "nsys-ai"


@pytest.mark.skipif(
    not (MFU / "mfu_2gpu_after.sqlite").exists(), reason="nsys-ai peer traces absent"
)
def test_real_before_and_after_pair_of_a_two_gpu_run():
    before, after = MFU / "mfu_2gpu_before.sqlite", MFU / "mfu_2gpu_after.sqlite"
    diff = diff_reports(shipped_report(before), shipped_report(after))
    # Two ranks a side, new pids in the second run: compared rank by rank (before: only the
    # lowest pid of each, 144 with 148).
    process = diff.processes[0]
    assert [(p.before.pid, p.after.pid) for p in diff.processes] == [(144, 148), (145, 149)]
    assert any(n.startswith("Compared rank by rank") for n in diff.notes)
    assert diff.run is not None and diff.run.wall.ci_ns is None
    # Each side is one whole-process step: no noise estimate, and the verdict says so.
    assert process.wall.ci_ns is None and "no noise estimate" in process.verdict
    assert process.wall.change_ns == process.after.wall.mean_ns - process.before.wall.mean_ns
    assert abs(sum(b.change_ns_per_step for b in process.buckets) - process.wall.change_ns) <= len(
        process.buckets
    )
    one_rank = shipped_report(before, AnalysisOptions(process=145))
    ranks = diff_reports(one_rank, one_rank)
    assert ranks.processes[0].wall.change_ns == 0


def spec_pair() -> tuple[Path, Path] | None:
    paths = {p.name: p for p in sample_trace_paths()}
    eager = paths.get("spec_eager.sqlite")
    graphs = sorted(p for name, p in paths.items() if name.startswith("spec_graph"))
    return (eager, graphs[0]) if eager and graphs else None


@pytest.mark.skipif(
    spec_pair() is None, reason="sample_traces/spec_eager.sqlite and spec_graph*.sqlite absent"
)
def test_real_eager_vs_graph_sample_traces_show_verify_as_the_top_change():
    before, after = spec_pair()  # type: ignore[misc]
    process = diff_reports(shipped_report(before), shipped_report(after)).processes[0]
    assert "verify" in process.buckets[0].stage
    assert "verify" in process.stages[0].stage
    assert process.wall.change_ns < 0


def test_a_candidate_whose_buckets_all_stay_within_noise_is_unchanged(export_builder, tmp_path):
    #   Same workload twice with a few ns of jitter in one step: no candidate grew or shrank.
    from tests.test_report import report_of
    from trace_gaps.diff.build import diff_reports
    from trace_gaps.vocabulary import CandidateStatus

    def run(jitter: int):  # type: ignore[no-untyped-def]
        b = export_builder()
        for i in range(8):
            o = i * 10_000
            extra = jitter if i == 3 else 0
            b.range("decode_step", o, o + 9_000).range("fwd", o, o + 9_000)
            b.launch("k", o + 100, o + 200, o + 300, o + 3_000 + extra)
        path = b.write(f"run{jitter}.sqlite")
        return report_of(path, skip=0)

    result = diff_reports(run(0), run(7))
    statuses = {c.status for c in result.processes[0].candidates}
    assert statuses == {CandidateStatus.UNCHANGED}


def test_a_change_below_the_display_resolution_is_never_printed_as_plus_zero():
    from trace_gaps.render.diff_tables import Unit

    ms = Unit("ms", 1_000_000)
    assert ms.signed(4_000) == "< 0.01" and ms.signed(-4_000) == "< 0.01"
    assert ms.signed(0) == "0.00"
    assert ms.signed(6_000) == "+0.01" and ms.signed(-1_250_000) == "−1.25"


def test_a_mixed_stage_is_shown_by_graph_launches_nodes_kernels_and_copies():
    from trace_gaps.diff.changes import StageSide
    from trace_gaps.render.diff_tables import _mode

    mixed = StageSide(
        ns_per_step=1,
        execution="mixed",
        eager_launches_per_step=3.98,
        graph_launches_per_step=1.0,
        kernel_launches_per_step=2.98,
        copy_launches_per_step=1.0,
        nodes_per_replay=312.0,
    )
    assert _mode(mixed) == "mixed: 1 graph (312 nodes) + 2.98 kernels + 1 copy"
    eager = StageSide(1, "eager", 354.0, 0.0, 354.0, 0.0, None)
    assert _mode(eager) == "eager 354"


def test_the_bucket_table_leaves_out_changes_that_print_as_zero(eager_and_graph):
    result = runner.invoke(app, ["diff", *map(str, eager_and_graph), "-f", "md"])
    assert result.exit_code == 0, result.output
    assert "+0.00" not in result.stdout and "−0.00" not in result.stdout


def test_bucket_tables_made_beside_each_side_give_the_same_diff():
    # A diff's sides make their step bucket tables where they are analysed (side_runner.py);
    # the diff made from them is the one made from the reports alone.
    from trace_gaps.diff.build import ComparedSide, diff_sides
    from trace_gaps.diff.side_runner import without_tabled_steps
    from trace_gaps.diff.step_tables import step_bucket_tables
    from trace_gaps.render.diff import render_diff_json

    samples = {p.stem: p for p in sample_trace_paths()}
    before = after = shipped_report(samples["spec_two_ranks"])
    tables = (step_bucket_tables(before), step_bucket_tables(after))
    assert sorted(tables[0]) == sorted(p.pid for p in before.processes)
    assert all(len(t) and t.to_numpy().sum() > 0 for t in tables[0].values())
    made_apart = diff_sides(ComparedSide(before, tables[0]), ComparedSide(after, tables[1]))
    assert render_diff_json(made_apart) == render_diff_json(diff_reports(before, after))
    # The sides send their reports back without the step ledger entries the tables hold.
    sent = (without_tabled_steps(before, tables[0]), without_tabled_steps(after, tables[1]))
    assert all(not p.step_ledger for p in sent[0].processes)
    made_from_sent = diff_sides(ComparedSide(sent[0], tables[0]), ComparedSide(sent[1], tables[1]))
    assert render_diff_json(made_from_sent) == render_diff_json(made_apart)


@pytest.mark.parametrize(
    "path", sweep(sample_trace_paths(), REPRESENTATIVE_SAMPLES), ids=lambda p: p.stem
)
def test_a_sides_tables_from_its_analysis_are_those_of_its_report(path):
    # A diff's side of one export makes its tables from the analysis' ledger frame and
    # sends a report without step ledger entries (side_runner.run_side): the tables must be
    # the ones made from the entries, row order (the walls'), columns and dtypes included.
    from trace_gaps.diff.side_runner import analysis_bucket_tables
    from trace_gaps.diff.step_tables import step_bucket_tables

    trace = load_trace(path)
    analysis = analyse_trace(trace, AnalysisOptions())
    from_entries = step_bucket_tables(build_report(trace, analysis))
    from_analysis = analysis_bucket_tables(analysis)
    assert sorted(from_analysis) == sorted(from_entries)
    for pid, table in from_entries.items():
        assert table.to_numpy().sum() > 0
        pd.testing.assert_frame_equal(from_analysis[pid], table)
    assert not any(
        p.step_ledger for p in build_report(trace, analysis, step_ledger=False).processes
    )


def _sides(before: Path, after: Path, relay):  # type: ignore[no-untyped-def]
    from trace_gaps.diff.side_runner import run_side

    options = AnalysisOptions()
    return [
        run_side((None, relay), [p], options, False, b) for p, b in ((before, True), (after, False))
    ]


def _json_drawn_with(sides, means):  # type: ignore[no-untyped-def]
    """The diff's JSON of these sides with these resampled means in place of theirs."""
    from trace_gaps.diff.build import diff_sides
    from trace_gaps.render.diff import render_diff_json

    drawn = [replace(side, means=m) for side, m in zip(sides, means, strict=True)]
    return render_diff_json(diff_sides(*drawn))


def test_bootstrap_means_drawn_in_the_sides_give_the_diff_drawn_in_one_process():
    # The before side draws when its steps are cut and hands the generator on; the after
    # side draws at its end (side_draws.py). The diff must be the one drawn all at once.
    from trace_gaps.diff.side_draws import DrawRelay

    samples = {p.stem: p for p in sample_trace_paths()}
    for before, after in (("spec_eager", "spec_sync"), ("spec_sync", "plain_decode")):
        sides = _sides(samples[before], samples[after], DrawRelay())
        b_means, a_means = sides[0].means, sides[1].means
        assert b_means is not None and a_means is not None
        assert a_means.before_steps == b_means.steps
        drawn_here = _json_drawn_with(sides, (None, None))
        assert json.loads(drawn_here)["processes"][0]["wall"]["ci_ns"] is not None
        assert _json_drawn_with(sides, (b_means, a_means)) == drawn_here
        # The sides' means are what the diff uses (other means, another CI) but only
        # when drawn for the step counts it compares; else it draws its own.
        shifted = replace(a_means, means=a_means.means + 1_000_000)
        assert _json_drawn_with(sides, (b_means, shifted)) != drawn_here
        for other in (
            (replace(b_means, steps=b_means.steps + 1), shifted),
            (b_means, replace(shifted, before_steps=shifted.before_steps - 1)),
            (b_means, replace(shifted, steps=shifted.steps + 1)),
            # drawn for another table: columns the diff does not compare
            (
                b_means,
                replace(
                    shifted,
                    columns=pd.MultiIndex.from_tuples(
                        [(f"other {i}", "busy") for i in range(len(shifted.columns))]
                    ),
                ),
            ),
        ):
            assert _json_drawn_with(sides, other) == drawn_here


def test_sides_of_several_processes_draw_nothing():
    # Their pairs' draws would alternate between the sides: diff_sides draws them all.
    from trace_gaps.diff.side_draws import DrawRelay

    two_ranks = {p.stem: p for p in sample_trace_paths()}["spec_two_ranks"]
    sides = _sides(two_ranks, two_ranks, DrawRelay())
    assert [side.means for side in sides] == [None, None]
    assert len(sides[0].report.processes) == 2


def test_dram_traffic_per_stage_is_compared_between_captures_with_gpu_metrics() -> None:
    # gm_sync_graph -> gm_ra_eager: one model (weights and KV cache 580 MB a step), its
    # forward graph-replayed, then eager behind a run-ahead host (docs/diff.md).
    before, after = shipped_trace("gm_sync_graph"), shipped_trace("gm_ra_eager")
    args = ["diff", str(before), str(after), "-f", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert_matches_schema(result.stdout, "diff")
    (process,) = json.loads(result.stdout)["processes"]
    stages = {s["stage"]: s for s in process["stages"]}
    # Each side's figures are its own report's stage figures.
    for side, path in (("before", before), ("after", after)):
        report = shipped_json(path)["processes"][0]
        mine = {s["name"]: s for s in report["stages"]}
        for name, stage in stages.items():
            figures = mine[name].get("gpu_metrics")
            if figures is None:
                assert "gpu_metrics" not in stage[side]
                continue
            gpu = stage[side]["gpu_metrics"]
            assert gpu["dram_bytes_per_step"] == (
                figures["dram_read_bytes_per_step"] + figures["dram_write_bytes_per_step"]
            )
            assert gpu["dram_bandwidth_pct"] == round(
                figures["dram_read_pct"] + figures["dram_write_pct"], 1
            )
            assert gpu["sol_ns_per_step"] == figures["sol_ns_per_step"]
    forward = stages["forward"]
    graph, eager = forward["before"]["gpu_metrics"], forward["after"]["gpu_metrics"]
    # The same weights read once a step on both sides: the bytes within the eager side's
    # sampling excess (+31 %, docs/diff.md); the bandwidth over busy time apart.
    assert 0.9 * 580e6 < graph["dram_bytes_per_step"] < eager["dram_bytes_per_step"] < 1.4 * 580e6
    assert abs(eager["dram_bandwidth_pct"] - graph["dram_bandwidth_pct"]) > 3
    text = runner.invoke(app, ["diff", str(before), str(after), "-f", "md"]).stdout
    assert "DRAM traffic per stage" in text
    assert "| forward | 606.5 | 792.6 | +186.1 (+31 %) | 22.1 | 28.1 | +6.0 |" in text


def test_a_diff_without_gpu_metrics_has_no_dram_table(eager_and_graph):  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["diff", *map(str, eager_and_graph), "--skip", "0"])
    assert result.exit_code == 0, result.output
    assert "DRAM traffic" not in result.stdout
    data = runner.invoke(app, ["diff", *map(str, eager_and_graph), "--skip", "0", "-f", "json"])
    assert '"gpu_metrics"' not in data.stdout


def test_a_stage_sides_figures_are_the_ones_declared_compared_with_their_values():
    # Sums of launch kinds on a stage whose launches are all kinds: the side's figures are
    # the declared ones (figures/stage.py), one per StageSide field but its time and GPU traffic.
    from dataclasses import fields

    from trace_gaps.diff.changes import stage_side
    from trace_gaps.figures.stage import compared_figures

    stage = shipped_report(SAMPLE_TRACES / "spec_graph_node.sqlite").processes[0].stages[0]
    sides = {f.name for f in fields(StageSide)} - {"ns_per_step", "gpu_metrics"}
    assert set(compared_figures(stage)) == sides
    side = stage_side(stage, 7)
    launches = stage.launches_per_step
    assert side.execution == stage.execution and side.nodes_per_replay == stage.nodes_per_replay
    assert side.copy_launches_per_step == round(launches["memcpy"] + launches["memset"], 2)
    assert side.eager_launches_per_step == round(
        launches["kernel"] + launches["memcpy"] + launches["memset"], 2
    )
    assert side.graph_launches_per_step == launches["graph"]
    assert stage_side(None, 7) == StageSide(7, "none", 0.0, 0.0, 0.0, 0.0, None, None)
