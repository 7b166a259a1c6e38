"""The per-stage figures, each declared once: the fields of StageSummary.

A figure's declaration (`figure(...)` on its field) says everything about it: its unit, how
it is computed from the stage's inputs (totals summed per window over the analysed steps,
the ledger's means, the launch spacing) and reduced over the steps, its doc line, and its
columns in the per-stage table. The table (report/tables.py), the JSON and its Schema
(asdict and schema.py read the fields), the diff's stage sides (changes.py) and the list in
docs/json.md (`figures_doc`) are made from these declarations. To add a figure: compute its
input per window (a metric, analysis/metrics.py), give it to StageInputs, and declare it here.

A name that is not declared fails loudly: `STAGE_FIGURES["syncs"]` and `totals[Total.SYNC]`
raise (KeyError, AttributeError), never read as 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, TypeAlias

from trace_gaps.model import CallCategory, DictKeys, ExecutionMode, OpKind
from trace_gaps.units import format_ms

LEFT, RIGHT = "left", "right"


class Total(StrEnum):
    """A per-stage total over the analysed steps, summed per window (analysis/launches.py);
    the figures divide it by the step count."""

    KERNEL_LAUNCHES = "kernel_launches"
    LAUNCHES_WITHOUT_OP = "launches_without_op"  # no op of the launch in the export: lost records
    GRAPH_LAUNCHES = "graph_launches"
    MEMCPY_LAUNCHES = "memcpy_launches"
    MEMSET_LAUNCHES = "memset_launches"
    LAUNCH_API_NS = "launch_api_ns"
    QUEUE_NS = "queue_ns"
    QUEUED_LAUNCHES = "queued_launches"
    SYNCS = "syncs"
    SYNC_NS = "sync_ns"
    MODULE_LOADS = "module_loads"
    MODULE_LOAD_NS = "module_load_ns"
    LOOKUPS = "lookups"
    LOOKUP_NS = "lookup_ns"
    ALLOCS = "allocs"
    ALLOC_NS = "alloc_ns"
    GRAPH_SETUPS = "graph_setups"
    GRAPH_SETUP_NS = "graph_setup_ns"
    GRAPH_OPS = "graph_ops"
    EAGER_OPS = "eager_ops"


class StepValue(StrEnum):
    """A per-(stage, step) value, computed per window (analysis/launches.py,
    stage_step_values); the figures reduce it over the steps."""

    HOST_GAP_P90_NS = "host_gap_p90_ns"  # 90th percentile of the host gaps before its launches


# Launches per step by what they launch, in the JSON's key order.
LAUNCH_TOTALS: dict[OpKind, Total] = {
    OpKind.KERNEL: Total.KERNEL_LAUNCHES,
    OpKind.GRAPH: Total.GRAPH_LAUNCHES,
    OpKind.MEMCPY: Total.MEMCPY_LAUNCHES,
    OpKind.MEMSET: Total.MEMSET_LAUNCHES,
}
EAGER_KINDS = (OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET)
# Work that should not be in a steady-state step: its count and its time, per category.
UNEXPECTED_TOTALS: dict[CallCategory, tuple[Total, Total]] = {
    CallCategory.MODULE_LOAD: (Total.MODULE_LOADS, Total.MODULE_LOAD_NS),
    CallCategory.ALLOC: (Total.ALLOCS, Total.ALLOC_NS),
    CallCategory.GRAPH_SETUP: (Total.GRAPH_SETUPS, Total.GRAPH_SETUP_NS),
}
# Per-step counts keyed by those kinds and categories (a dict may hold fewer keys: an evidence
# without a stage summary has none).
LaunchCounts: TypeAlias = Annotated[dict[str, float], DictKeys(LAUNCH_TOTALS)]
UnexpectedCounts: TypeAlias = Annotated[dict[str, float], DictKeys(UNEXPECTED_TOTALS)]


@dataclass(frozen=True, slots=True)
class StageInputs:
    """What one stage's figures are computed from (analysis/summary.py gathers it)."""

    name: str
    steps: int  # analysed steps
    totals: Mapping[str, int]  # every Total, summed over the analysed steps
    busy_ns_per_step: int  # the ledger's means
    idle_ns_per_step: int
    launch_spacing_ns: int | None  # median host gap before a launch (whole µs); None: no launch
    long_gap_threshold_ns: int  # host gaps longer than this are long
    even_gap_fraction: float | None
    long_gaps: int  # over the analysed steps
    long_gap_idle_ns: int
    step_values: Mapping[str, Sequence[int]]  # every StepValue: one per step that has one
    gpu_metrics: StageGpuInputs | None = None  # None: the export has no GPU metrics

    def total(self, *totals: Total) -> int:
        """The sum of the given totals (KeyError for one the frame lacks)."""
        return sum(int(self.totals[total]) for total in totals)

    def per_step(self, *totals: Total) -> float:
        """The totals' sum per analysed step, two decimals."""
        return per_step(self.total(*totals), self.steps)

    def ns_per_step(self, *totals: Total) -> int:
        """The totals' sum (ns) per analysed step, whole ns."""
        return int(round(self.per_step(*totals)))


