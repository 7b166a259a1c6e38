"""Time whole commands as a user times them: a fresh process, interpreter start included.

    python benchmarks/bench_process.py EXPORT [EXPORT ...] [--pairs 5] [--commands ...]

For each export, each case runs in a fresh process, paired with the case it is compared
with (the two in turn, the first of each pair alternating, so that a machine's drift
falls on both alike). Printed per case: the median wall time, its spread (min–max), the
median of the paired ratios and their spread, and the child's peak RSS (`ru_maxrss`; the
process itself, not the workers it may start).

The cases, each against its reference:

- `analyze` (`trace-gaps analyze --skip 2 -f json`, the Arrow reader when installed)
  against **floor (b)**: a fresh interpreter that imports only the Arrow driver
  (adbc-driver-sqlite) and reads the needed columns of the three main tables (kernels,
  CUDA API calls, NVTX ranges) into numpy: what merely reading the export costs;
- `analyze` on the sqlite3 path (`TRACE_GAPS_NO_ARROW=1`) against **floor (a)**: the same
  columns through the standard `sqlite3` module (`fetchall`, one numpy array per column);
- `report`, `plot timeline`, `plot steps` and `diff` (the export against itself), each
  against `analyze`.

Issue 34's marks: analyze ≤ 2x floor (b), the sqlite3 path ≤ 1.5x floor (a), peak ≤ 1 GB,
report / plot / diff ≤ 1.5x analyze. Timings on a shared machine move; quote ratios of
one run, and the load (printed at the start).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_analyze import FLOOR_QUERIES  # noqa: E402  (the columns the loader needs)

MAIN_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")

# The floors run as `python -c`: nothing but the driver (and numpy) is imported.
FLOOR_ARROW = """
import sys
import adbc_driver_sqlite.dbapi as adbc
queries = {queries!r}
connection = adbc.connect("file:" + sys.argv[1] + "?mode=ro")
cursor = connection.cursor()
for query in queries:
    cursor.execute(query)
    table = cursor.fetch_arrow_table()
    columns = [column.to_numpy() for column in table.columns]
    del table, columns
cursor.close()
connection.close()
"""

FLOOR_SQLITE3 = """
import sqlite3, sys
import numpy as np
queries = {queries!r}
connection = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
for query in queries:
    rows = connection.execute(query).fetchall()
    columns = []
    for column in zip(*rows):
        try:
            columns.append(np.fromiter(column, dtype=np.int64, count=len(column)))
        except (TypeError, ValueError):
            columns.append(np.array(column, dtype=object))
    del rows, columns
