"""CSV: the step ledger, one row per (process, stage, bucket, cause), ns per step, with the
(stage, bucket) candidate's what-if saving and predicted step beside it (empty when none),
and the stage's figures declared `in_csv` (figures/stage.py; empty where the stage has no summary).

A stage name a spreadsheet would take for a formula (=, +, -, @, tab or CR first:
`=HYPERLINK(...)`) is written after a single quote, as OWASP advises for CSV injection: the
cell shows the name as text and runs nothing."""

import csv
import io

from trace_gaps.figures.stage import StageSummary, csv_figures
from trace_gaps.records.notes import Figures
from trace_gaps.records.report import Report
from trace_gaps.vocabulary import Bucket


def render_csv(report: Report) -> str:
    """Render every process's ledger as CSV rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    flagged = {flag.figures for flag in report.unreliable}
    # A column only when some figures are flagged: a sound export's CSV is unchanged.
    unreliable = ["unreliable"] if flagged else []
    figures = [f.name for f in csv_figures()]
    writer.writerow(
        [
            "pid",
            "stage",
            "bucket",
            "cause",
            "ns_per_step",
            "steps_analysed",  # the JSON's key
            "lever",
            "saving_ns",
            "predicted_step_ns",
            *figures,
            *unreliable,  # last: the columns every CSV has keep their places
        ]
    )
    for process in report.processes:
        priced = {(c.stage, c.bucket): c for c in process.candidates}
        summaries = {stage.name: stage for stage in process.stages}
        for entry in process.ledger:
            is_flagged = Figures.GPU_TIME in flagged or (
                Figures.LAUNCHES in flagged and entry.bucket == Bucket.IDLE.value
            )
            candidate = priced.get((entry.stage, entry.bucket))
            writer.writerow(
                [
                    process.pid,
                    inert_cell(entry.stage),
                    entry.bucket,
                    entry.cause or "",
                    entry.ns_per_step,
                    process.steps.steps_analysed,
                    candidate.lever if candidate else "",
                    _or_empty(candidate.saving_ns if candidate else None),
                    _or_empty(candidate.predicted_step_ns if candidate else None),
                    *_figure_cells(summaries.get(entry.stage), figures),
                    *([int(is_flagged)] if flagged else []),
                ]
            )
    return buffer.getvalue()


# What makes Excel, LibreOffice and Google Sheets read a cell as a formula (OWASP).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(text: str) -> str:
    """The text, after a single quote where a spreadsheet would read it as a formula."""
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


def _figure_cells(stage: StageSummary | None, figures: list[str]) -> list[object]:
    """The stage's CSV figures (empty cells where it has no summary or a figure is None)."""
    if stage is None:
        return ["" for _ in figures]
    values = (getattr(stage, name) for name in figures)
    return [inert_cell(v) if isinstance(v, str) else _or_empty(v) for v in values]


def _or_empty(value: object) -> object:
    return "" if value is None else value
