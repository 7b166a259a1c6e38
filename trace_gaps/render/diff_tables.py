"""The tables of a Diff (step time, buckets, stages, DRAM traffic, candidates) and the units
they are shown in, for text and Markdown (render/diff.py draws them)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_gaps.diff.build import ProcessDiff
from trace_gaps.diff.changes import GpuSide, Side, StageChange, StageSide
from trace_gaps.diff.verdicts import (
    describe_mode_change,
)
from trace_gaps.report.tables import LEFT, RIGHT, Table
from trace_gaps.units import NS_PER_MS, NS_PER_US
from trace_gaps.vocabulary import Presence

# Rows of the bucket and stage tables shown in text and Markdown (JSON has them all).
TABLE_ROWS = 20


@dataclass(frozen=True, slots=True)
class Unit:
    """The unit of a process diff's tables: ms, or µs when steps are shorter than 1 ms."""

    name: str
    ns: int

    def cell(self, ns: int) -> str:
        return f"{ns / self.ns:.2f}"

    def is_below_resolution(self, ns: int) -> bool:
        """Whether the value would print as 0.00: under half of 0.01 of the unit."""
        return abs(ns) * 200 < self.ns

    def signed(self, ns: int) -> str:
        """+1.25 or −0.40; a change too small to print is "< 0.01", never "+0.00"."""
        if ns == 0:
            return "0.00"
        if self.is_below_resolution(ns):
            return "< 0.01"
        return ("−" if ns < 0 else "+") + self.cell(abs(ns))


def table_unit(process: ProcessDiff) -> Unit:
    """ms for steps of 1 ms or more on either side, else µs, so that changes stay readable."""
    longest = max(process.before.wall.mean_ns, process.after.wall.mean_ns)
    return Unit("ms", NS_PER_MS) if longest >= NS_PER_MS else Unit("µs", NS_PER_US)


def describe_side(label: str, side: Side) -> str:
    """ "before: run1.sqlite, process 834 (python3), step decode_step, 40 analysed (…)"."""
    name = f" ({side.process_name})" if side.process_name else ""
    step = side.step_name or "whole process"
    return (
        f"{label}: {side.file}, process {side.pid}{name}, step {step}, "
        f"{side.steps_analysed} analysed ({side.steps_skipped} warm-up skipped)"
    )


def wall_table(process: ProcessDiff) -> Table:
    """Step wall time before and after: mean with its CI, p50, p90."""
    unit = table_unit(process)
    before, after = process.before.wall, process.after.wall
    ci = process.wall.ci_ns
    rows = [
        [
            "mean",
            unit.cell(before.mean_ns),
            unit.cell(after.mean_ns),
            unit.signed(after.mean_ns - before.mean_ns),
            f"{unit.signed(ci.low_ns)} to {unit.signed(ci.high_ns)}" if ci else "n/a",
        ],
        [
            "p50",
            unit.cell(before.p50_ns),
            unit.cell(after.p50_ns),
            unit.signed(after.p50_ns - before.p50_ns),
            "",
        ],
        [
            "p90",
            unit.cell(before.p90_ns),
            unit.cell(after.p90_ns),
            unit.signed(after.p90_ns - before.p90_ns),
            "",
        ],
    ]
    return Table(
        title=f"Step wall time ({unit.name})",
        columns=["", "before", "after", "change", f"{process_ci_label(process)}"],
        align=[LEFT, RIGHT, RIGHT, RIGHT, RIGHT],
        rows=rows,
    )


def process_ci_label(process: ProcessDiff) -> str:
    return "95 % CI of change" if process.wall.ci_ns else "CI (needs ≥ 2 steps a side)"


def bucket_table(process: ProcessDiff, *, rows: int = TABLE_ROWS) -> Table:
    """(stage, bucket) ms per step before, after and the change, largest change first."""
    unit = table_unit(process)
    # A change that prints as 0.00 is no change to the reader, beyond noise or not.
    shown = [b for b in process.buckets if not unit.is_below_resolution(b.change_ns_per_step)]
    hidden = len(process.buckets) - len(shown)
    body = [
        [
            b.stage,
            b.bucket,
            unit.cell(b.before_ns_per_step) if b.presence != Presence.AFTER_ONLY else "—",
            unit.cell(b.after_ns_per_step) if b.presence != Presence.BEFORE_ONLY else "—",
            unit.signed(b.change_ns_per_step),
            f"{unit.signed(b.ci_ns.low_ns)} to {unit.signed(b.ci_ns.high_ns)}"
            if b.ci_ns
            else "n/a",
            "" if b.is_beyond_noise is None else ("yes" if b.is_beyond_noise else "no"),
        ]
        for b in shown[:rows]
    ]
    more = len(shown) - rows
    return Table(
        title=f"Changes by stage and bucket ({unit.name} per step, largest first)"
        + (f"; {more} smaller rows in --format json" if more > 0 else "")
        + (
            f"; {hidden} rows changed by < 0.01 {unit.name} left out (in --format json)"
            if hidden
            else ""
        ),
        columns=["stage", "bucket", "before", "after", "change", "95 % CI", "beyond noise"],
        align=[LEFT, LEFT, RIGHT, RIGHT, RIGHT, RIGHT, LEFT],
        rows=body,
    )


