"""The per-stage figures, each declared once: the fields of StageSummary.

A figure's declaration (`figure(...)` on its field, figures/declaration.py) says everything
about it: its unit, how it is computed from the stage's inputs (totals summed per window over
the analysed steps, the ledger's means, the launch spacing) and reduced over the steps, its
doc line, its columns in the per-stage table, whether the CSV has it and how the diff
compares it. The table (report/tables.py, which places the columns in STAGE_TABLE), the JSON
and its Schema (asdict and render/schema.py read the fields), the CSV (render/csv.py), the
diff's stage sides (diff/changes.py) and the list in docs/json.md (`figures_doc`) are made
from these declarations. To add a figure: compute its input per window (a Total, counted in
analysis/launches.py, or a metric of analysis/engine/), give it to StageInputs, and declare
it here.

A name that is not declared fails loudly: `STAGE_FIGURES["syncs"]` and `totals[Total.SYNC]`
raise (KeyError, AttributeError), never read as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, TypeAlias

from trace_gaps.figures.declaration import (
    LEFT,
    MEAN,
    NONE,
    OVER_STEPS,
    Column,
    Figure,
    declared_figures,
    figure,
)
from trace_gaps.figures.gpu import StageGpuMetrics, gpu_figures, summarise_gpu_metrics
from trace_gaps.figures.inputs import StageInputs, mean_over_steps, per_step
from trace_gaps.model import CallCategory, OpKind
from trace_gaps.units import format_ms
from trace_gaps.vocabulary import DictKeys, ExecutionMode


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


def execution_mode(graph_ops: int, eager_ops: int) -> ExecutionMode:
    """Name how a stage's ops were launched."""
    if graph_ops and eager_ops:
        return ExecutionMode.MIXED
    if graph_ops:
        return ExecutionMode.GRAPH
    if eager_ops:
        return ExecutionMode.EAGER
    return ExecutionMode.NONE


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


STAGE_FIGURES: dict[str, Figure] = declared_figures(StageSummary)


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
