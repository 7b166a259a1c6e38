"""Where the wall time of `analyze A.sqlite B.sqlite … [--jobs N]` goes, by phase, in the
main process (several exports of one run, trace_gaps/run/multi.py).

    python benchmarks/bench_many_phases.py EXPORT [EXPORT ...] [--jobs 8]

Prints, as each phase ends: the cluster's start, phase one (session starts and
collectives), the alignment, phase two (the exports' analyses), the ranks, each export's
report, the merge and the rendering; without --jobs the exports run one after the other in
this process (each with its own window workers, as `analyze` does by default).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_phases import say, timed  # noqa: E402  (the same timing of wrapped calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()

    import trace_gaps.run.cluster as cluster
    from trace_gaps.cli import app
    from trace_gaps.run import multi

    say("imports done")
    timed(multi, "run_tasks", "tasks run")
    timed(multi, "align", "aligned")
    timed(multi, "match_across", "collectives matched across")
    timed(multi, "build_ranks_across", "ranks built")
    timed(multi, "build_report", "one export's report built")
    timed(multi, "merge_reports", "reports merged")
    opened = cluster.dask_client

    @contextlib.contextmanager
    def client(*a, **k):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        with opened(*a, **k) as made:
            say(f"cluster started: {time.perf_counter() - began:.2f} s")
            yield made
        say("cluster closing")

    cluster.dask_client = client
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    command = ["analyze", "-q", *jobs, "-f", "json", "-o", "/dev/null", *map(str, args.exports)]
    with contextlib.suppress(SystemExit):
        app(command)
    say("command done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
