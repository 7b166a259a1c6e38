"""CSV: the step ledger, one row per (process, stage, bucket, cause), ns per step, with the
(stage, bucket) candidate's what-if saving and predicted step beside it (empty when none), the
kind of step and the export the row is of, and the stage's figures declared `in_csv`
(figures/stage.py; empty where the stage has no summary). Every column is declared once, as
a header (the JSON key it copies) and how its cell is read from the row's records.

A name a spreadsheet would take for a formula (=, +, -, @, tab or CR first:
`=HYPERLINK(...)`) is written after a single quote, as OWASP advises for CSV injection: the
cell shows the name as text and runs nothing."""

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass

from trace_gaps.figures.stage import StageSummary, csv_figures
from trace_gaps.records.notes import Figures
from trace_gaps.records.report import Candidate, LedgerEntry, ProcessReport, Report
from trace_gaps.vocabulary import Bucket


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """What one CSV row is read from: a ledger entry of a process of the report, the
    (stage, bucket) candidate priced and the stage's summary (None where there is none)."""

    report: Report
    process: ProcessReport
    entry: LedgerEntry
    candidate: Candidate | None
    stage: StageSummary | None


@dataclass(frozen=True, slots=True)
class CsvColumn:
    """One column: its header, the JSON key it copies, and its cell."""

    header: str
    cell: Callable[[LedgerRow], object]


def _priced(read: Callable[[Candidate], object]) -> Callable[[LedgerRow], object]:
    return lambda row: "" if row.candidate is None else _or_empty(read(row.candidate))


# The columns every CSV has, in their places; the figures declared in_csv and, where some
# figures are flagged, `unreliable` follow (render_csv).
LEDGER_COLUMNS = (
    CsvColumn("pid", lambda row: row.process.pid),
    CsvColumn("stage", lambda row: inert_cell(row.entry.stage)),
    CsvColumn("bucket", lambda row: row.entry.bucket),
    CsvColumn("cause", lambda row: row.entry.cause or ""),
    CsvColumn("ns_per_step", lambda row: row.entry.ns_per_step),
    CsvColumn("steps_analysed", lambda row: row.process.steps.steps_analysed),
    CsvColumn("lever", _priced(lambda candidate: candidate.lever)),
    CsvColumn("saving_ns", _priced(lambda candidate: candidate.saving_ns)),
    CsvColumn("predicted_step_ns", _priced(lambda candidate: candidate.predicted_step_ns)),
    # "" where the steps have no kinds, as in the JSON's processes[].kind.
    CsvColumn("kind", lambda row: row.process.kind),
    # The JSON names it only where a report has several exports; the CSV on every row.
    CsvColumn(
        "export_file",
        lambda row: inert_cell(row.process.export_file or row.report.export.file),
    ),
)


def render_csv(report: Report) -> str:
    """Render every process's ledger as CSV rows."""
    columns = [*LEDGER_COLUMNS, *_figure_columns(), *_unreliable_columns(report)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.header for column in columns])
    for process in report.processes:
        priced = {(c.stage, c.bucket): c for c in process.candidates}
        summaries = {stage.name: stage for stage in process.stages}
        for entry in process.ledger:
            row = LedgerRow(
                report,
                process,
                entry,
                priced.get((entry.stage, entry.bucket)),
                summaries.get(entry.stage),
            )
            writer.writerow([column.cell(row) for column in columns])
    return buffer.getvalue()


def _figure_columns() -> list[CsvColumn]:
    """A column per figure declared in_csv (empty where the stage has no summary or the
    figure is None)."""
    return [CsvColumn(f.name, _figure_cell(f.name)) for f in csv_figures()]


def _figure_cell(name: str) -> Callable[[LedgerRow], object]:
    def cell(row: LedgerRow) -> object:
        value = None if row.stage is None else getattr(row.stage, name)
        return inert_cell(value) if isinstance(value, str) else _or_empty(value)

    return cell


def _unreliable_columns(report: Report) -> list[CsvColumn]:
    """`unreliable` (1 on the rows a flag covers), only when some figures are flagged: a
    sound export's CSV is unchanged."""
    flagged = {flag.figures for flag in report.unreliable}
    if not flagged:
        return []

    def is_flagged(row: LedgerRow) -> int:
        return int(
            Figures.GPU_TIME in flagged
            or (Figures.LAUNCHES in flagged and row.entry.bucket == Bucket.IDLE.value)
        )

    return [CsvColumn("unreliable", is_flagged)]


# What makes Excel, LibreOffice and Google Sheets read a cell as a formula (OWASP).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(text: str) -> str:
    """The text, after a single quote where a spreadsheet would read it as a formula."""
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


def _or_empty(value: object) -> object:
    return "" if value is None else value
