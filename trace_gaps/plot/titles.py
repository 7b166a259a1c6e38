"""The pictures' titles: the exports, the process and thread, which steps, their walls."""

from __future__ import annotations

from trace_gaps.plot.palette import title_name
from trace_gaps.records.report import Report
from trace_gaps.records.timeline import StepTimeline
from trace_gaps.report.timeline import finding_words
from trace_gaps.units import format_duration


def timeline_title(report: Report, timelines: list[StepTimeline]) -> str:
    """The export, process and thread, then which steps and their walls (two lines)."""
    pids = sorted({t.pid for t in timelines}, key=lambda pid: (pid != timelines[0].pid, pid))
    if len(pids) > 1:
        return _ranks_title(report, timelines, pids)
    first, last = timelines[0], timelines[-1]
    process = next((p for p in report.processes if p.pid == first.pid), None)
    who = f"process {first.pid}" + (
        f" ({title_name(process.name)})" if process and process.name else ""
    )
    name = title_name(first.step_name or "whole process")
    if len(timelines) == 1:
        which = {"median": "median step", "worst": "slowest step"}.get(first.view, "step")
        steps = f"{which}: {name} #{first.step_index}" + (" (warm-up)" if first.is_warmup else "")
        if first.finding:
            steps = f"{name} #{first.step_index}, the step {finding_words(first)}"
        wall = f"wall {format_duration(first.wall_ns)}"
    else:
        steps = f"steps {name} #{first.step_index}–#{last.step_index}"
        wall = (
            "walls "
            + ", ".join(format_duration(t.wall_ns) for t in timelines[:6])
            + (", …" if len(timelines) > 6 else "")
        )
    if process is not None and process.steps.steps_analysed:
        p50 = format_duration(process.steps.wall.p50_ns)
        wall += f" (p50 of {process.steps.steps_analysed} analysed: {p50})"
    return f"{exports_named(report)} — {who}, thread {first.thread}\n{steps} — {wall}"


def _ranks_title(report: Report, timelines: list[StepTimeline], pids: list[int]) -> str:
    """Which processes and steps, and how late each process starts them after the first."""
    first = timelines[0]
    name = title_name(first.step_name or "whole process")
    indices = sorted({t.step_index for t in timelines})
    which = f"#{indices[0]}" if len(indices) == 1 else f"#{indices[0]}–#{indices[-1]}"
    per_pid = {pid: sorted({t.step_index for t in timelines if t.pid == pid}) for pid in pids}
    if len(indices) > 1 and all(len(found) == 1 for found in per_pid.values()):
        # The same step of each rank (paired by time across exports), numbered by each.
        which = "(" + ", ".join(f"{pid} #{found[0]}" for pid, found in per_pid.items()) + ")"
    starts = {pid: min(t.start_offset_ns for t in timelines if t.pid == pid) for pid in pids}
    skews = ", ".join(f"{pid} {_signed_ms(starts[pid] - starts[first.pid])}" for pid in pids[1:])
    return (
        f"{exports_named(report)} — processes {', '.join(map(str, pids))} on one time axis\n"
        f"{name} {which} of each process — step start after {first.pid}: {skews}"
    )


def exports_named(report: Report) -> str:
    """The report's exports: "rank0.sqlite", or "rank0.sqlite + rank1.sqlite" for a run's."""
    return " + ".join(e.file for e in [report.export, *report.other_exports])


def _signed_ms(ns: int) -> str:
    return ("+" if ns >= 0 else "−") + format_duration(abs(ns))
