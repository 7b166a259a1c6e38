"""The per-step tables a diff's statistics read: each analysed step's wall time, and its ns
per (stage, bucket label), from a report's step rows and step ledger."""

from __future__ import annotations

import pandas as pd

from trace_gaps.errors import TraceGapsError
from trace_gaps.records.report import ProcessReport, Report
from trace_gaps.vocabulary import Bucket

# Per pid, the bucket table of a process's analysed steps (step_bucket_tables).
StepBuckets = dict[int, pd.DataFrame]


def analysed_walls(process: ProcessReport, file: str) -> pd.Series:
    rows = [r for r in process.step_rows if not r.is_warmup]
    if not rows:
        raise TraceGapsError(
            f"{file}: process {process.pid} has no analysed steps (all {len(process.step_rows)} "
            "are warm-up). Pass --skip 0 or a smaller --skip."
        )
    return pd.Series([r.wall_ns for r in rows], index=[r.step_id for r in rows], dtype="int64")


def step_bucket_tables(report: Report) -> StepBuckets:
    """Per process with analysed steps: ns per analysed step and (stage, bucket label), the
    table diff_processes compares (a diff's side makes it where it is analysed)."""
    first_kind = report.processes[0].kind if report.processes else ""
    return {
        process.pid: process_buckets(process, analysed_walls(process, report.export.file).index)
        for process in report.processes
        # Steps in kinds: the first kind's sections, the ones a diff compares (_like_kinds).
        if process.kind == first_kind and any(not row.is_warmup for row in process.step_rows)
    }


def process_buckets(process: ProcessReport, step_ids: pd.Index) -> pd.DataFrame:
    """ns per analysed step (rows) and (stage, bucket label) (columns), zero where absent."""
    entries = pd.DataFrame(
        [(e.step_id, e.stage, e.bucket, e.cause or "", e.duration_ns) for e in process.step_ledger],
        columns=["step_id", "stage", "bucket", "cause", "duration_ns"],
    )
    return bucket_table(entries[entries["step_id"].isin(step_ids)], step_ids)


def bucket_table(entries: pd.DataFrame, step_ids: pd.Index) -> pd.DataFrame:
    """The table of process_buckets from ledger rows (step_id, stage, bucket, cause: "" for
    none, duration_ns) of the steps step_ids, which give the table's rows in their order."""
    bucket, cause = entries["bucket"].astype(object), entries["cause"].astype(object)
    # Its label: the bucket, and the cause after it where there is one ("idle sync").
    plain = (bucket == Bucket.BUSY.value) | (cause == "")
    entries = entries.assign(bucket=bucket.where(plain, bucket + " " + cause).astype("str"))
    table = entries.pivot_table(
        index="step_id",
        columns=["stage", "bucket"],
        values="duration_ns",
        aggfunc="sum",
        fill_value=0,
    )
    return table.reindex(index=step_ids, fill_value=0).astype("int64")
