"""The report's tables as plain cells, shared by the text and Markdown renderers."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from trace_gaps.analysis.kinds import kind_label
from trace_gaps.analysis.step_range import OUTSIDE
from trace_gaps.figures import LEFT as LEFT
from trace_gaps.figures import RIGHT as RIGHT
from trace_gaps.figures import SpeedOfLight, gpu_figures, stage_columns
from trace_gaps.model import CAUSE_ORDER, Bucket
from trace_gaps.records import ExportSummary, ProcessReport, Report
from trace_gaps.report.levers import IGNORED, not_applicable_words
from trace_gaps.units import format_count, format_duration, format_durations, format_ms


@dataclass(frozen=True, slots=True)
class Table:
    """A titled table: column headers, their alignment, and rows of strings."""

    title: str
    columns: list[str]
    align: list[str]
    rows: list[list[str]]


def describe_export(report: Report) -> list[str]:
    """Lines about the export: file, nsys version, graph mode, GPUs; with several exports of
    one run, a line for each."""
    if not report.other_exports:
        export = report.export
        lines = [f"Export: {_export_words(export)}"]
        if export.gpus:
            lines.append("GPUs: " + "; ".join(export.gpus))
        return lines
    exports = [report.export, *report.other_exports]
    apart = report.apart_exports or []
    run = [e.file for e in exports if e.file not in apart]
    if not apart:
        head = f"Exports: {len(exports)} of one run, on one clock: {', '.join(run)}"
    elif len(run) > 1:
        head = (
            f"Exports: {len(exports)}; {len(run)} of one run, on one clock: {', '.join(run)}; "
            f"analysed apart (not of that run, see the notes): {', '.join(apart)}"
        )
    else:
        head = (
            f"Exports: {len(exports)}, not of one run: analysed apart, each on its own clock "
            f"(see the notes): {', '.join(e.file for e in exports)}"
        )
    lines = [head]
    for export in exports:
        gpus = f"; GPUs: {'; '.join(export.gpus)}" if export.gpus else ""
        lines.append(f"- {_export_words(export)}{gpus}")
    return lines


def _export_words(export: ExportSummary) -> str:
    return (
        f"{export.file} ({export.size_bytes / 1e6:.1f} MB), Nsight Systems "
        f"{export.nsys_version or 'unknown'}, schema {export.schema_version or 'unknown'}, "
        f"CUDA graph trace: {export.graph_trace_mode}"
    )


def describe_steps(process: ProcessReport) -> list[str]:
    """Lines about the process's steps: which range, how many, wall time."""
    steps = process.steps
    name = steps.name if steps.name else "whole process (no step range)"
    skipped = ""
    if steps.steps_skipped:
        reasons = ", ".join(f"{count} {reason}" for reason, count in steps.skip_reasons.items())
        # Not all warm-up where --steps left steps out.
        why = "" if any(r.startswith(OUTSIDE) for r in steps.skip_reasons) else " as warm-up"
        skipped = f", {steps.steps_skipped} skipped{why} ({reasons})"
    wall = steps.wall
    return [
        f"Step: {name} — {steps.steps_analysed} analysed{skipped}; {steps.reason.rstrip('.')}.",
        f"Step wall time: mean {format_duration(wall.mean_ns)}, p50 {format_duration(wall.p50_ns)}, "
        f"p90 {format_duration(wall.p90_ns)}, max {format_duration(wall.max_ns)}.",
        *speed_of_light_lines(process),
    ]


def speed_of_light_lines(process: ProcessReport) -> list[str]:
    """The step's speed of light beside the measured step and GPU busy (GPU metrics only)."""
    sol = process.speed_of_light
    if sol is None:
        return []
    return [
        f"Speed of light: {format_duration(sol.sol_ns_per_step)}/step of GPU work at the GPU's "
        f"limits ({sol.dram_bytes_per_step / 1e6:.0f} MB/step of DRAM traffic: "
        f"{format_duration(sol.memory_sol_ns_per_step)} at peak bandwidth), against "
        f"{format_duration(sol.busy_ns_per_step)} GPU busy and a "
        f"{format_duration(sol.step_ns)} step (GPU metrics, per stage below).",
        *at_the_limits_lines(sol),
    ]


def at_the_limits_lines(sol: SpeedOfLight) -> list[str]:
    """How far the loop is from the hardware: the step predicted with every stage's GPU work
    at its speed of light (none where no step was replayed)."""
    if sol.predicted_step_ns is None:
        return []
    saving = sol.step_ns - sol.predicted_step_ns
    share = 100 * saving / sol.step_ns if sol.step_ns else 0.0
    return [
        f"At the GPU's limits: {format_duration(sol.predicted_step_ns)}/step predicted with "
        f"every stage's GPU work at its speed of light (what-if {','.join(sol.levers)}), "
        f"{format_duration(saving)} ({share:.0f} %) below the measured step."
    ]


