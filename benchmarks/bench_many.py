"""Many exports of one run: serial against --jobs N on a local Dask cluster.

    python benchmarks/bench_many.py EXPORT.sqlite [EXPORT.sqlite ...] [--jobs 2] [--repeat 2]

Runs `trace-gaps analyze EXPORTS -f json` serially and with `--jobs N`, each in a fresh
process, and prints wall time, the speed-up, the parent's peak RSS, the workers' peak RSS
(every process in the command's process tree, sampled every 50 ms), and how many bytes one
export's task sends back to the parent (the pickled result of phase one and of phase two).
Give one export per rank (or the same export several times: each copy is read in full).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _tree_rss_kib(pid: int) -> dict[int, int]:
    """Resident KiB of a process and of all its descendants (Linux /proc)."""
    found: dict[int, int] = {}
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = [
                child
                for task in Path(f"/proc/{current}/task").iterdir()
                for child in (task / "children").read_text().split()
            ]
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                found[current] = int(line.split()[1])
        pending.extend(int(child) for child in children)
    return found


def run(command: list[str]) -> tuple[float, int, int]:
    """Wall seconds, the parent's peak RSS and the largest other process's peak RSS (KiB)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    parent_peak, worker_peak = 0, 0
    while child.poll() is None:
        sizes = _tree_rss_kib(child.pid)
        parent_peak = max(parent_peak, sizes.pop(child.pid, 0))
        worker_peak = max([worker_peak, *sizes.values()])
        time.sleep(0.05)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {child.stderr.read().decode()[-400:]}")
    return wall, parent_peak, worker_peak


def task_bytes(path: Path) -> tuple[int, int]:
    """Bytes one export's two tasks return to the parent, pickled as Dask sends them."""
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.run.multi import align, analyse_side, match_across, read_side

    side = read_side(path)
    match, _ = match_across([side], align([side]))
    trace, analysis = analyse_side(path, AnalysisOptions(), match.of_export(0, 0))
    return len(pickle.dumps(side)), len(pickle.dumps((trace, analysis)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    base = [sys.executable, "-m", "trace_gaps", "analyze", *map(str, args.exports), "-f", "json"]
    rows = []
    for label, command in (
        ("serial", base),
        (f"--jobs {args.jobs}", [*base, "--jobs", str(args.jobs)]),
    ):
        runs = [run(command) for _ in range(args.repeat)]
        rows.append(
            (
                label,
                statistics.median(r[0] for r in runs),
                max(r[1] for r in runs),
                max(r[2] for r in runs),
            )
        )
    phase_one, phase_two = task_bytes(args.exports[0])
    sizes = sum(p.stat().st_size for p in args.exports)
    print(f"{len(args.exports)} exports, {sizes / 1e6:.1f} MB in all; median of {args.repeat} runs")
    print(f"{'run':<10} {'wall s':>8} {'speed-up':>9} {'parent MiB':>11} {'worker MiB':>11}")
    for label, wall, parent, worker in rows:
        print(
            f"{label:<10} {wall:>8.2f} {rows[0][1] / wall:>8.2f}x {parent / 1024:>11.0f} "
            f"{worker / 1024 if worker else float('nan'):>11.0f}"
        )
    print(
        f"one export's tasks send back {phase_one / 1e3:.1f} kB (phase one: session start and "
        f"collectives) and {phase_two / 1e6:.2f} MB (phase two: Trace head and Analysis)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
