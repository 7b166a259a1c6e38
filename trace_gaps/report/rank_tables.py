"""The tables across processes: the ranks' collectives and waits, or else the slowest
process per stage."""

from __future__ import annotations

from trace_gaps.figures.declaration import LEFT, RIGHT
from trace_gaps.records.report import Report
from trace_gaps.report.tables import Table
from trace_gaps.units import format_ms
from trace_gaps.vocabulary import Bucket


def ranks_table(report: Report) -> Table:
    """The cross-rank view: per process, its collectives and whom it waits for."""
    ranks = report.ranks
    walls = {p.label or str(p.pid): p.steps.wall.mean_ns for p in report.processes}
    buckets: dict[str, dict[str, int]] = {}
    for process in report.processes:
        for entry in process.ledger:
            per = buckets.setdefault(process.label or str(process.pid), {})
            per[entry.bucket] = per.get(entry.bucket, 0) + entry.ns_per_step
    rows = []
    for rank in ranks.processes:
        mine = buckets.get(rank.label, {})
        waits_for = ", ".join(f"{w.label}: {format_ms(w.ns_per_step)}" for w in rank.waits_for)
        rows.append(
            [
                rank.label + (" (pace)" if rank.label == ranks.pace_setter else ""),
                format_ms(walls.get(rank.label, 0)),
                format_ms(mine.get(Bucket.BUSY.value, 0)),
                format_ms(mine.get(Bucket.WAIT.value, 0)),
                format_ms(mine.get(Bucket.IDLE.value, 0)),
                f"{rank.collectives_per_step:g}",
                format_ms(rank.collective_ns_per_step),
                f"{rank.last_arrival_fraction * 100:.0f}",
                waits_for or "-",
            ]
        )
    pace = (
        f"process {ranks.pace_setter} sets the pace (arrives last most often)"
        if ranks.pace_setter_pid is not None
        else "no matched collective"
    )
    return Table(
        title=f"Ranks: collectives and waits (ms per step); {pace}",
        columns=[
            "pid",
            "step",
            "busy",
            "wait",
            "idle",
            "collectives",
            "in collectives",
            "% last",
            "waits for",
        ],
        align=[RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, LEFT],
        rows=rows,
    )


def cross_process_table(report: Report) -> Table:
    """The ranks view where processes run collectives, else the slowest process per stage."""
    return ranks_table(report) if report.ranks.processes else slowest_rank_table(report)


def slowest_rank_table(report: Report) -> Table:
    """Per stage present in several processes, which process takes longest."""
    rows = [
        [
            entry.stage,
            str(entry.pid),
            format_ms(entry.ns_per_step),
            ", ".join(f"{pid}: {format_ms(ns)}" for pid, ns in entry.others_ns_per_step.items()),
        ]
        for entry in report.slowest_rank_by_stage
    ]
    return Table(
        title="Slowest process per stage (ms per step)",
        columns=["stage", "slowest pid", "ms/step", "others"],
        align=[LEFT, RIGHT, RIGHT, LEFT],
        rows=rows,
    )