def gpu_metrics_table(process: ProcessReport) -> Table:
    """The GPU's own metrics per stage over its busy time (figures.StageGpuMetrics, declared
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


def process_title(process: ProcessReport) -> str:
    """ "Process 834 (python3)"."""
    who = process.label or str(process.pid)
    title = f"Process {who}" + (f" ({process.name})" if process.name else "")
    # Several exports: the file it comes from, unless the label ("file:pid") says it.
    if process.export_file and not process.label:
        title += f" — {process.export_file}"
    return title + (f" — {kind_label(process.kind)} steps" if process.kind else "")


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


def replay_lines(process: ProcessReport) -> list[str]:
    """What the what-if replay checked, and what it ignores."""
    check = process.replay
    if check is None or not check.steps:
        return []
    return [
        f"What-if: {check.steps} steps replayed from their calls, ops and streams: "
        f"{format_duration(check.replayed_ns)}/step against {format_duration(check.measured_ns)} "
        f"measured ({check.error_pct:+.2f} %). A saving is the replayed step minus the replayed "
        f"step with the lever pulled. The model ignores {IGNORED}."
    ]


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


def stage_table(process: ProcessReport) -> Table:
    """Launch economics per stage: the figures declared with a column (figures.py)."""
    columns = stage_columns()
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


def graph_lines(process: ProcessReport) -> list[str]:
    """The process's CUDA graph facts in words: captures, where, and replays."""
    graphs = process.graphs
    if not graphs.captures and not graphs.graph_events and not graphs.replays_per_step:
        return []
    lines = [
        f"stream captures: {len(graphs.captures)}, instantiations: {graphs.instantiations}, "
        f"graph events (CUDA_GRAPH_EVENTS): {graphs.graph_events}, "
        f"graph replays per analysed step: {graphs.replays_per_step:g}"
    ]
    for capture in graphs.captures:
        path = " > ".join(capture.nvtx_path) or "no NVTX range open"
        nodes = "" if capture.node_count is None else f", {capture.node_count} nodes"
        replays = (
            "replays per step unknown"
            if capture.replays_per_step is None
            else f"{capture.replays_per_step:g} replays per step"
        )
        owner = f"stage {capture.stage}" if capture.stage else "no analysed stage (process level)"
        lines.append(
            f"capture at +{capture.begin_offset_ns / 1e6:.3f} ms on thread {capture.thread} "
            f"in {path} ({owner}): {format_duration(capture.duration_ns)}{nodes}, "
            f"instantiations: {capture.instantiations}, {replays}"
        )
    if graphs.unmatched_captures and not graphs.replays_per_step:
        lines.append(
            f"this process captured {graphs.unmatched_captures} graph(s) that no analysed stage "
            "matches and replays none in the analysed steps"
        )
    return lines


def export_time(ns: int) -> str:
    """A time of the export's own timeline as the nsys GUI writes it (s from the session
    start); an absolute (epoch) clock is left in ns."""
    return f"{ns / 1e9:.6f} s" if ns < EPOCH_LIKE_NS else f"{ns} ns"


EPOCH_LIKE_NS = 10**15  # ~11.6 days: an export timeline past this counts from the epoch


def evidence_lines(
    process: ProcessReport,
    *,
    top: int = 3,
    export: ExportSummary | None = None,
    several_processes: bool = False,
    export_argument: str | None = None,
) -> list[tuple[str, list[str]]]:
    """Per top candidate, its evidence in words: a heading and bullet lines of kernels,
    calls and gaps. With the export, each longest gap also gives its time in the export's own
    timeline and the command that draws its step, naming the export as export_argument (the
    command line's own words: a path as given, `--demo`), else by its file name."""
    sections = []
    for candidate in process.candidates[:top]:
        evidence = candidate.evidence
        lines = []
        for kernel in evidence.top_kernels if candidate.bucket == Bucket.BUSY.value else []:
            waiting = (
                f"; another {format_duration(kernel.wait_ns_per_step)}/step waiting for a peer, "
                "in the wait bucket"
                if kernel.wait_ns_per_step
                else ""
            )
            lines.append(
                f"op {kernel.name}: {format_duration(kernel.running_ns_per_step)}/step "
                f"({kernel.count_per_step:g} per step{waiting})"
            )
        for call in evidence.top_api_calls if candidate.bucket == Bucket.IDLE.value else []:
            lines.append(
                f"call {call.name}: {format_duration(call.ns_per_step)}/step ({call.count_per_step:g} per step)"
            )
        for call in evidence.host_blocked_in:
            lines.append(
                f"blocked in OS call {call.name} during idle host time: "
                f"{format_duration(call.ns_per_step)}/step"
            )
        if evidence.host_ns_per_launch is not None and candidate.bucket == Bucket.IDLE.value:
            lines.append(
                "host time in the short gaps between launches: "
                f"{format_duration(evidence.host_ns_per_launch)} per launch"
            )
        for finding in evidence.long_host_gaps:
            path = " > ".join(finding.nvtx_path)
            lines.append(
                f"long host gaps: {finding.gaps_per_step:g}/step of ~"
                f"{format_duration(finding.typical_ns)} (longest {format_duration(finding.longest_ns)}), "
                f"{format_duration(finding.idle_ns_per_step)}/step of GPU idle, between "
                f"{finding.call_before or 'the step start'} and {finding.call_after or 'the step end'}"
                + (f", OS calls inside: {', '.join(finding.os_calls)}" if finding.os_calls else "")
                + (f", in {path}" if path else "")
            )
        for gap in evidence.longest_gaps:
            if export is None:
                lines.append(
                    f"gap of {format_duration(gap.duration_ns)} at "
                    f"+{gap.start_offset_ns / 1e6:.3f} ms (step {gap.step_index}, mostly {gap.cause})"
                )
                continue
            at = export_time(export.trace_start_ns + gap.start_offset_ns)
            lines.append(
                f"gap of {format_duration(gap.duration_ns)} at {at} in the export's timeline "
                f"(as nsys shows it; step {gap.step_index}, mostly {gap.cause})"
            )
            pid = f" --process {process.pid}" if several_processes else ""
            named = export_argument or shlex.quote(export.file)
            lines.append(
                f"see it: trace-gaps plot timeline {named} --step-index {gap.step_index}"
                f"{pid} -o step-{gap.step_index}.png"
            )
        sections.append((f"#{candidate.rank} {candidate.stage} {candidate.bucket}", lines))
    return sections


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
