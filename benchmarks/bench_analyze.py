"""Time `trace-gaps analyze` phase by phase on one export, beside two read-only floors.

    python benchmarks/bench_analyze.py EXPORT [--json] [--format text|json|md|csv] [--jobs N]

Each measurement runs in a fresh subprocess so that peak RSS (ru_maxrss) is its own:

- analyze: load → analyse_trace (range tree, steps, stages, ledger, launches) → build_report
  → render, timed phase by phase (times exclude interpreter start and imports, the Arrow
  driver's too, which the reader would import on its thread, as floor (b)'s do), with the
  Arrow reader when installed, and as many window workers as the CLI would use (--jobs N
  to choose; with workers, the ledger, launch and host phases run in them and are not
  timed here: --jobs 1 times every phase);
- analyze (sqlite3): the same with TRACE_GAPS_NO_ARROW=1, the path without the `fast` extra;
- floor (a): read the columns the loader needs, table by table, with the standard sqlite3
  module into numpy arrays (plain SELECT, fetchall, one array per column);
- floor (b): the same SELECTs through an Arrow-returning driver (adbc-driver-sqlite +
  pyarrow), skipped when that driver is not installed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# What the loader reads, as plain SELECTs (nullable ids read as they are; names as ids or text).
FLOOR_QUERIES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": 'SELECT start, "end", globalPid, deviceId, streamId, correlationId, '
    "graphNodeId, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY": 'SELECT start, "end", globalPid, deviceId, streamId, correlationId, '
    "copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET": 'SELECT start, "end", globalPid, deviceId, streamId, correlationId '
    "FROM CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": 'SELECT start, "end", globalPid, deviceId, streamId, '
    "correlationId, graphId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME": 'SELECT start, "end", globalTid, correlationId, nameId '
    "FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS": 'SELECT start, "end", globalTid, endGlobalTid, domainId, eventType, textId, text '
    "FROM NVTX_EVENTS",
    "PROFILER_OVERHEAD": 'SELECT start, "end", globalTid, nameId FROM PROFILER_OVERHEAD',
    "OSRT_API": 'SELECT start, "end", globalTid, nameId FROM OSRT_API',
}


def _peak_rss_mb() -> float:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _present_tables(path: Path) -> list[str]:
    connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        names = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        connection.close()
    return [table for table in FLOOR_QUERIES if table in names]


def _column_array(values: tuple[Any, ...]) -> Any:
    import numpy as np

    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError):  # NULLs or text: keep Python objects
        return np.array(values, dtype=object)


def child_floor_sqlite3(path: Path) -> dict[str, Any]:
    """Floor (a): the needed columns through sqlite3, one numpy array per column."""
    started = time.perf_counter()
    connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    rows_read = 0
    for table in _present_tables(path):
        rows = connection.execute(FLOOR_QUERIES[table]).fetchall()
        rows_read += len(rows)
        columns = [_column_array(column) for column in zip(*rows, strict=True)]
        del rows, columns
    connection.close()
    return {"rows": rows_read, "total_s": time.perf_counter() - started}


def child_floor_arrow(path: Path) -> dict[str, Any]:
    """Floor (b): the needed columns through adbc-driver-sqlite into Arrow, then numpy."""
    try:
        import adbc_driver_sqlite.dbapi as adbc_sqlite
    except ImportError:
        return {"skipped": "adbc-driver-sqlite is not installed"}
    started = time.perf_counter()
    tables = _present_tables(path)
    connection = adbc_sqlite.connect(path.resolve().as_uri() + "?mode=ro")
    rows_read = 0
    try:
        cursor = connection.cursor()
        for table in tables:
            cursor.execute(FLOOR_QUERIES[table])
            arrow = cursor.fetch_arrow_table()
            rows_read += arrow.num_rows
            columns = [column.to_numpy() for column in arrow.columns]
            del arrow, columns
        cursor.close()
    finally:
        connection.close()
    return {"rows": rows_read, "total_s": time.perf_counter() - started}


def child_analyze(path: Path, fmt: str, jobs: int | None) -> dict[str, Any]:
    """The analyze pipeline, phase by phase, exactly as the CLI runs it (trace_gaps.run.one)."""
    import trace_gaps.analysis.engine.metrics as metrics
    import trace_gaps.analysis.engine.pipeline as pipeline
    import trace_gaps.analysis.engine.windows as windows
    from trace_gaps.nsys import read
    from trace_gaps.nsys.export import count_rows
    from trace_gaps.render import Format, render_report
    from trace_gaps.report.build import build_report
    from trace_gaps.run.one import analyse_export

    phases: dict[str, float] = {}

    def timed(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started

        return wrapper

    # Break the analysis down by wrapping the functions it calls, so that it runs unchanged.
    # Reading and analysing interleave (windows): "read" is the chunks' reading and decoding.
    wrapped = {
        pipeline: {
            "steps": ("build_range_tree", "choose_step_range", "cut_steps", "mark_warmup"),
            "stages": ("map_stages",),
            "project": ("stage_calls",),  # each call once, as it is read
        },
        windows: {
            "project": ("project_ops", "mark_blocking_copies", "_check_launches"),
            "ledger": ("build_ledger",),
            "launches": ("ops_in_analysed_steps",),
        },
        metrics: {
            "launches": ("summarise_stages", "kernel_totals", "api_call_totals"),
            "host": ("find_blocked_host_time",),
        },
    }
    for module, groups in wrapped.items():
        for phase, names in groups.items():
            for name in names:
                setattr(module, name, timed(phase, getattr(module, name)))
    windows.RowStream.fill = timed("read", windows.RowStream.fill)  # type: ignore[method-assign]

    # The Arrow driver is imported before the clock starts, as in floor (b); the reader
    # would import it on its read-ahead thread (44 ms of pyarrow and ADBC on this machine).
    if read.arrow_installed():
        import adbc_driver_sqlite.dbapi  # noqa: F401

    started = time.perf_counter()
    trace, analysis = timed("analyse", analyse_export)(path, pipeline.AnalysisOptions(), jobs=jobs)
    # As the CLI does: only the JSON report holds every step's ledger (since 50a5303; a
    # sitting's "before" may run an earlier commit, which builds it always).
    takes_ledger_flag = "step_ledger" in inspect.signature(build_report).parameters
    ledger = {"step_ledger": fmt == "json"} if takes_ledger_flag else {}
    report = timed("report", build_report)(trace, analysis, **ledger)
    text = timed("render", lambda r: render_report(r, Format(fmt)))(report)
    total = time.perf_counter() - started
    counts = count_rows(path)
    op_tables = ("KERNEL", "MEMCPY", "MEMSET", "GRAPH_TRACE")
    return {
        "phases_s": phases,
        "total_s": total,
        "output_chars": len(text),
        "steps": len(analysis.steps),
        "windows": analysis.windows,
        "streamed": trace.gpu_ops.empty,
        "kernels": counts.get("CUPTI_ACTIVITY_KIND_KERNEL", 0),
        "gpu_ops": sum(counts.get(f"CUPTI_ACTIVITY_KIND_{t}", 0) for t in op_tables),
        "api_rows": counts.get("CUPTI_ACTIVITY_KIND_RUNTIME", 0),
        "nvtx_rows": counts.get("NVTX_EVENTS", 0),
    }


CHILDREN = {"analyze", "floor-sqlite3", "floor-arrow"}


def run_child(
    kind: str, path: Path, fmt: str, env: dict[str, str] | None = None, jobs: int | None = None
) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its JSON result."""
    command = [sys.executable, __file__, "--child", kind, "--format", fmt, str(path)]
    if jobs is not None:
        command += ["--jobs", str(jobs)]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        return {
            "error": done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"exit {done.returncode}"
        }
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(path: Path, fmt: str, jobs: int | None = None) -> dict[str, Any]:
    """The four measurements of one export, and the ratios of analyze to each floor: with
    Arrow to floor (b), on the sqlite3 path to floor (a)."""
    analyze = run_child("analyze", path, fmt, jobs=jobs)
    analyze_sqlite3 = run_child("analyze", path, fmt, {"TRACE_GAPS_NO_ARROW": "1"}, jobs=jobs)
    floor_a = run_child("floor-sqlite3", path, fmt)
    floor_b = run_child("floor-arrow", path, fmt)
    result: dict[str, Any] = {
        "export": str(path),
        "size_bytes": path.stat().st_size,
        "analyze": analyze,
        "analyze_sqlite3": analyze_sqlite3,
        "floor_sqlite3": floor_a,
        "floor_arrow": floor_b,
    }
    for key, run, floor in (
        ("ratio_sqlite3_to_floor_sqlite3", analyze_sqlite3, floor_a),
        ("ratio_to_floor_arrow", analyze, floor_b),
        ("ratio_to_floor_sqlite3", analyze, floor_a),
    ):
        if "total_s" in run and floor.get("total_s"):
            result[key] = run["total_s"] / floor["total_s"]
    return result


