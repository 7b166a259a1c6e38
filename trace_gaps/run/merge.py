"""The reports of a run's exports made one: their timelines on one clock, their pids labelled
where two exports share one, the alignment's notes, and the merged Report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.note_facts import note_of
from trace_gaps.model import PID
from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, NoteNumber, Severity
from trace_gaps.records.ranks import RanksView
from trace_gaps.records.report import Report
from trace_gaps.report.build import slowest_ranks
from trace_gaps.report.notes import about_export, write_note
from trace_gaps.run.alignment import Alignment


def merged_views(views: list[RanksView]) -> RanksView:
    """One ranks view of the run and the exports analysed apart: every process; the pace
    setter of the run (the first view)."""
    if len(views) == 1:
        return views[0]
    first = views[0]
    return RanksView(
        first.pace_setter_pid,
        [process for view in views for process in view.processes],
        sum(view.matched_instances for view in views),
        sum(view.unmatched_instances for view in views),
        pace_setter=first.pace_setter,
    )


def timelines_on_one_clock(reports: list[Report], offsets_ns: list[int]) -> list[Report]:
    """Each report's timelines with their starts from the first report's trace start, on the
    common clock: a rank that starts its step later is drawn right of the others."""
    origin = reports[0].export.trace_start_ns + offsets_ns[0]
    return [
        replace(
            report,
            timelines=[
                replace(
                    timeline,
                    start_offset_ns=timeline.start_offset_ns
                    + report.export.trace_start_ns
                    + offset
                    - origin,
                )
                for timeline in report.timelines
            ],
        )
        for report, offset in zip(reports, offsets_ns, strict=True)
    ]


def pid_labels(exports: list[tuple[Path, Analysis]]) -> list[dict[int, str]]:
    """Per export, pid -> "file:pid" for the pids that appear in more than one export."""
    seen: dict[int, int] = {}
    for _, analysis in exports:
        for pid in set(analysis.steps[PID].tolist()):
            seen[pid] = seen.get(pid, 0) + 1
    return [
        {pid: f"{path.name}:{pid}" for pid in set(analysis.steps[PID].tolist()) if seen[pid] > 1}
        for path, analysis in exports
    ]


def alignment_notes(
    alignment: Alignment, paths: list[Path], offsets_ns: list[int], dropped: int
) -> list[NoteFacts]:
    """The run's alignment (with two exports of it or more), and the waits it drops."""
    if len(paths) < 2:
        return []
    residuals: dict[str, NoteNumber] = {}
    if alignment.residual_p50_ns is not None:
        residuals = {
            "residual_p50_ns": alignment.residual_p50_ns,
            "residual_p99_ns": alignment.residual_p99_ns or 0,
            "shared_instances": alignment.shared_instances,
        }
    if alignment.drift_ns_per_s is not None:
        residuals["drift_ns_per_s"] = alignment.drift_ns_per_s
    notes = [
        note_of(
            NoteCode.EXPORTS_ALIGNED,
            Severity.INFO,
            [Figures.WAITS],
            files=tuple(path.name for path in paths),
            offsets_ns=tuple(int(offset) for offset in offsets_ns),
            method=alignment.method,
            **residuals,
        )
    ]
    if dropped:
        notes.append(
            note_of(
                NoteCode.WAITS_WITHIN_CLOCK_ERROR, Severity.PARTIAL, [Figures.WAITS], waits=dropped
            )
        )
    return notes


def merge_reports(reports: list[Report], ranks: RanksView, notes: list[NoteFacts]) -> Report:
    """One Report: the first export's summary, every export's processes, notes and timelines."""
    first = reports[0]
    processes = [
        replace(process, export_file=report.export.file) if len(reports) > 1 else process
        for report in reports
        for process in report.processes
    ]
    merged_notes = [
        about_export(note, report.export.file) if len(reports) > 1 else note
        for report in reports
        for note in report.notes
    ]
    return replace(
        first,
        processes=processes,
        other_exports=[report.export for report in reports[1:]],
        notes=[write_note(facts) for facts in notes] + merged_notes,
        timelines=[t for report in reports for t in report.timelines],
        ranks=ranks,
        slowest_rank_by_stage=slowest_ranks(processes),
        unreliable=[flag for report in reports for flag in report.unreliable],
    )
