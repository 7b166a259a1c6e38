"""Wall time of `trace-gaps analyze` by worker processes (--jobs) and by the cores it may use.

    python benchmarks/bench_jobs.py EXPORT [--jobs 1 2 4] [--cores 2 16] [--runs 3]

For each number of cores C (the process and its workers are pinned to cores 0..C-1 with
sched_setaffinity; default: every core) and each --jobs J, it runs
`python -m trace_gaps analyze -q -j J EXPORT` RUNS times in a fresh process and prints the
median and the fastest wall time, with the speed-up over -j 1 on the same cores. The output
is thrown away; only whole-process wall time is measured (interpreter start included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_once(export: Path, jobs: int, cores: int) -> float:
    command = [sys.executable, "-m", "trace_gaps", "analyze", "-q", "-j", str(jobs), str(export)]
    started = time.perf_counter()
    subprocess.run(
        command,
        check=True,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, range(cores)),
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cores", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        f"export {args.export} ({args.export.stat().st_size / 1e6:.0f} MB), {args.runs} runs each"
    )
    print(f"{'cores':>5} {'jobs':>4} {'median s':>9} {'fastest s':>9} {'speed-up':>9}")
    for cores in args.cores:
        base = None
        for jobs in args.jobs:
            times = [run_once(args.export, jobs, cores) for _ in range(args.runs)]
            median = statistics.median(times)
            base = median if base is None else base
            print(f"{cores:>5} {jobs:>4} {median:>9.2f} {min(times):>9.2f} {base / median:>8.2f}x")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