@dataclass(frozen=True, slots=True)
class StageGpuInputs:
    """One stage's GPU metric integrals over its busy time in the analysed steps
    (analysis/gpu_metrics.py: sampled_ns and each metric's ns at 100 %, the clock's MHz x ns),
    and the GPU's peak DRAM bandwidth and sampling period."""

    integrals: Mapping[str, int]
    peak_bytes_per_s: int
    period_ns: int

    def share(self, name: str) -> float:
        """The metric's mean share of 100 % over the sampled busy time (0 when none)."""
        sampled = self.integrals["sampled_ns"]
        return self.integrals[name] / sampled if sampled else 0.0


def per_step(total: float, steps: int) -> float:
    """A total per step, two decimals (0 without steps)."""
    return round(float(total) / steps, 2) if steps else 0.0


def mean_over_steps(values: Sequence[int]) -> int | None:
    """The mean of a per-step value over the steps that have one, whole ns (None: none has)."""
    return int(round(sum(values) / len(values))) if values else None


def execution_mode(graph_ops: int, eager_ops: int) -> ExecutionMode:
    """Name how a stage's ops were launched."""
    if graph_ops and eager_ops:
        return ExecutionMode.MIXED
    if graph_ops:
        return ExecutionMode.GRAPH
    if eager_ops:
        return ExecutionMode.EAGER
    return ExecutionMode.NONE


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the per-stage table: header, cell text from the figure's value, and
    alignment (its place: report/tables.py STAGE_TABLE)."""

    header: str
    cell: Callable[[Any], str]
    align: str = RIGHT


@dataclass(frozen=True, slots=True)
class Figure:
    """One per-stage figure: its JSON key (the field's name) and everything said about it."""

    name: str
    unit: str
    doc: str
    compute: Callable[[StageInputs], Any]
    reduced: str  # how the steps' values become one
    columns: tuple[Column, ...] = ()
    in_csv: bool = False  # a column of the CSV (render/csv.py), named by the JSON key
    compared: Compared = False  # on the diff's stage sides (compared_figures)


# How the diff compares a figure on its stage sides (diff/changes.py StageSide): True under its
# own name, as it is; for a dict figure, sums of its keys (two decimals), each under its own name.
Compared: TypeAlias = bool | Mapping[str, tuple[str, ...]]


_FIGURE = "figure"
MEAN = "mean per analysed step"
OVER_STEPS = "over all analysed steps"
NONE = "-"


def figure(
    unit: str,
    doc: str,
    compute: Callable[[StageInputs], Any],
    *,
    reduced: str = MEAN,
    columns: tuple[Column, ...] = (),
    in_csv: bool = False,
    compared: Compared = False,
) -> Any:
    """Declare a StageSummary field as a figure (its name is the field's).

    `columns`: its columns in the per-stage table; `in_csv`: a column of the CSV too, beside
    each ledger row of the stage (a scalar figure only: int, float or str, or None);
    `compared`: on the diff's stage sides, and how (Compared).
    """
    declared = Figure("", unit, doc, compute, reduced, columns, in_csv, compared)
    return field(metadata={_FIGURE: declared})


def _count(value: float) -> str:
    return f"{value:g}"


def _launch_column(kind: OpKind, header: str) -> Column:
    return Column(header, lambda launches: f"{launches[kind.value]:g}")


def _unexpected_words(calls: dict[str, float]) -> str:
    return ", ".join(f"{count:g} {kind}" for kind, count in calls.items() if count)


def _nodes_per_replay(stage: StageInputs) -> float | None:
    replays = stage.total(Total.GRAPH_LAUNCHES)
    return round(stage.total(Total.GRAPH_OPS) / replays, 2) if replays else None


def _queue_delay_per_launch(stage: StageInputs) -> int:
    launches = stage.total(*LAUNCH_TOTALS.values())
    return int(round(stage.total(Total.QUEUE_NS) / launches)) if launches else 0


_KEYS = "{" + ", ".join(f'"{kind}"' for kind in LAUNCH_TOTALS) + "}"
_UNEXPECTED_KEYS = "{" + ", ".join(f'"{kind}"' for kind in UNEXPECTED_TOTALS) + "}"


@dataclass(frozen=True, slots=True)
class StageSummary:
    """One stage's launch economics and time, per analysed step."""

    name: str = figure(
        "name",
        "the stage: an NVTX range name, normalised",
        lambda s: s.name,
        reduced=NONE,
        columns=(Column("stage", str, LEFT),),
    )
    execution: str = figure(
        "graph | eager | mixed | none",
        "how its ops were launched: graph (all from graph launches), eager (none), mixed, none (no op)",
        lambda s: execution_mode(s.total(Total.GRAPH_OPS), s.total(Total.EAGER_OPS)).value,
        reduced=OVER_STEPS,
        columns=(Column("mode", str, LEFT),),
        compared=True,
    )
    busy_ns_per_step: int = figure(
        "ns/step", "GPU busy time charged to the stage (the ledger)", lambda s: s.busy_ns_per_step
    )
    idle_ns_per_step: int = figure(
        "ns/step", "GPU idle time charged to the stage (the ledger)", lambda s: s.idle_ns_per_step
    )
    launches_per_step: LaunchCounts = figure(
        f"{_KEYS}: launches/step",
        "launch calls by what they launch (a graph launch replays a graph)",
        lambda s: {kind.value: s.per_step(total) for kind, total in LAUNCH_TOTALS.items()},
        columns=(
            _launch_column(OpKind.KERNEL, "kernels"),
            _launch_column(OpKind.MEMCPY, "memcpy"),
            _launch_column(OpKind.MEMSET, "memset"),
            _launch_column(OpKind.GRAPH, "graph replays"),
        ),
        # The diff shows a "mixed" stage by its parts; its eager launches are the parts' sum.
        compared={
            "eager_launches_per_step": EAGER_KINDS,
            "graph_launches_per_step": (OpKind.GRAPH,),
            "kernel_launches_per_step": (OpKind.KERNEL,),
            "copy_launches_per_step": (OpKind.MEMCPY, OpKind.MEMSET),
        },
    )
    eager_launches_per_step: float = figure(
        "launches/step",
        "kernel, memcpy and memset launches",
        lambda s: s.per_step(*(LAUNCH_TOTALS[kind] for kind in EAGER_KINDS)),
    )
    launch_api_ns_per_step: int = figure(
        "ns/step",
        "time inside launch calls, all of it (GPU busy or idle)",
        lambda s: s.ns_per_step(Total.LAUNCH_API_NS),
        columns=(Column("launch calls ms", format_ms),),
    )
    queue_delay_mean_ns_per_launch: int = figure(
        "ns/launch",
        "mean over the launches of (first op start - call end), when positive",
        _queue_delay_per_launch,
        reduced=OVER_STEPS,
        columns=(Column("queue µs/launch", lambda ns: f"{ns / 1_000:.1f}"),),
    )
    queue_delay_sum_ns_per_step: int = figure(
        "ns/step",
        "the sum of those per-launch delays: can exceed the step",
        lambda s: s.ns_per_step(Total.QUEUE_NS),
    )
    queued_launches_per_step: float = figure(
        "launches/step",
        "launches whose first op started after the call returned",
        lambda s: s.per_step(Total.QUEUED_LAUNCHES),
    )
    syncs_per_step: float = figure(
        "calls/step",
        "host syncs: synchronize and wait calls, blocking copies",
        lambda s: s.per_step(Total.SYNCS),
        columns=(Column("syncs", _count),),
    )
    sync_ns_per_step: int = figure(
        "ns/step",
        "time inside those syncs",
        lambda s: s.ns_per_step(Total.SYNC_NS),
        columns=(Column("sync ms", format_ms),),
    )
    unexpected_calls_per_step: UnexpectedCounts = figure(
        f"{_UNEXPECTED_KEYS}: calls/step",
        "work that should not be in a steady-state step: code loads, allocations, graph setup",
        lambda s: {
            category.value: s.per_step(count) for category, (count, _) in UNEXPECTED_TOTALS.items()
        },
        columns=(Column("unexpected work", _unexpected_words, LEFT),),
    )
    unexpected_ns_per_step: int = figure(
        "ns/step",
        "time inside those calls",
        lambda s: s.ns_per_step(*(time for _, time in UNEXPECTED_TOTALS.values())),
    )
    module_load_ns_per_step: int = figure(
        "ns/step", "time inside the code-load calls", lambda s: s.ns_per_step(Total.MODULE_LOAD_NS)
    )
    lookups_per_step: float = figure(
        "calls/step",
        "kernel and function handle lookups: counted, never loads",
        lambda s: s.per_step(Total.LOOKUPS),
    )
    lookup_ns_per_step: int = figure(
        "ns/step", "time inside those lookups", lambda s: s.ns_per_step(Total.LOOKUP_NS)
    )
    nodes_per_replay: float | None = figure(
        "ops/replay",
        "ops per graph launch, where the export has node rows (null: no graph launch)",
        _nodes_per_replay,
        reduced=OVER_STEPS,
        columns=(Column("nodes/replay", lambda n: "" if n is None else f"{n:g}"),),
        compared=True,
    )
    launch_spacing_ns: int | None = figure(
        "ns",
        "median host time from one launch call's return to the next launch (whole µs; "
        "null: no launch)",
        lambda s: s.launch_spacing_ns,
        reduced=OVER_STEPS,
    )
    long_gap_threshold_ns: int = figure(
        "ns",
        "host gaps longer than this are long (docs/definitions.md)",
        lambda s: s.long_gap_threshold_ns,
        reduced=OVER_STEPS,
    )
    long_gaps_per_step: float = figure(
        "gaps/step",
        "long host gaps",
        lambda s: per_step(s.long_gaps, s.steps),
        columns=(Column("long host gaps", _count),),
    )
    long_gap_idle_ns_per_step: int = figure(
        "ns/step",
        "GPU-idle host time inside them",
        lambda s: int(round(per_step(s.long_gap_idle_ns, s.steps))),
    )
    even_gap_fraction: float | None = figure(
        "fraction",
        "of the host time in short gaps between launches, the share in gaps within "
        "DISPATCH_FACTOR x the median spacing: per-op dispatch when high (null: no launch)",
        lambda s: s.even_gap_fraction,
        reduced=OVER_STEPS,
    )
    host_ns_per_launch_p90: int | None = figure(
        "ns",
        "per step, the 90th percentile of the host time before the stage's launches (from the "
        "thread's previous launch call's return; null: no such gap)",
        lambda s: mean_over_steps(s.step_values[StepValue.HOST_GAP_P90_NS]),
        reduced="mean over the analysed steps that have it",
    )
    gpu_metrics: StageGpuMetrics | None = figure(
        "object (left out when the export has no GPU metrics)",
        "the GPU's own metrics over the stage's GPU busy time, and its speed of light "
        "(StageGpuMetrics, below; docs/definitions.md)",
        lambda s: summarise_gpu_metrics(s),
    )


@dataclass(frozen=True, slots=True)
class GpuFigure:
    """One GPU metric figure of a stage: unit, doc, and its column in the GPU metrics table."""

    name: str
    unit: str
    doc: str
    header: str
    cell: Callable[[Any], str]


def _gpu(unit: str, doc: str, header: str, cell: Callable[[Any], str]) -> Any:
    return field(metadata={_FIGURE: GpuFigure("", unit, doc, header, cell)})


def _pct(value: float) -> str:
    return f"{value:.1f}"


def _mb(value: int) -> str:
    return f"{value / 1e6:.1f}"


@dataclass(frozen=True, slots=True)
class StageGpuMetrics:
    """A stage's GPU metrics over its busy time (each sample's rate while some op ran, shared
    among the stages by their busy time in it), per analysed step, and its speed of light."""

    samples_per_step: float = _gpu(
        "samples/step",
        "sampling periods of the stage's busy time per step: under MIN_SAMPLES_PER_STEP the "
        "rates are rough",
        "samples",
        lambda n: f"{n:g}",
    )
    dram_read_pct: float = _gpu("% of peak", "DRAM read bandwidth while busy", "DRAM read %", _pct)
    dram_write_pct: float = _gpu("% of peak", "DRAM write bandwidth while busy", "write %", _pct)
    dram_read_bytes_per_step: int = _gpu(
        "bytes/step", "bytes read from DRAM: read % x peak x busy time", "read MB", _mb
    )
    dram_write_bytes_per_step: int = _gpu("bytes/step", "bytes written to DRAM", "write MB", _mb)
    sm_active_pct: float = _gpu("%", "SMs with a warp resident", "SM active %", _pct)
    sm_issue_pct: float = _gpu("%", "SM sub-partition cycles issuing", "SM issue %", _pct)
    tensor_active_pct: float = _gpu("%", "cycles the tensor pipes ran", "tensor %", _pct)
    gpc_clock_mhz: int = _gpu("MHz", "mean GPC clock over the busy time", "clock MHz", str)
    memory_sol_ns_per_step: int = _gpu(
        "ns/step", "what its DRAM bytes (read and written) need at peak bandwidth", "", format_ms
    )
    tensor_sol_ns_per_step: int = _gpu(
        "ns/step",
        "its tensor-active time: what its tensor work needs at full tensor use",
        "",
        format_ms,
    )
    sol_ns_per_step: int = _gpu(
        "ns/step",
        "speed of light: the larger of the two (the GPU busy time it cannot go below)",
        "SoL ms",
        format_ms,
    )
    sol_fraction: float | None = _gpu(
        "fraction",
        "speed of light over busy time: 1 at the limit (null: no busy time)",
        "busy/SoL",
        lambda r: "" if not r else f"{1 / r:.1f}x",
    )


# Fewer sampling periods per step than this: a stage's rates are rough (said by the verdict).
MIN_SAMPLES_PER_STEP = 4


def summarise_gpu_metrics(stage: StageInputs) -> StageGpuMetrics | None:
    """A stage's GPU metric figures (None without GPU metrics)."""
    gpu = stage.gpu_metrics
    if gpu is None:
        return None
    busy = stage.busy_ns_per_step
    read, write = gpu.share("dram_read_ns"), gpu.share("dram_write_ns")
    tensor = gpu.share("tensor_active_ns")
    memory_ns = int(round((read + write) * busy))
    tensor_ns = int(round(tensor * busy))
    sol = max(memory_ns, tensor_ns)
    return StageGpuMetrics(
        samples_per_step=per_step(gpu.integrals["sampled_ns"] / gpu.period_ns, stage.steps),
        dram_read_pct=round(100 * read, 1),
        dram_write_pct=round(100 * write, 1),
        dram_read_bytes_per_step=int(round(read * gpu.peak_bytes_per_s * busy / 1e9)),
        dram_write_bytes_per_step=int(round(write * gpu.peak_bytes_per_s * busy / 1e9)),
        sm_active_pct=round(100 * gpu.share("sm_active_ns"), 1),
        sm_issue_pct=round(100 * gpu.share("sm_issue_ns"), 1),
        tensor_active_pct=round(100 * tensor, 1),
        gpc_clock_mhz=int(round(gpu.share("gpc_clock_mhz_ns"))),
        memory_sol_ns_per_step=memory_ns,
        tensor_sol_ns_per_step=tensor_ns,
        sol_ns_per_step=sol,
        sol_fraction=round(sol / busy, 3) if busy else None,
    )


@dataclass(frozen=True, slots=True)
class SpeedOfLight:
    """How far the step's GPU work is from the GPU's limits: every stage's speed of light
    (StageGpuMetrics.sol_ns_per_step) added up, beside the measured step and GPU busy time."""

    step_ns: int  # the measured step, mean over the analysed steps
    busy_ns_per_step: int  # GPU busy, every stage's (the ledger)
    sol_ns_per_step: int  # the stages' speed of light, summed
    memory_sol_ns_per_step: int  # of which their DRAM bytes at peak bandwidth
    dram_bytes_per_step: int  # read and written, every stage's
    # The step predicted with every stage's GPU work at its speed of light: the what-if of
    # `levers` (each stage's sol; docs/what-if.md). None: no step replayed.
    predicted_step_ns: int | None = None
    levers: list[str] = field(default_factory=list)


def speed_of_light(
    stages: Sequence[StageSummary], step_ns: int, busy_ns_per_step: int
) -> SpeedOfLight | None:
    """The step's speed of light from its stages' (None without GPU metrics)."""
    measured = [stage.gpu_metrics for stage in stages if stage.gpu_metrics is not None]
    if not measured:
        return None
    return SpeedOfLight(
        step_ns=step_ns,
        busy_ns_per_step=busy_ns_per_step,
        sol_ns_per_step=sum(m.sol_ns_per_step for m in measured),
        memory_sol_ns_per_step=sum(m.memory_sol_ns_per_step for m in measured),
        dram_bytes_per_step=sum(
            m.dram_read_bytes_per_step + m.dram_write_bytes_per_step for m in measured
        ),
    )


def gpu_figures() -> list[GpuFigure]:
    """The GPU metric figures of a stage, in their order, each with its name."""
    return [
        dataclasses.replace(f.metadata[_FIGURE], name=f.name)
        for f in dataclasses.fields(StageGpuMetrics)
    ]


def _declared(cls: type) -> dict[str, Figure]:
    return {
        f.name: dataclasses.replace(f.metadata[_FIGURE], name=f.name)
        for f in dataclasses.fields(cls)
    }


STAGE_FIGURES: dict[str, Figure] = _declared(StageSummary)


def summarise_stage(stage: StageInputs) -> StageSummary:
    """Every figure of one stage, computed from its inputs."""
    return StageSummary(**{name: f.compute(stage) for name, f in STAGE_FIGURES.items()})


def stage_columns() -> list[tuple[Figure, Column]]:
    """The per-stage table's columns, each with its figure, in the figures' order."""
    return [(f, column) for f in STAGE_FIGURES.values() for column in f.columns]


def csv_figures() -> list[Figure]:
    """The figures the CSV has a column of, in their declaration order."""
    return [f for f in STAGE_FIGURES.values() if f.in_csv]


def compared_figures(stage: StageSummary) -> dict[str, Any]:
    """The stage's figures as the diff compares them, by the names of its stage side."""
    compared: dict[str, Any] = {}
    for f in STAGE_FIGURES.values():
        value = getattr(stage, f.name)
        if f.compared is True:
            compared[f.name] = value
        elif f.compared:
            for name, keys in f.compared.items():
                compared[name] = round(sum(value[key] for key in keys), 2)
    return compared


def figures_doc() -> str:
    """The per-stage figures as docs/json.md lists them (a code block)."""
    width = max(len(name) for name in STAGE_FIGURES) + 3
    lines = ["```"]
    for f in STAGE_FIGURES.values():
        reduced = "" if f.reduced in (MEAN, NONE) else f" ({f.reduced})"
        key = f'"{f.name}"'
        lines.append(f"{key:<{width}}{f.unit}{reduced}")
        lines.append(f"{'':<{width}}{f.doc}")
    lines.append("")
    lines.append('"gpu_metrics" (StageGpuMetrics):')
    for g in gpu_figures():
        key = f'  "{g.name}"'
        lines.append(f"{key:<{width}}{g.unit}")
        lines.append(f"{'':<{width}}{g.doc}")
    return "\n".join([*lines, "```"]) + "\n"
