"""CSV: the step ledger, one row per (process, stage, bucket, cause), ns per step."""

import csv
import io

from trace_gaps.report import Report


def render_csv(report: Report) -> str:
    """Render every process's ledger as CSV rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["pid", "stage", "bucket", "cause", "ns_per_step", "steps_analyzed"])
    for process in report.processes:
        for entry in process.ledger:
            writer.writerow(
                [
                    process.pid,
                    entry.stage,
                    entry.bucket,
                    entry.cause or "",
                    entry.ns_per_step,
                    process.steps.steps_analysed,
                ]
            )
    return buffer.getvalue()