def _mode(side: StageSide | None) -> str:
    """ "eager 354", "graph 1", or a mixed stage by its parts: "mixed: 1 graph (312 nodes)
    + 2.98 kernels + 1 copy"."""
    if side is None:
        return "—"
    launches = side.eager_launches_per_step + side.graph_launches_per_step
    if side.execution != "mixed":
        return f"{side.execution} {launches:g}"
    parts = []
    if side.graph_launches_per_step:
        nodes = f" ({_count(side.nodes_per_replay, 'node')})" if side.nodes_per_replay else ""
        parts.append(f"{_count(side.graph_launches_per_step, 'graph')}{nodes}")
    if side.kernel_launches_per_step:
        parts.append(_count(side.kernel_launches_per_step, "kernel"))
    if side.copy_launches_per_step:
        parts.append(_count(side.copy_launches_per_step, "copy", "copies"))
    return "mixed: " + " + ".join(parts) if parts else f"mixed {launches:g}"


def _count(n: float, one: str, many: str | None = None) -> str:
    return f"{n:g} {one if n == 1 else many or one + 's'}"


def _shown_stages(process: ProcessDiff, rows: int) -> list[StageChange]:
    """The largest changes, plus every stage whose mode or launch count moved much."""
    return [
        s for i, s in enumerate(process.stages) if i < rows or describe_mode_change(s) is not None
    ]


def stage_lines(process: ProcessDiff) -> list[str]:
    """Launch changes in words, and the stages present on one side only."""
    lines = [line for line in map(describe_mode_change, process.stages) if line]
    for presence in (Presence.BEFORE_ONLY, Presence.AFTER_ONLY):
        names = sorted(s.stage for s in process.stages if s.presence == presence)
        if names:
            lines.append(f"Stages {presence}: " + ", ".join(names))
    return lines


def stage_table(process: ProcessDiff, *, rows: int = TABLE_ROWS) -> Table:
    """Stages matched by name: ms per step, execution mode and launches per step, each side."""
    unit = table_unit(process)
    body = [
        [
            s.stage,
            s.presence,
            unit.cell(s.before.ns_per_step) if s.before else "—",
            unit.cell(s.after.ns_per_step) if s.after else "—",
            unit.signed(s.change_ns_per_step),
            _mode(s.before),
            _mode(s.after),
        ]
        for s in _shown_stages(process, rows)
    ]
    return Table(
        title=f"Stages ({unit.name} per step; mode and launches per step)",
        columns=[
            "stage",
            "present",
            "before",
            "after",
            "change",
            "before: mode launches",
            "after: mode launches",
        ],
        align=[LEFT, LEFT, RIGHT, RIGHT, RIGHT, LEFT, LEFT],
        rows=body,
    )


def dram_table(process: ProcessDiff) -> Table:
    """Stages with GPU metrics on a side: DRAM bytes per step and bandwidth, each side (no
    rows where neither side has GPU metrics)."""

    def mb(side: StageSide | None) -> str:
        return "—" if side is None or side.gpu_metrics is None else _mb(side.gpu_metrics)

    def pct(side: StageSide | None) -> str:
        gpu = None if side is None else side.gpu_metrics
        return "—" if gpu is None else f"{gpu.dram_bandwidth_pct:.1f}"

    body = []
    for s in process.stages:
        before = s.before.gpu_metrics if s.before else None
        after = s.after.gpu_metrics if s.after else None
        if before is None and after is None:
            continue
        body.append(
            [
                s.stage,
                mb(s.before),
                mb(s.after),
                _bytes_change(before, after) if before and after else "—",
                pct(s.before),
                pct(s.after),
                _pct_change(before, after) if before and after else "—",
            ]
        )
    return Table(
        title="DRAM traffic per stage (GPU metrics: MB read and written per step; bandwidth, "
        "% of peak over the stage's GPU busy time)",
        columns=["stage", "before MB", "after MB", "change", "before %", "after %", "change"],
        align=[LEFT, *[RIGHT] * 6],
        rows=body,
    )


def _mb(gpu: GpuSide) -> str:
    return f"{gpu.dram_bytes_per_step / 1e6:.1f}"


def _bytes_change(before: GpuSide, after: GpuSide) -> str:
    """ "+186.1 (+31 %)": MB per step, after − before, and relative to before."""
    change = after.dram_bytes_per_step - before.dram_bytes_per_step
    base = before.dram_bytes_per_step
    relative = f" ({100 * change / base:+.0f} %)" if base else ""
    return f"{change / 1e6:+.1f}{relative}".replace("-", "−")


def _pct_change(before: GpuSide, after: GpuSide) -> str:
    """ "+6.0": points of % of peak, after − before."""
    return f"{after.dram_bandwidth_pct - before.dram_bandwidth_pct:+.1f}".replace("-", "−")


def candidate_table(process: ProcessDiff) -> Table:
    """Candidates ranked on either side: appeared, vanished, grew, shrank."""
    unit = table_unit(process)
    body = [
        [
            c.stage,
            c.bucket,
            c.status,
            str(c.before_rank) if c.before_rank else "—",
            str(c.after_rank) if c.after_rank else "—",
            unit.cell(c.before_ns_per_step),
            unit.cell(c.after_ns_per_step),
            unit.signed(c.change_ns_per_step),
        ]
        for c in process.candidates
    ]
    return Table(
        title=f"Candidates ({unit.name} per step; rank on each side, — = not ranked)",
        columns=[
            "stage",
            "bucket",
            "status",
            "rank before",
            "rank after",
            "before",
            "after",
            "change",
        ],
        align=[LEFT, LEFT, LEFT, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT],
        rows=body,
    )
