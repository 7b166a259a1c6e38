"""The bug-report bundle: one folder with report.md (the verdict first), report.json and pictures.

DIR/report.md             headline and verdict, provenance, the pictures, then the Markdown report
DIR/report.json           the Report as JSON, as `trace-gaps analyze -f json` writes it
DIR/timeline-finding.png  the step where the top candidate's wait, sync or host time is largest
                          (only when the top candidate is a collective wait, a sync or long
                          host gaps)
DIR/timeline-median.png   the analysed step nearest the median wall time
DIR/timeline-worst.png    the slowest analysed step
DIR/steps.png             every step's ledger as a stacked bar
DIR/report.html           all of it in one page, the pictures inlined: opens offline (page.py)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from trace_gaps import __version__
from trace_gaps.errors import TraceGapsError
from trace_gaps.interrupts import last_resort, signals_held
from trace_gaps.model import ExportInfo
from trace_gaps.output import (
    escape_control_characters,
    write_figure_atomically,
    write_text_atomically,
)
from trace_gaps.parallel import Forked
from trace_gaps.privacy import shareable_settings
from trace_gaps.records.report import Provenance
from trace_gaps.render.json import render_json
from trace_gaps.render.markdown import escape_markdown, render_markdown
from trace_gaps.report.build import Report
from trace_gaps.report.descriptions import process_title
from trace_gaps.report.notes import unreliable_lines
from trace_gaps.report.timeline import StepPick, TimelineRequest, finding_words

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# The timelines a bundle draws, and the picture each goes to. The last, every process's
# lanes for the median step of the first, is drawn only when the report has several.
RANKS_VIEW = TimelineRequest(StepPick.MEDIAN, all_processes=True)
BUNDLE_VIEWS = (
    TimelineRequest(StepPick.FINDING),
    TimelineRequest(StepPick.MEDIAN),
    TimelineRequest(StepPick.WORST),
    RANKS_VIEW,
)
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
STEPS_PNG = "steps.png"

_HASH_CHUNK = 1 << 20


def build_provenance(info: ExportInfo, *, include_command: bool = False) -> Provenance:
    """Hash the export (read-only) and keep the capture settings privacy.py lets through
    (include_command: the host name, working directory and program arguments too)."""
    digest = hashlib.sha256()
    try:
        with info.path.open("rb") as export:
            while chunk := export.read(_HASH_CHUNK):
                digest.update(chunk)
    except OSError as error:
        raise TraceGapsError(f"cannot read the export to hash it: {error.strerror}.") from error
    return Provenance(
        file=info.path.name,
        size_bytes=info.size_bytes,
        sha256=digest.hexdigest(),
        nsys_version=info.nsys_version,
        trace_gaps_version=__version__,
        capture_settings=shareable_settings(info.capture_settings, include_command=include_command),
        command_included=include_command,
        session_start_utc_ns=info.session_start_utc_ns,
    )


def session_start_words(utc_ns: int | None) -> str:
    """ "2026-11-30 13:35:55.074997322 UTC", or "unknown"."""
    if utc_ns is None:
        return "unknown"
    seconds, ns = divmod(utc_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S") + f".{ns:09d} UTC"


def timeline_file(view: str) -> str:
    """The picture file of a timeline view: timeline-median.png."""
    return f"timeline-{view}.png"


# Every file a bundle writes.
BUNDLE_FILES = (
    *(timeline_file(request.view) for request in BUNDLE_VIEWS),
    STEPS_PNG,
    REPORT_JSON,
    REPORT_MD,
    REPORT_HTML,
)

ATTACH_LINE = (
    "_Pictures are linked by relative path: in a GitHub issue, drag the PNGs of this folder "
    "in (or attach report.html, which holds them all)._"
)


def check_bundle_folder(directory: Path, *, force: bool) -> None:
    """Refuse a folder that holds files, unless force (before any work is done)."""
    if directory.is_dir() and not force and any(directory.iterdir()):
        raise TraceGapsError(
            f"{directory} is not empty. Choose a new folder, or pass --force to replace the "
            "report there (files trace-gaps did not write are kept)."
        )


def render_bundle_markdown(report: Report, provenances: Sequence[Provenance]) -> str:
    """report.md: the answer (headline and verdict per process), provenance (every export's),
    the pictures by relative path, then the report one level down."""
    files = ", ".join(escape_markdown(p.file) for p in provenances)
    out = [f"# trace-gaps report: {files}", "", ATTACH_LINE, ""]
    out += ["## Verdict", ""]
    out += [f"**{escape_markdown(line)}**  " for line in unreliable_lines(report.unreliable)]
    out += [""] if report.unreliable else []
    for process in report.processes:
        out += [
            f"**{escape_markdown(process_title(process))}: {escape_markdown(process.headline)}**",
            "",
        ]
        out += [f"{c.rank}. {escape_markdown(c.verdict)}" for c in process.candidates[:3]] + [""]
    out += ["## Provenance", ""]
    out += _provenance_table(provenances)
    for provenance in provenances:
        out += _capture_settings(provenance, of_file=len(provenances) > 1)
    out += ["## Pictures", ""]
    pids = _drawn_pids(report)
    drawn: set[int] = set()
    for request in BUNDLE_VIEWS:
        if request == RANKS_VIEW:
            if len(pids) > 1:
                out += _ranks_picture(report, pids)
            continue
        caption, step_id = _caption(report, request.view)
        image = timeline_file(request.view)
        if step_id < 0 and request.pick is StepPick.FINDING:
            continue
        if step_id in drawn:
            out += [
                f"**{escape_markdown(caption)}**: the step drawn above ([{image}]({image})).",
                "",
            ]
            continue
        drawn.add(step_id)
        out += [
            f"**{escape_markdown(caption)}**",
            "",
            f"![{escape_markdown(caption)}]({image})",
            "",
        ]
        if len(pids) > 1:
            out += [f"Covers process {pids[0]} only (the lowest pid with steps).", ""]
    out += ["**Every step's wall time by stage, busy and idle**", "", f"![Steps]({STEPS_PNG})", ""]
    if len(pids) > 1:
        out += [f"Covers every process, one panel each: {', '.join(map(str, pids))}.", ""]
    out += ["Data: [report.json](report.json) (this report as JSON, integer ns).", ""]
    # The report's own headings move one level down, under this document's title.
    body = re.sub(r"^(#{1,5}) ", r"#\1 ", render_markdown(report), flags=re.MULTILINE)
    body = body.replace("## trace-gaps report\n", "## Report\n", 1)
    return "\n".join(out) + "\n" + body


def _provenance_table(provenances: Sequence[Provenance]) -> list[str]:
    """One export: a two-column table. Several: a row per export."""
    if len(provenances) == 1:
        provenance = provenances[0]
        return [
            "| | |",
            "|---|---|",
            f"| file | {escape_markdown(provenance.file)} |",
            f"| size | {provenance.size_bytes:,} bytes |",
            f"| sha256 | `{provenance.sha256}` |",
            f"| Nsight Systems | {escape_markdown(provenance.nsys_version or 'unknown')} |",
            f"| session start | {session_start_words(provenance.session_start_utc_ns)} |",
            f"| trace-gaps | {provenance.trace_gaps_version} |",
            "",
        ]
    return [
        f"{len(provenances)} exports of one run, analysed on one clock by trace-gaps "
        f"{provenances[0].trace_gaps_version}:",
        "",
        "| file | size | sha256 | Nsight Systems | session start |",
        "|---|---:|---|---|---|",
        *[
            f"| {escape_markdown(p.file)} | {p.size_bytes:,} bytes | `{p.sha256}` | "
            f"{escape_markdown(p.nsys_version or 'unknown')} | "
            f"{session_start_words(p.session_start_utc_ns)} |"
            for p in provenances
        ],
        "",
    ]


def _capture_settings(provenance: Provenance, *, of_file: bool) -> list[str]:
    whose = f" of {escape_markdown(provenance.file)}" if of_file else ""
    if not provenance.capture_settings:
        return [f"The export{whose} records no capture settings.", ""]
    return [
        f"<details><summary>Capture settings{whose} "
        f"({len(provenance.capture_settings)}; environment variables and the user's name "
        "left out"
        + (
            ""
            if provenance.command_included
            else ", and the host name, working directory, program path and arguments: "
            "`--include-command` keeps them"
        )
        + ")</summary>",
        "",
        "| setting | value |",
        "|---|---|",
        *[
            f"| {escape_markdown(k)} | {escape_markdown(v)} |"
            for k, v in provenance.capture_settings
        ],
        "",
        "</details>",
        "",
    ]


def _drawn_pids(report: Report) -> list[int]:
    """The processes of the every-process timeline, the first (the one picked) first."""
    timelines = [t for t in report.timelines if t.view == RANKS_VIEW.view]
    if not timelines:
        return []
    first = timelines[0].pid
    return sorted({t.pid for t in timelines}, key=lambda pid: (pid != first, pid))


def _ranks_caption(report: Report, pids: list[int]) -> str:
    first = next(t for t in report.timelines if t.view == RANKS_VIEW.view)
    name = first.step_name or "whole process"
    return (
        f"Every process on one time axis: {name} #{first.step_index} "
        f"(the median step of process {pids[0]}) of processes {', '.join(map(str, pids))}"
    )


def _ranks_picture(report: Report, pids: list[int]) -> list[str]:
    caption = _ranks_caption(report, pids)
    image = timeline_file(RANKS_VIEW.view)
    return [
        f"**{escape_markdown(caption)}**",
        "",
        f"![{escape_markdown(caption)}]({image})",
        "",
        "A rank that starts its step late starts right of the others; hatched GPU time is a "
        "collective waiting for a peer.",
        "",
    ]


def _caption(report: Report, view: str) -> tuple[str, int]:
    """The picture's caption and the id of the step it shows (-1: none)."""
    timeline = next((t for t in report.timelines if t.view == view), None)
    which = {"median": "Median step", "worst": "Slowest step"}.get(view, view)
    if timeline is None:
        return which, -1
    if timeline.finding:
        which = f"Step {finding_words(timeline)}"
    name = timeline.step_name or "whole process"
    return f"{which}: {name} #{timeline.step_index}, process {timeline.pid}", timeline.step_id


def bundle_figures(report: Report) -> dict[str, Figure]:
    """The bundle's pictures by file name."""
    from trace_gaps.plot import plot_steps, plot_timeline  # matplotlib: only when drawing

    views = [
        r
        for r in BUNDLE_VIEWS
        if (r != RANKS_VIEW or len(_drawn_pids(report)) > 1)
        and (r.pick is not StepPick.FINDING or any(t.view == r.view for t in report.timelines))
    ]
    figures = {timeline_file(r.view): plot_timeline(report, r.view) for r in views}
    return figures | {STEPS_PNG: plot_steps(report)}


def write_bundle(
    report: Report, provenances: Sequence[Provenance], directory: Path, *, force: bool = False
) -> list[Path]:
    """Write the bundle into `directory` (created when missing); return the files written.

    A folder that holds files is refused unless force; then the bundle files of an earlier
    run that this one does not write (a picture of processes no longer there) are removed.
    Every file is written into a staging folder inside `directory` first and moved into
    place at the end, signals held meanwhile: an error or an interrupt leaves the earlier
    bundle whole (or no folder, where there was none), never half old and half new.
    """
    if directory.exists() and not directory.is_dir():
        raise TraceGapsError(f"{directory} is a file. Give -o a folder to write the report into.")
    check_bundle_folder(directory, force=force)
    created = not directory.exists()
    staging = directory / f".trace-gaps-{secrets.token_hex(4)}.tmp"

    def remove_staging() -> None:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when it is empty

    try:
        with last_resort(remove_staging):  # a signal's clean-up that never ends
            directory.mkdir(parents=True, exist_ok=True)
            staging.mkdir()
            names = _write_into(staging, report, provenances)
            with signals_held():
                for name in names:
                    os.replace(staging / name, directory / name)
                for stale in set(BUNDLE_FILES) - set(names):
                    (directory / stale).unlink(missing_ok=True)
                staging.rmdir()
    except BaseException as error:
        remove_staging()
        if isinstance(error, OSError):
            raise TraceGapsError(
                f"cannot write into {directory}: {error.strerror}. Choose another -o folder."
            ) from error
        raise
    return [directory / name for name in names]


def _write_into(staging: Path, report: Report, provenances: Sequence[Provenance]) -> list[str]:
    """Write every bundle file into the (empty) staging folder; return their names."""
    # The pictures (matplotlib's import included) are drawn in a child process, where
    # cores allow, while this one writes the text files (parallel.Forked).
    pictures = Forked(write_figures, (report, staging))
    try:
        for name, text in (
            # The timelines' spans (MBs for a long step) stay out: the pictures show them.
            (REPORT_JSON, render_json(replace(report, timelines=[]))),
            (REPORT_MD, render_bundle_markdown(report, provenances)),
        ):
            write_text_atomically(staging / name, escape_control_characters(text))
        drawn = pictures()
    except BaseException:
        pictures.stop()
        raise
    write_text_atomically(staging / REPORT_HTML, render_bundle_page(report, provenances, staging))
    return [*(path.name for path in drawn), REPORT_JSON, REPORT_MD, REPORT_HTML]


def render_bundle_page(report: Report, provenances: Sequence[Provenance], directory: Path) -> str:
    """report.html, its pictures read back from the folder they were just written to."""
    from trace_gaps.render.html import render_page

    pictures = [
        (caption, name, (directory / name).read_bytes()) for caption, name in picture_list(report)
    ]
    return escape_control_characters(render_page(report, provenances, pictures))


def picture_list(report: Report) -> list[tuple[str, str]]:
    """(caption, file) of each picture of the bundle, once each, in the order report.md shows
    them."""
    pids = _drawn_pids(report)
    shown: list[tuple[str, str]] = []
    drawn: set[int] = set()
    for request in BUNDLE_VIEWS:
        if request == RANKS_VIEW:
            if len(pids) > 1:
                shown.append((_ranks_caption(report, pids), timeline_file(request.view)))
            continue
        caption, step_id = _caption(report, request.view)
        if step_id < 0 and request.pick is StepPick.FINDING:
            continue
        if step_id not in drawn:
            drawn.add(step_id)
            shown.append((caption, timeline_file(request.view)))
    return [*shown, ("Every step's wall time by stage, busy and idle", STEPS_PNG)]


def write_figures(report: Report, directory: Path) -> list[Path]:
    """Draw the bundle's pictures into directory; return the files written."""
    written = []
    for name, figure in bundle_figures(report).items():
        write_figure_atomically(directory / name, figure)
        written.append(directory / name)
    return written
