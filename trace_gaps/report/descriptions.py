"""The report's facts in lines of words: the export(s), the steps, the speed of light,
the what-if replay's check, the CUDA graphs, and a process's title."""

from __future__ import annotations

from trace_gaps.analysis.kinds import kind_label
from trace_gaps.figures.speed_of_light import SpeedOfLight
from trace_gaps.records.report import ExportSummary, ProcessReport, Report, SkipReason
from trace_gaps.records.whatif import ReplayCheck
from trace_gaps.report.levers import IGNORED
from trace_gaps.report.step_reasons import describe_skip_reason, describe_step_choice
from trace_gaps.units import format_duration


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
        reasons = ", ".join(
            f"{count} {describe_skip_reason(reason, steps.index_range)}"
            for reason, count in steps.skip_reasons.items()
        )
        # Not all warm-up where --steps left steps out.
        why = "" if SkipReason.OUTSIDE_STEPS in steps.skip_reasons else " as warm-up"
        skipped = f", {steps.steps_skipped} skipped{why} ({reasons})"
    wall = steps.wall
    found = describe_step_choice(steps.reason, steps.name).rstrip(".")
    return [
        f"Step: {name} — {steps.steps_analysed} analysed{skipped}; {found}.",
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


def process_title(process: ProcessReport) -> str:
    """ "Process 834 (python3)"."""
    who = process.label or str(process.pid)
    title = f"Process {who}" + (f" ({process.name})" if process.name else "")
    # Several exports: the file it comes from, unless the label ("file:pid") says it.
    if process.export_file and not process.label:
        title += f" — {process.export_file}"
    return title + (f" — {kind_label(process.kind)} steps" if process.kind else "")


def replay_lines(process: ProcessReport) -> list[str]:
    """What the what-if replay checked, and what it ignores."""
    check = process.replay
    if check is None or not check.steps:
        return []
    filling = (
        f" ({check.filling_steps} more, the loop filling the GPU's queue at the start, left "
        "out: they did not wait for the step before's work)"
        if check.filling_steps
        else ""
    )
    return [
        f"What-if: {check.steps} steps replayed from their calls, ops and streams: "
        f"{format_duration(check.replayed_ns)}/step against {format_duration(check.measured_ns)} "
        f"measured ({check.error_pct:+.2f} %){filling}. A saving is the replayed step minus the "
        f"replayed step with the lever pulled. The model ignores {IGNORED}.",
        _real_pairs_line(check),
    ]


# The step shapes of analysis/replay/shapes.py, as the replay line names them.
SHAPE_WORDS = {
    "synchronous": "synchronous loops (the host waits for each step's GPU work)",
    "run_ahead": "run-ahead loops that their GPU paces",
    "host_paced": "run-ahead loops that their host paces",
    "worker_thread": "loops that launch from a worker thread",
    "ranks": "ranks replayed together",
}


def _real_pairs_line(check: ReplayCheck) -> str:
    """How far predictions were from real "after" captures on this shape of step, or why the
    candidates are ranked by the time they explain."""
    shape = SHAPE_WORDS.get(check.shape, check.shape)
    if not check.real_pairs:
        return (
            f"No real before/after pair has checked the replay on {shape}: the candidates are "
            "ranked by the time they explain, not by what their levers save."
        )
    pairs = "pair" if check.real_pairs == 1 else "pairs"
    return (
        f'On {shape}, predictions came within {check.within_pct:g} % of the real "after" '
        f"of {check.real_pairs} {pairs} at the after's host speed ({check.drifted_pct:g} % as "
        "captured, the host's own drift included; docs/what-if.md)."
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
