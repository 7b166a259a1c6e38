"""Stages: which NVTX ranges they are, and which stage each op and idle ns belongs to."""

from __future__ import annotations

from tests.test_ledger import ledger_of


def steps_with(builder, body, count=3):  # type: ignore[no-untyped-def]
    for i in range(count):
        o = i * 10_000
        builder.range("decode_step", o, o + 10_000)
        body(builder, o)
    return builder.write()


def stage_totals(ledger):  # type: ignore[no-untyped-def]
    totals: dict[str, int] = {}
    for (_, stage, _, _), ns in ledger.items():
        totals[stage] = totals.get(stage, 0) + ns
    return totals


def test_ranges_of_other_domains_never_become_stages(export_builder):
    #   [decode_step [verify 0..6000 [cub::scan 1000..2000 (domain 5)]]]
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("verify", o, o + 6_000).range("cub::scan", o + 1_000, o + 2_000, domain_id=5)
        b.launch("k", o + 1_100, o + 1_200, o + 1_300, o + 1_900)

    totals = stage_totals(ledger_of(steps_with(export_builder(), body), skip=0))
    assert set(totals) == {"verify", "(no stage)"}
    assert totals["verify"] == 3 * 6_000


def test_emit_nvtx_decorations_are_dropped_before_grouping(export_builder):
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range(f"aten::add, seq = {o}, op_id = {o + 1}", o, o + 2_000)
        b.range("aten::add, sizes = [[2, 3], []], input_op_ids = [(1, 0)]", o + 2_000, o + 4_000)
        b.launch("k", o + 10, o + 20, o + 30, o + 40)

    totals = stage_totals(
        ledger_of(steps_with(export_builder(), body), skip=0, step_name="decode_step")
    )
    assert totals["aten::add"] == 3 * 4_000


def test_time_outside_every_stage_is_its_own_bucket(export_builder):
    #   [decode_step 0..10000 [fwd 2000..5000]]: 7000 ns per step in (no stage)
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("fwd", o + 2_000, o + 5_000)
        b.launch("k", o + 2_100, o + 2_200, o + 2_300, o + 2_400)

    totals = stage_totals(ledger_of(steps_with(export_builder(), body), skip=0))
    assert totals == {"fwd": 9_000, "(no stage)": 21_000}


def test_depth_two_names_children_after_their_parent(export_builder):
    #   [verify 0..6000 [attn 1000..3000]]: verify/attn 2000, verify 4000 per step
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("verify", o, o + 6_000).range("attn", o + 1_000, o + 3_000)
        b.launch("k", o + 1_100, o + 1_200, o + 1_300, o + 1_900)

    totals = stage_totals(ledger_of(steps_with(export_builder(), body), skip=0, depth=2))
    assert totals == {"verify/attn": 6_000, "verify": 12_000, "(no stage)": 12_000}


def test_an_op_launched_in_one_stage_and_running_in_the_next_is_charged_to_the_first(
    export_builder,
):
    #   [prepare 0..1000][verify 1000..10000]; prepare launches k at 100..200, k runs 500..4000
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("prepare", o, o + 1_000).range("verify", o + 1_000, o + 10_000)
        b.launch("k", o + 100, o + 200, o + 500, o + 4_000)

    ledger = ledger_of(steps_with(export_builder(), body), skip=0)
    assert ledger[(0, "prepare", "busy", "")] == 3_500
    assert (0, "verify", "busy", "") not in ledger


def test_ops_without_a_launching_call_are_charged_to_no_launch_call(export_builder):
    def body(b, o):  # type: ignore[no-untyped-def]
        b.range("fwd", o, o + 10_000)
        b.kernel("orphan", o + 1_000, o + 2_000)

    ledger = ledger_of(steps_with(export_builder(), body), skip=0)
    assert ledger[(0, "(no launch call)", "busy", "")] == 1_000
