"""A top candidate's evidence in words: its kernels, calls, OS calls, long host gaps and
longest gaps, each gap placed in the export's own timeline with the command that draws
its step."""

from __future__ import annotations

import shlex

from trace_gaps.records.report import ExportSummary, ProcessReport
from trace_gaps.units import format_duration
from trace_gaps.vocabulary import Bucket


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