def format_table(result: dict[str, Any]) -> str:
    """The measurements as a small text table."""
    analyze = result["analyze"]
    lines = [
        f"export   {result['export']} ({result['size_bytes'] / 1e9:.2f} GB)",
    ]
    if "error" in analyze:
        lines.append(f"analyze  failed: {analyze['error']}")
    else:
        lines.append(
            f"rows     kernels {analyze['kernels']:,}  gpu ops {analyze['gpu_ops']:,}  "
            f"API {analyze['api_rows']:,}  NVTX {analyze['nvtx_rows']:,}  steps {analyze['steps']:,}"
        )
        how = "streamed" if analyze["streamed"] else "loaded whole"
        lines.append(f"analysis {how}, {analyze['windows']:,} windows")
    sqlite3_phases = result["analyze_sqlite3"].get("phases_s", {})
    lines.append(f"{'measurement':<22} {'time s':>9} {'peak RSS MB':>12} {'sqlite3 path s':>15}")
    for phase, seconds in analyze.get("phases_s", {}).items():
        other = sqlite3_phases.get(phase)
        lines.append(
            f"  {phase:<20} {seconds:>9.2f} {'':>12} "
            + (f"{other:>15.2f}" if other is not None else f"{'-':>15}")
        )
    for label, key in (
        ("analyze total", "analyze"),
        ("analyze (sqlite3)", "analyze_sqlite3"),
        ("floor (a) sqlite3", "floor_sqlite3"),
        ("floor (b) arrow", "floor_arrow"),
    ):
        entry = result[key]
        if "total_s" in entry:
            lines.append(f"{label:<22} {entry['total_s']:>9.2f} {entry['peak_rss_mb']:>12.0f}")
        else:
            lines.append(
                f"{label:<22} {'-':>9} {'-':>12}  ({entry.get('skipped') or entry.get('error')})"
            )
    for label, key in (
        ("analyze / floor (b)", "ratio_to_floor_arrow"),
        ("analyze / floor (a)", "ratio_to_floor_sqlite3"),
        ("sqlite3 path / (a)", "ratio_sqlite3_to_floor_sqlite3"),
    ):
        if key in result:
            lines.append(f"{label:<22} {result[key]:>9.2f}x")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument("--format", default="text", choices=["text", "md", "json", "csv"])
    parser.add_argument(
        "--jobs", type=int, default=None, help="window workers (default: as the CLI chooses)"
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child == "analyze":
            result = child_analyze(args.export, args.format, args.jobs)
        elif args.child == "floor-sqlite3":
            result = child_floor_sqlite3(args.export)
        else:
            result = child_floor_arrow(args.export)
        result["peak_rss_mb"] = _peak_rss_mb()
        print(json.dumps(result))
        return 0
    result = measure(args.export, args.format, args.jobs)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
