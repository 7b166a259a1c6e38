"""The step ledger: every ns of a step charged to one (stage, bucket, cause)."""

from __future__ import annotations

from pathlib import Path

from trace_gaps.analysis.engine.metrics import LEDGER
from trace_gaps.analysis.engine.pipeline import Analysis, AnalysisOptions, analyse_trace
from trace_gaps.analysis.stages import STAGE
from trace_gaps.nsys.load import load_trace


def ledger_of(path: Path, **options: object) -> dict[tuple[int, str, str, str], int]:
    analysis = analyse(path, **options)
    names = analysis.stage_map.names
    return {
        (int(r.step_id), names[int(getattr(r, STAGE))], str(r.bucket), str(r.cause)): int(
            r.duration_ns
        )
        for r in analysis.metrics[LEDGER].itertuples()
    }


def analyse(path: Path, **options: object) -> Analysis:
    return analyse_trace(load_trace(path), AnalysisOptions(**options))  # type: ignore[arg-type]


def three_steps(builder, body):  # type: ignore[no-untyped-def]
    """Three decode_step ranges of 10_000 ns each at 0, 10_000, 20_000, with body(offset) inside."""
    for offset in (0, 10_000, 20_000):
        builder.range("decode_step", offset, offset + 10_000)
        body(builder, offset)
    return builder


def test_busy_is_charged_to_the_launching_stage_and_idle_to_the_open_stage(export_builder):
    #   thread  [decode_step ............................................]
    #           [draft 0..4000      ][verify 4000..10000                 ]
    #   calls     [launch 100..600]            [launch 5000..5400]
    #   GPU             [k1 1000..3000]                  [k2 6000..9000]
    #   idle    0..1000 draft (100..600 launch, 600..1000 queued, 0..100 host)
    #           3000..4000 draft host; 4000..6000 verify (5000..5400 launch, 5400..6000 queued)
    #           9000..10000 verify host
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("draft", o, o + 4_000).range("verify", o + 4_000, o + 10_000)
        b.launch("k1", o + 100, o + 600, o + 1_000, o + 3_000)
        b.launch("k2", o + 5_000, o + 5_400, o + 6_000, o + 9_000)

    path = three_steps(export_builder(), body).write()
    ledger = ledger_of(path, skip=0)
    assert {k[1:]: v for k, v in ledger.items() if k[0] == 1} == {
        ("draft", "busy", ""): 2_000,
        ("draft", "idle", "host"): 100 + 1_000,
        ("draft", "idle", "launch"): 500,
        ("draft", "idle", "queued"): 400,
        ("verify", "busy", ""): 3_000,
        ("verify", "idle", "host"): 1_000 + 1_000,
        ("verify", "idle", "launch"): 400,
        ("verify", "idle", "queued"): 600,
    }


def test_ledger_sums_to_wall_time_of_every_step(export_builder):
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("draft", o + 500, o + 4_000)
        b.launch("k1", o + 600, o + 900, o + 800, o + 12_000)  # runs into the next step

    path = three_steps(export_builder(), body).write()
    analysis = analyse(path, skip=0)
    per_step = analysis.metrics[LEDGER].groupby("step_id")["duration_ns"].sum()
    walls = (analysis.steps["end_ns"] - analysis.steps["start_ns"]).set_axis(
        analysis.steps["step_id"]
    )
    assert per_step.to_dict() == walls.to_dict()


def test_overlapping_ops_charge_busy_time_to_the_op_that_started_first(export_builder):
    #   GPU stream 7: [a 1000..5000 (draft)]
    #   GPU stream 8:        [b 2000..8000 (verify)]
    #   busy: draft 1000..5000, verify 5000..8000
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("draft", o, o + 1_000).range("verify", o + 1_000, o + 2_000)
        b.launch("a", o + 100, o + 200, o + 1_000, o + 5_000, stream_id=7)
        b.launch("b", o + 1_100, o + 1_200, o + 2_000, o + 8_000, stream_id=8)

    ledger = ledger_of(three_steps(export_builder(), body).write(), skip=0)
    assert ledger[(0, "draft", "busy", "")] == 4_000
    assert ledger[(0, "verify", "busy", "")] == 3_000


def test_idle_inside_a_sync_call_is_sync(export_builder):
    #   calls  [launch 0..100]  [cudaStreamSynchronize 200..6000]
    #   GPU                         [k 300..5000]
    #   idle 0..100 launch, 100..200 queued, 200..300 and 5000..6000 sync (the thread's
    #   call wins over queued), 6000..10000 host
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("accept", o, o + 10_000)
        b.launch("k", o, o + 100, o + 300, o + 5_000)
        b.call("cudaStreamSynchronize", o + 200, o + 6_000)

    ledger = ledger_of(three_steps(export_builder(), body).write(), skip=0)
    assert {k[1:]: v for k, v in ledger.items() if k[0] == 2} == {
        ("accept", "busy", ""): 4_700,
        ("accept", "idle", "launch"): 100,
        ("accept", "idle", "queued"): 100,
        ("accept", "idle", "sync"): 1_100,
        ("accept", "idle", "host"): 4_000,
    }