connection.close()
"""


@dataclass(frozen=True)
class Case:
    name: str
    reference: str  # the case it is paired with
    command: Callable[[Path, Path], list[str]]  # (export, scratch folder) -> argv
    env: tuple[tuple[str, str], ...] = ()


def _trace_gaps(*args: str) -> list[str]:
    return [sys.executable, "-m", "trace_gaps", *args]


def _floor(script: str) -> Callable[[Path, Path], list[str]]:
    def command(export: Path, scratch: Path) -> list[str]:
        queries = [FLOOR_QUERIES[table] for table in MAIN_TABLES if _has_table(export, table)]
        return [sys.executable, "-c", script.format(queries=queries), str(export.resolve())]

    return command


def _has_table(export: Path, table: str) -> bool:
    import sqlite3

    connection = sqlite3.connect(export.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        found = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
    finally:
        connection.close()
    return found is not None


CASES = {
    case.name: case
    for case in (
        Case("floor (b) arrow", "", _floor(FLOOR_ARROW)),
        Case("floor (a) sqlite3", "", _floor(FLOOR_SQLITE3)),
        Case(
            "analyze",
            "floor (b) arrow",
            lambda export, scratch: _trace_gaps(
                "analyze", "--skip", "2", "-f", "json", str(export)
            ),
        ),
        Case(
            "analyze sqlite3",
            "floor (a) sqlite3",
            lambda export, scratch: _trace_gaps(
                "analyze", "--skip", "2", "-f", "json", str(export)
            ),
            (("TRACE_GAPS_NO_ARROW", "1"),),
        ),
        Case(
            "report",
            "analyze",
            lambda export, scratch: _trace_gaps(
                "report", "--skip", "2", str(export), "-o", str(scratch / "report")
            ),
        ),
        Case(
            "plot timeline",
            "analyze",
            lambda export, scratch: _trace_gaps(
                "plot", "timeline", "--skip", "2", str(export), "-o", str(scratch / "t.png")
            ),
        ),
        Case(
            "plot steps",
            "analyze",
            lambda export, scratch: _trace_gaps(
                "plot", "steps", "--skip", "2", str(export), "-o", str(scratch / "s.png")
            ),
        ),
        Case(
            "diff",
            "analyze",
            lambda export, scratch: _trace_gaps(
                "diff", "--skip", "2", str(export), str(export), "-f", "json"
            ),
        ),
    )
}


@dataclass
class Run:
    wall_s: float
    peak_mb: float


def run_once(case: Case, export: Path, scratch: Path) -> Run:
    """One fresh process: its wall time and its own peak RSS; a failure stops the benchmark."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = {**os.environ, **dict(case.env)}
    command = case.command(export, scratch)  # made before the clock starts
    # stderr into a file: a pipe nobody reads while the child runs could fill and stall it.
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        said = errors.read().decode(errors="replace").strip()
    if process.returncode != 0:
        last = said.splitlines()[-1] if said else ""
        raise SystemExit(f"{case.name} on {export} failed (exit {process.returncode}): {last}")
    return Run(wall, usage.ru_maxrss / 1024)  # Linux: KiB


def _spread(values: list[float], unit: str, digits: int = 2) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}{unit}"


def _row(export: Path, case: Case, runs: list[Run], ratios: list[float]) -> str:
    walls = [run.wall_s for run in runs]
    against = (
        f"{statistics.median(ratios):.2f}x {case.reference} ({_spread(ratios, 'x')})"
        if ratios
        else "–"
    )
    return (
        f"| {export.name} | {case.name} | {statistics.median(walls):.2f} s "
        f"({_spread(walls, ' s')}) | {against} | "
        f"{statistics.median(run.peak_mb for run in runs):.0f} MiB |"
    )


def measure(export: Path, names: list[str], pairs: int) -> Iterator[str]:
    """The table's rows for one export, each as soon as its case is done: the case paired
    with its reference, then the reference's own row the first time it is timed."""
    shown: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="bench-process-") as folder:
        scratch = Path(folder) / "out"
        for name in names:
            case = CASES[name]
            reference = CASES[case.reference]
            runs: dict[str, list[Run]] = {case.name: [], reference.name: []}
            ratios = []
            for turn in range(pairs):
                order = [reference, case] if turn % 2 else [case, reference]
                for each in order:
                    runs[each.name].append(run_once(each, export, scratch))
                    print(f"  {each.name}: {runs[each.name][-1].wall_s:.2f} s", file=sys.stderr)
                ratios.append(runs[case.name][-1].wall_s / runs[reference.name][-1].wall_s)
            if reference.name not in shown and not reference.reference:
                yield _row(export, reference, runs[reference.name], [])
            shown.add(reference.name)
            yield _row(export, case, runs[case.name], ratios)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--pairs", type=int, default=5, help="paired runs per case (default 5)")
    parser.add_argument(
        "--commands",
        nargs="+",
        default=["analyze", "analyze sqlite3", "report", "plot timeline", "diff"],
        choices=[name for name, case in CASES.items() if case.reference],
        help="cases to time, each against its reference",
    )
    args = parser.parse_args(argv)
    for export in args.exports:
        if not export.is_file():
            parser.error(f"{export}: no such file")
    print(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"{os.cpu_count()} cores; Python {sys.version.split()[0]}; {args.pairs} pairs"
    )
    print("| export | case | wall, median (min–max) | paired ratio, median (min–max) | peak RSS |")
    print("|---|---|---:|---:|---:|")
    for export in args.exports:
        for row in measure(export, args.commands, args.pairs):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
