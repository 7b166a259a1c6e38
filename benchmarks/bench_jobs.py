"""Wall time of `trace-gaps analyze` by worker processes (--jobs) and by the cores it may use.

    python benchmarks/bench_jobs.py EXPORT [--jobs 1 2 4] [--cores 2 16] [--runs 3]

For each number of cores C (the process and its workers are pinned to cores 0..C-1 with
sched_setaffinity; default: every core) and each --jobs J, it runs
`python -m trace_gaps analyze -q -j J EXPORT` RUNS times in a fresh process and prints the
median and the fastest wall time, with the speed-up over the first --jobs on the same cores,
and the peak of the summed RSS of the process and its workers (sampled every 20 ms from
/proc: a peak shorter than that can be missed). The output is thrown away; wall time is the
whole process's, interpreter start included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_once(
    export: Path, jobs: int, cores: int, output: Path | None = None
) -> tuple[float, float]:
    """(wall seconds, peak summed RSS in MB) of one analyze in its own process group; its
    JSON report into output, if given (else the text report is thrown away)."""
    command = [sys.executable, "-m", "trace_gaps", "analyze", "-q", "-j", str(jobs), str(export)]
    if output is not None:
        command += ["-f", "json", "-o", str(output)]
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, range(cores)),
    )
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, _group_rss_mb(process.pid))
        time.sleep(0.02)
    if process.returncode != 0:
        raise SystemExit(f"analyze -j {jobs} failed with exit {process.returncode}")
    return time.perf_counter() - started, peak


def _group_rss_mb(group: int) -> float:
    """The summed resident memory of the processes of one process group (its session)."""
    total_kb = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the command name (which may hold spaces): state, ppid, pgrp, ...
            if int(stat.rsplit(")", 1)[1].split()[2]) != group:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total_kb / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cores", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--compare",
        type=Path,
        help="write each run's JSON report into this folder and check every one equals the first",
    )
    args = parser.parse_args()
    if args.compare is not None:
        args.compare.mkdir(parents=True, exist_ok=True)
    reports: list[Path] = []
    print(
        f"export {args.export} ({args.export.stat().st_size / 1e6:.0f} MB), {args.runs} runs each"
    )
    print(
        f"{'cores':>5} {'jobs':>4} {'median s':>9} {'fastest s':>9} {'speed-up':>9} "
        f"{'peak RSS MB':>12}"
    )
    for cores in args.cores:
        base = None
        for jobs in args.jobs:
            runs = []
            for run in range(args.runs):
                output = None
                if args.compare is not None:
                    output = args.compare / f"c{cores}-j{jobs}-{run}.json"
                    reports.append(output)
                runs.append(run_once(args.export, jobs, cores, output))
            times = [wall for wall, _ in runs]
            median = statistics.median(times)
            base = median if base is None else base
            print(
                f"{cores:>5} {jobs:>4} {median:>9.2f} {min(times):>9.2f} {base / median:>8.2f}x "
                f"{max(rss for _, rss in runs):>12.0f}"
            )
            sys.stdout.flush()
    if reports:
        first = reports[0].read_bytes()
        differ = [r.name for r in reports[1:] if r.read_bytes() != first]
        print(f"JSON reports: {len(reports)}, " + (f"DIFFER: {differ}" if differ else "all equal"))
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
