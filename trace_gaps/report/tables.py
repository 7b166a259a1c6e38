"""The report's tables of a process as plain cells (kinds of step, candidates, what-if,
ledger, stages, GPU metrics, long gaps), drawn alike by text, Markdown and HTML. The
tables across processes are report/rank_tables.py's, the lines of words
report/descriptions.py's and report/evidence.py's."""

from __future__ import annotations

from dataclasses import dataclass

from trace_gaps.analysis.kinds import kind_label
from trace_gaps.figures.declaration import LEFT as LEFT
from trace_gaps.figures.declaration import RIGHT as RIGHT
from trace_gaps.figures.gpu import gpu_figures
from trace_gaps.figures.stage import stage_columns
from trace_gaps.records.report import ProcessReport, Report
from trace_gaps.report.levers import not_applicable_words
from trace_gaps.units import format_count, format_durations, format_ms
from trace_gaps.vocabulary import CAUSE_ORDER, Bucket


@dataclass(frozen=True, slots=True)
class Table:
    """A titled table: column headers, their alignment, and rows of strings."""

    title: str
    columns: list[str]
    align: list[str]
    rows: list[list[str]]


def gpu_metrics_table(process: ProcessReport) -> Table:
    """The GPU's own metrics per stage over its busy time (figures/gpu.py StageGpuMetrics, declared
    once); no rows where the export has none."""
    figures = [f for f in gpu_figures() if f.header]
    stages = [s for s in process.stages if s.gpu_metrics is not None]
    stages.sort(key=lambda s: -s.busy_ns_per_step)
    return Table(
        title=(
            "GPU metrics per stage, over its GPU busy time (% of peak or of the SMs' cycles; "
            "SoL: speed of light, its bytes at peak bandwidth or its tensor work at full use)"
        ),
        columns=["stage", "busy ms", *(f.header for f in figures)],
        align=[LEFT, *[RIGHT] * (len(figures) + 1)],
        rows=[
            [
                stage.name,
                format_ms(stage.busy_ns_per_step),
                *(f.cell(getattr(stage.gpu_metrics, f.name)) for f in figures),
            ]
            for stage in stages
        ],
    )


def kinds_table(report: Report) -> Table:
    """The kinds of step, each analysed on its own (where steps come in several kinds)."""
    rows = [
        [
            str(row.pid),
            kind_label(row.kind),
            str(row.steps),
            str(row.skipped),
            format_ms(row.mean_ns),
            f"{row.share_pct:.1f}",
        ]
        for row in report.kinds
    ]
    return Table(
        title="Step kinds, each analysed on its own below (never averaged together)",
        columns=["pid", "kind", "steps", "warm-up", "mean ms", "% of thread's step time"],
        align=[RIGHT, LEFT, RIGHT, RIGHT, RIGHT, RIGHT],
        rows=rows,
    )


def candidate_table(process: ProcessReport) -> Table:
    """Ranked candidates: by what their lever saves (what-if), with the time each explains
    and the idle split by cause beside it."""
    causes = [cause.value for cause in CAUSE_ORDER]
    priced = any(c.saving_ns is not None for c in process.candidates)
    rows = []
    for candidate in process.candidates:
        split = candidate.evidence.idle_by_cause_ns_per_step
        lever = (
            [
                candidate.lever,
                format_ms(candidate.saving_ns) if candidate.saving_ns is not None else "",
                format_ms(candidate.predicted_step_ns)
                if candidate.predicted_step_ns is not None
                else "",
            ]
            if priced
            else []
        )
        rows.append(
            [
                str(candidate.rank),
                candidate.stage,
                candidate.bucket,
                *lever,
                format_ms(candidate.ns_per_step),
                f"{candidate.share_fraction * 100:.1f}",
                *[format_ms(split[c]) if split else "" for c in causes],
                format_count(candidate.evidence.launches_per_step),
            ]
        )
    if priced:
        return Table(
            title="Candidates, ranked by predicted saving (ms per step; what-if replay)",
            columns=[
                "#",
                "stage",
                "bucket",
                "lever",
                "saving",
                "predicted step",
                "explained",
                "% step",
                *causes,
                "launches/step",
            ],
            align=[
                RIGHT,
                LEFT,
                LEFT,
                LEFT,
                RIGHT,
                RIGHT,
                RIGHT,
                RIGHT,
                *[RIGHT] * len(causes),
                RIGHT,
            ],
            rows=rows,
        )
    return Table(
        title="Candidates, ranked by time explained (ms per step)",
        columns=["#", "stage", "bucket", "ms/step", "% step", *causes, "launches/step"],
        align=[RIGHT, LEFT, LEFT, RIGHT, RIGHT, *[RIGHT] * len(causes), RIGHT],
        rows=rows,
    )


