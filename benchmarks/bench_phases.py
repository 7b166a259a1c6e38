"""Where the wall time of one `analyze` goes, by phase, in the main process (--jobs N).

    python benchmarks/bench_phases.py EXPORT [--jobs 8]

Times (and this process's resident memory then), from the start of the analysis (after the
imports): when the head was read and the steps cut, how long the main process waited for
the OS-call map, for the longest-row scan (spans) and for the collectives' scan, when the
windows' work started and ended, what the workers' tasks summed to, and the report. Each
line is printed as the phase ends.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()


def say(what: str) -> None:
    print(f"{time.perf_counter() - STARTED:8.2f} s  {_rss_mb():6.0f} MB  {what}", flush=True)


def _rss_mb() -> float:
    """This process's resident memory now (Linux), 0 where unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def timed(owner: Any, name: str, label: str) -> None:
    """Wrap owner.name so that each call prints how long it took."""
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            say(f"{label}: {time.perf_counter() - began:.2f} s")

    setattr(owner, name, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument(
        "--cli", action="store_true", help="run `analyze -f json` itself (its report to /dev/null)"
    )
    args = parser.parse_args()

    from trace_gaps.analysis.engine import pipeline
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.nsys import os_calls, spans, stream
    from trace_gaps.report.build import build_report
    from trace_gaps.run.one import analyse_export

    global STARTED
    STARTED = time.perf_counter()
    say("imports done")
    timed(stream, "read_head", "head read")
    timed(os_calls.MappedOsCalls, "mapped", "OS-call map (wait)")
    timed(spans.ExportSpans, "longest_row_ns", "longest row (wait)")
    timed(pipeline, "match_collectives", "collectives matched")
    timed(pipeline, "_mark_warmup", "warm-up marked")
    timed(pipeline, "borrowed_threads", "borrowed threads")
    timed(pipeline, "analyse_in_spans", "spans (all windows)")
    timed(pipeline, "analyse_in_windows", "windows in this process")
    if args.cli:
        from trace_gaps.cli import app
        from trace_gaps.report import build as report

        timed(report, "build_report", "report built")
        command = ["analyze", "-q", "-j", str(args.jobs), "-f", "json", "-o", "/dev/null"]
        with contextlib.suppress(SystemExit):
            app([*command, str(args.export)])
        say("command done")
        return 0
    trace, analysis = analyse_export(
        args.export,
        AnalysisOptions(),
        jobs=args.jobs,
        on_steps=lambda s: say(f"{len(s)} steps cut"),
    )
    pool = analysis.window_pool
    say(
        f"analysis done: {analysis.windows} windows; pool wall {pool.wall_s:.2f} s, "
        f"tasks summed {pool.working_s:.2f} s, making {pool.making_s:.2f} s"
    )
    build_report(trace, analysis)
    say("report built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
