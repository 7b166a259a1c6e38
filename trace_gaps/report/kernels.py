"""The kernel summary table (`analyze --kernels`), shared by the text and Markdown renderers."""

from __future__ import annotations

from trace_gaps.model import OpKind
from trace_gaps.records.report import KernelRow, ProcessReport
from trace_gaps.report.tables import LEFT, RIGHT, Table
from trace_gaps.units import NS_PER_US, format_count, format_duration, format_ms

KERNEL_ROWS_SHOWN = 20  # the JSON holds every row


def kernel_table(process: ProcessReport) -> Table:
    """The ops with most GPU time in the analysed steps (none without --kernels)."""
    summary = process.kernels
    if summary is None:
        return Table(title="", columns=[], align=[], rows=[])
    shown = summary.rows[:KERNEL_ROWS_SHOWN]
    more = len(summary.rows) - len(shown)
    return Table(
        title=f"GPU ops of the {summary.steps_analysed} analysed steps by GPU time: "
        f"{summary.count} ops, {format_duration(summary.total_ns)}"
        + (
            f" (top {len(shown)} of {len(summary.rows)} rows; every row in the JSON report)"
            if more
            else ""
        ),
        columns=[
            "op",
            "stage",
            "kind",
            "count",
            "per step",
            "total ms",
            "ms/step",
            "mean µs",
            "p50 µs",
            "p90 µs",
            "% GPU",
        ],
        align=[LEFT, LEFT, LEFT, *[RIGHT] * 8],
        rows=[_cells(row) for row in shown],
    )


def kind_words(row: KernelRow) -> str:
    """ "kernel", "kernel in graph" (a node of a replay), "graph" (a replay), "memcpy"."""
    if row.from_graph and row.kind != OpKind.GRAPH.value:
        return f"{row.kind} in graph"
    return row.kind


def _cells(row: KernelRow) -> list[str]:
    return [
        row.name,
        row.stage,
        kind_words(row),
        str(row.count),
        format_count(row.count_per_step),
        format_ms(row.total_ns),
        format_ms(row.ns_per_step),
        *(f"{ns / NS_PER_US:.1f}" for ns in (row.mean_ns, row.p50_ns, row.p90_ns)),
        f"{row.share_pct:.1f}",
    ]