def what_if_table(process: ProcessReport) -> Table:
    """analyze --what-if: the predicted ledger per stage (ms per step)."""
    found = process.what_if
    if found is None:
        return Table(title="", columns=[], align=[], rows=[])
    rows = []
    by_stage: dict[str, dict[str, int]] = {}
    for entry in found.ledger:
        key = entry.bucket if entry.bucket != Bucket.IDLE.value else entry.cause
        by_stage.setdefault(entry.stage, {}).setdefault(key, 0)
        by_stage[entry.stage][key] += entry.ns_per_step
    causes = [cause.value for cause in CAUSE_ORDER]
    keys = [Bucket.BUSY.value, Bucket.WAIT.value, *causes]
    for stage in sorted(by_stage, key=lambda st: (-sum(by_stage[st].values()), st)):
        cells = by_stage[stage]
        rows.append(
            [stage, *[format_ms(cells.get(k, 0)) for k in keys], format_ms(sum(cells.values()))]
        )
    total = {k: sum(c.get(k, 0) for c in by_stage.values()) for k in keys}
    rows.append(["total", *[format_ms(total[k]) for k in keys], format_ms(sum(total.values()))])
    skipped = "; ".join(not_applicable_words(n) for n in found.not_applicable)
    return Table(
        title=(
            f"What-if {', '.join(found.levers) or 'no lever'}: predicted "
            f"{format_ms(found.predicted_ns)} ms/step (measured "
            f"{format_ms(process.steps.wall.mean_ns)}, saving {format_ms(found.saving_ns)}); "
            + (
                f"the run's step: pids {', '.join(map(str, found.ranks))} replayed together "
                "(ranks in lockstep), the lever pulled on each; "
                if found.ranks
                else ""
            )
            + (f"not applicable to these steps: {skipped}; " if skipped else "")
            + "replayed ledger, ms per step"
        ),
        columns=["stage", *keys, "total"],
        align=[LEFT, *[RIGHT] * (len(keys) + 1)],
        rows=rows,
    )


def ledger_table(process: ProcessReport) -> Table:
    """Stage × bucket ledger in ms per step, with a total row equal to the mean wall time."""
    causes = [cause.value for cause in CAUSE_ORDER]
    by_stage: dict[str, dict[str, int]] = {}
    for entry in process.ledger:
        key = entry.bucket if entry.bucket != Bucket.IDLE.value else (entry.cause or "")
        by_stage.setdefault(entry.stage, {}).setdefault(key, 0)
        by_stage[entry.stage][key] += entry.ns_per_step
    order = sorted(by_stage, key=lambda stage: (-sum(by_stage[stage].values()), stage))
    # The wait column (GPU waiting in collectives for a peer) only where a process waits.
    waits = any(Bucket.WAIT.value in cells for cells in by_stage.values())
    keys = [Bucket.BUSY.value, *([Bucket.WAIT.value] if waits else []), *causes]
    rows = []
    totals = dict.fromkeys(keys, 0)
    for stage in order:
        cells = by_stage[stage]
        for key in keys:
            totals[key] += cells.get(key, 0)
        rows.append(
            [stage, *[format_ms(cells.get(k, 0)) for k in keys], format_ms(sum(cells.values()))]
        )
    rows.append(["total", *[format_ms(totals[k]) for k in keys], format_ms(sum(totals.values()))])
    return Table(
        title="Step ledger (ms per step; idle split by what the step's thread was doing)",
        columns=[
            "stage",
            "busy",
            *(["wait"] if waits else []),
            *(f"idle {c}" for c in causes),
            "total",
        ],
        align=[LEFT, *[RIGHT] * (len(keys) + 1)],
        rows=rows,
    )


# The per-stage table's columns placed left to right, by header: each is declared with its figure
# (figures/stage.py, figure(columns=…)); a declared column not placed here follows these, in
# declaration order (so a new figure shows up with no edit here; list it to move it).
STAGE_TABLE = (
    "stage",
    "mode",
    "kernels",
    "memcpy",
    "memset",
    "graph replays",
    "nodes/replay",
    "launch calls ms",
    "queue µs/launch",
    "syncs",
    "sync ms",
    "long host gaps",
    "unexpected work",
)


def stage_table(process: ProcessReport) -> Table:
    """Launch economics per stage: the figures declared with a column (figures/stage.py), in
    STAGE_TABLE's order, then any not placed there."""
    declared = {column.header: (figure, column) for figure, column in stage_columns()}
    placed = [declared[header] for header in STAGE_TABLE]
    columns = placed + [shown for header, shown in declared.items() if header not in STAGE_TABLE]
    stages = sorted(process.stages, key=lambda s: -(s.busy_ns_per_step + s.idle_ns_per_step))
    return Table(
        title=(
            "Launches per step by stage (launch calls ms: all time inside launch calls, GPU "
            "busy or idle; queue: mean delay from a launch call's return to its op's start)"
        ),
        columns=[column.header for _, column in columns],
        align=[column.align for _, column in columns],
        rows=[
            [column.cell(getattr(stage, figure.name)) for figure, column in columns]
            for stage in stages
        ],
    )


def long_gap_table(process: ProcessReport) -> Table:
    """The long host gaps, grouped by pattern, per step."""
    typical = format_durations([finding.typical_ns for finding in process.long_host_gaps])
    rows = [
        [
            finding.stage,
            f"{finding.gaps_per_step:g}",
            typical_cell,
            format_ms(finding.idle_ns_per_step),
            finding.call_before or "(step start)",
            finding.call_after or "(step end)",
            ", ".join(finding.os_calls),
        ]
        for finding, typical_cell in zip(process.long_host_gaps, typical, strict=True)
    ]
    return Table(
        title=(
            "Long host gaps (no CUDA call for longer than max(10x the stage's launch spacing, "
            "1 ms)), by pattern"
        ),
        columns=[
            "stage",
            "gaps/step",
            "typical",
            "GPU idle ms/step",
            "call before",
            "call after",
            "OS calls inside",
        ],
        align=[LEFT, RIGHT, RIGHT, RIGHT, LEFT, LEFT, LEFT],
        rows=rows,
    )
