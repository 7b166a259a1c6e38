"""CSV: the step ledger, one row per (process, stage, bucket, cause), ns per step."""

import csv
import io

from trace_gaps.analysis.integrity import Figures
from trace_gaps.model import Bucket
from trace_gaps.report import Report


def render_csv(report: Report) -> str:
    """Render every process's ledger as CSV rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    flagged = {flag.figures for flag in report.unreliable}
    # A column only when some figures are flagged: a sound export's CSV is unchanged.
    unreliable = ["unreliable"] if flagged else []
    writer.writerow(
        ["pid", "stage", "bucket", "cause", "ns_per_step", "steps_analyzed", *unreliable]
    )
    for process in report.processes:
        for entry in process.ledger:
            is_flagged = Figures.GPU_TIME in flagged or (
                Figures.LAUNCHES in flagged and entry.bucket == Bucket.IDLE.value
            )
            writer.writerow(
                [
                    process.pid,
                    entry.stage,
                    entry.bucket,
                    entry.cause or "",
                    entry.ns_per_step,
                    process.steps.steps_analysed,
                    *([int(is_flagged)] if flagged else []),
                ]
            )
    return buffer.getvalue()
