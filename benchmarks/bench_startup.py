"""Time how fast the command line answers when it has no export to read.

    python benchmarks/bench_startup.py [--runs N]

Each case runs `python -m trace_gaps ...` in a fresh process, N times after one warm-up,
and prints the median and the minimum wall time, with the median CPU time (user + sys
of the child: on a loaded machine wall time waits for a core, CPU time does not). The
goal (issue 16) is under 0.3 s for `--help` and for a usage error: pandas and matplotlib
are imported only by the commands that read an export. The check is here, not in a timed
unit test: timings on shared machines are too noisy to fail a build on.

It also lists which heavy modules a bare `--help` imports (there should be none).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "--help": ["--help"],
    "--version": ["--version"],
    "analyze -h": ["analyze", "-h"],
    "usage error (exit 2)": ["analyze", "--no-such-option"],
    "bad input (exit 1)": ["analyze", "/nonexistent.sqlite"],
}
HEAVY = ("pandas", "matplotlib", "numpy", "pyarrow")


def time_case(args: list[str], runs: int) -> tuple[float, float, float, int]:
    """(median wall s, min wall s, median cpu s, exit code) over runs."""
    walls, cpus = [], []
    code = 0
    for i in range(runs + 1):
        before = os.times()
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "trace_gaps", *args], capture_output=True, check=False
        )
        wall = time.perf_counter() - start
        after = os.times()
        code = done.returncode
        if i == 0:
            continue  # warm-up: file caches, .pyc files
        walls.append(wall)
        cpus.append(
            (after.children_user - before.children_user)
            + (after.children_system - before.children_system)
        )
    return statistics.median(walls), min(walls), statistics.median(cpus), code


def heavy_imports() -> list[str]:
    """Heavy top-level packages that `--help` imports."""
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['trace-gaps', '--help']\n"
        "try:\n    runpy.run_module('trace_gaps', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return done.stderr.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    print(f"{'case':24} {'wall p50':>9} {'wall min':>9} {'cpu p50':>8}  exit")
    for name, args in CASES.items():
        wall, fastest, cpu, code = time_case(args, runs)
        print(f"{name:24} {wall:8.3f}s {fastest:8.3f}s {cpu:7.3f}s  {code}")
    heavy = heavy_imports()
    print("heavy modules imported by --help:", ", ".join(heavy) if heavy else "none")


if __name__ == "__main__":
    main()
