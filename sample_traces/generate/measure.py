#!/usr/bin/env python3
"""Measure the sample traces with plain SQL + Python (independent of trace_gaps).

    python3 sample_traces/generate/measure.py sample_traces/*.sqlite [--skip 3] [--md]

Per process and step range ``decode_step``: number of steps, the warm-up steps (the first
--skip), median wall time of the measured steps, GPU busy share (union of kernel/memcpy/
memset intervals of the process inside each step window), and per stage (NVTX ranges
directly inside the step, same thread): median wall ms and, per measured step, GPU op
time (sum of durations of the ops it launched), time inside kernel-launch calls and inside
sync calls, kernels launched, kernel-launch calls
(cudaLaunch*/cuLaunch*), cudaLaunchKernel calls, cudaGraphLaunch calls, graph-replayed kernels, sync
calls (cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize / blocking
cudaMemcpy), library/module loads. A call belongs to the stage open on its thread at the
call's start; a GPU op belongs to the stage of its launching call (joined on pid and
correlationId).
"""

import argparse
import bisect
import os
import sqlite3
import statistics
import sys
from collections import defaultdict

SYNC = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaStreamWaitEvent",
)
LOADS = ("cuLibraryLoad", "cuModuleLoad")


def base(name):
    i = name.rfind("_v")
    return name[:i] if i > 0 and name[i + 2 :].isdigit() else name


def tables(c):
    return {r[0] for r in c.execute("select name from sqlite_master where type='table'")}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def measure(path, skip, step_name="decode_step"):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tabs = tables(c)
    strings = dict(c.execute("select id, value from StringIds"))
    nv = c.execute(
        "select start, end, globalTid, text, textId from NVTX_EVENTS where eventType = 59 and end is not null"
    ).fetchall()
    ranges = defaultdict(list)  # tid -> [(start, end, name)]
    for s, e, tid, text, tid_ in nv:
        ranges[tid].append((s, e, text if text is not None else strings.get(tid_, "")))
    out = {"file": os.path.basename(path), "bytes": os.path.getsize(path), "procs": []}

    rt = c.execute(
        "select start, end, globalTid, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"
    ).fetchall()
    ops = []
    for t, kind in (
        ("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"),
    ):
        if t in tabs:
            gcol = "graphNodeId" if kind == "kernel" else "NULL"
            ops += [
                (s, e, gp, corr, kind, g)
                for s, e, gp, corr, g in c.execute(
                    f"select start, end, globalPid, correlationId, {gcol} from {t}"
                )
            ]
    graph_trace = []
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tabs:
        graph_trace = c.execute(
            "select start, end, globalPid, correlationId from CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        ).fetchall()
    out["graph_trace_rows"] = len(graph_trace)
    out["kernels"] = sum(1 for o in ops if o[4] == "kernel")
    out["runtime_rows"] = len(rt)
    pid_of = lambda gt: (gt >> 24) & 0xFFFFFF
    # launching call per (pid, corr)
    call = {}
    for s, e, tid, corr, nid in rt:
        call[(pid_of(tid), corr)] = (s, tid)

    for tid, rs in sorted(ranges.items()):
        steps = sorted((s, e) for s, e, n in rs if n == step_name)
        if len(steps) < 3:
            continue
        pid = pid_of(tid)
        starts = [s for s, _ in steps]
        stages = defaultdict(list)  # step index -> [(s, e, name)]
        for s, e, n in rs:
            if n == step_name:
                continue
            i = bisect.bisect_right(starts, s) - 1
            if i >= 0 and e <= steps[i][1]:
                stages[i].append((s, e, n))
        # keep depth-1 stages: not inside another stage of the same step
        for i in stages:
            lst = sorted(stages[i])
            top, end = [], -1
            for s, e, n in lst:
                if s >= end:
                    top.append((s, e, n))
                    end = e
            stages[i] = top

        def locate(t):
            i = bisect.bisect_right(starts, t) - 1
            if i < 0 or t > steps[i][1]:
                return None, None
            for s, e, n in stages.get(i, []):
                if s <= t <= e:
                    return i, n
            return i, "(outside stages)"

        per = defaultdict(lambda: defaultdict(int))  # (step, stage) -> counters
        for s, e, t, corr, nid in rt:
            if t != tid:
                continue
            i, st = locate(s)
            if i is None:
                continue
            nm = base(strings.get(nid, ""))
            d = per[(i, st)]
            d["api"] += 1
            if nm == "cudaLaunchKernel":
                d["cudaLaunchKernel"] += 1
            if nm.startswith(("cudaLaunch", "cuLaunch")):
                d["launch_calls"] += 1
                d["launch_ns"] += e - s
            if nm.startswith(SYNC) or nm in ("cudaMemcpy",):
                d["sync_ns"] += e - s
            if nm == "cudaGraphLaunch":
                d["cudaGraphLaunch"] += 1
            if nm.startswith(SYNC) or nm in ("cudaMemcpy",):
                d["sync"] += 1
            if nm.startswith(LOADS):
                d["loads"] += 1
                d["load_ns"] += e - s
        proc_ops = [o for o in ops if pid_of(o[2]) == pid]
        for s, e, gp, corr, kind, g in proc_ops:
            cl = call.get((pid, corr))
            if cl is None or cl[1] != tid:
                continue
            i, st = locate(cl[0])
            if i is None:
                continue
            d = per[(i, st)]
            d[kind + "s"] += 1
            d["gpu_ns"] += e - s
            if kind == "kernel" and g:
                d["graph_kernels"] += 1
        for s, e, gp, corr in graph_trace:
            if pid_of(gp) != pid:
                continue
            cl = call.get((pid, corr))
            if cl and cl[1] == tid:
                i, st = locate(cl[0])
                if i is not None:
                    per[(i, st)]["graph_replays"] += 1
                    per[(i, st)]["gpu_ns"] += e - s
        # GPU busy per step: union of op intervals of this process clipped to the step
        iv = sorted((s, e) for s, e, *_ in proc_ops) + sorted(
            (s, e) for s, e, gp, _ in graph_trace if pid_of(gp) == pid
        )
        iv.sort()
        ivs = [s for s, _ in iv]
        busy = []
        for a, b in steps:
            j = max(0, bisect.bisect_left(ivs, a) - 1)
            tot, cur_s, cur_e = 0, None, None
            while j < len(iv) and iv[j][0] < b:
                s, e = max(iv[j][0], a), min(iv[j][1], b)
                j += 1
                if e <= s:
                    continue
                if cur_e is None or s > cur_e:
                    if cur_e is not None:
                        tot += cur_e - cur_s
                    cur_s, cur_e = s, e
                else:
                    cur_e = max(cur_e, e)
            if cur_e is not None:
                tot += cur_e - cur_s
            busy.append(tot)
        meas = list(range(skip, len(steps)))
        walls = [steps[i][1] - steps[i][0] for i in meas]
        stage_names = []
        for i in meas:
            for s, e, n in stages.get(i, []):
                if n not in stage_names:
                    stage_names.append(n)
        stage_rows = []
        for n in stage_names + ["(outside stages)"]:
            w = []
            for i in meas:
                w.append(sum(e - s for s, e, nn in stages.get(i, []) if nn == n))
            keys = (
                "gpu_ns",
                "launch_ns",
                "sync_ns",
                "kernels",
                "launch_calls",
                "cudaLaunchKernel",
                "cudaGraphLaunch",
                "graph_kernels",
                "graph_replays",
                "memcpys",
                "memsets",
                "sync",
                "loads",
                "api",
            )
            avg = {k: sum(per[(i, n)][k] for i in meas) / len(meas) for k in keys}
            if n == "(outside stages)" and not any(avg.values()):
                continue
            stage_rows.append(
                dict(stage=n, wall_ms=median(w) / 1e6 if n != "(outside stages)" else None, **avg)
            )
        warm = [
            dict(
                step=i,
                wall_ms=(steps[i][1] - steps[i][0]) / 1e6,
                loads=sum(per[(i, n)]["loads"] for n in stage_names + ["(outside stages)"]),
                load_ms=sum(per[(i, n)]["load_ns"] for n in stage_names + ["(outside stages)"])
                / 1e6,
            )
            for i in range(min(skip, len(steps)))
        ]
        loads_meas = sum(
            per[(i, n)]["loads"] for i in meas for n in stage_names + ["(outside stages)"]
        )
        out["procs"].append(
            dict(
                pid=pid,
                tid=tid & 0xFFFFFF,
                steps=len(steps),
                measured=len(meas),
                step_ms_median=median(walls) / 1e6,
                step_ms_min=min(walls) / 1e6,
                step_ms_max=max(walls) / 1e6,
                gpu_busy_pct=100.0 * sum(busy[i] for i in meas) / max(1, sum(walls)),
                warmup=warm,
                loads_in_measured=loads_meas,
                stages=stage_rows,
            )
        )
    return out


def fmt(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def print_md(res):
    for r in res:
        print(
            f"### {r['file']} ({r['bytes'] / 1e6:.2f} MB; {r['kernels']} kernel rows, "
            f"{r['runtime_rows']} runtime rows, {r['graph_trace_rows']} graph-trace rows)\n"
        )
        for p in r["procs"]:
            print(
                f"pid {p['pid']}: {p['steps']} steps ({p['measured']} measured); step wall median "
                f"{p['step_ms_median']:.2f} ms (min {p['step_ms_min']:.2f}, max {p['step_ms_max']:.2f}); "
                f"GPU busy {p['gpu_busy_pct']:.0f}% of measured step time; library/module loads in "
                f"measured steps: {p['loads_in_measured']}"
            )
            print(
                "warm-up: "
                + "; ".join(
                    f"step {w['step']}: {w['wall_ms']:.1f} ms, {w['loads']} loads "
                    f"({w['load_ms']:.1f} ms)"
                    for w in p["warmup"]
                )
                + "\n"
            )
            print(
                "| stage | wall ms (median) | GPU ms | in launch calls ms | in sync calls ms | kernels | launch calls | "
                "cudaLaunchKernel | cudaGraphLaunch | graph kernels | graph replays | memcpy | memset | sync calls | "
                "loads | CUDA API calls |"
            )
            print(
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            )
            for s in p["stages"]:
                print(
                    f"| {s['stage']} | {fmt(s['wall_ms'], 2)} | {fmt(s['gpu_ns'] / 1e6, 2)} | "
                    f"{fmt(s['launch_ns'] / 1e6, 2)} | {fmt(s['sync_ns'] / 1e6, 2)} | {fmt(s['kernels'])} | "
                    f"{fmt(s['launch_calls'])} | {fmt(s['cudaLaunchKernel'])} | "
                    f"{fmt(s['cudaGraphLaunch'])} | {fmt(s['graph_kernels'])} | {fmt(s['graph_replays'])} | "
                    f"{fmt(s['memcpys'])} | {fmt(s['memsets'])} | {fmt(s['sync'])} | {fmt(s['loads'])} | {fmt(s['api'])} |"
                )
            print()


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("files", nargs="+")
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--md", action="store_true", help="Markdown tables (default: JSON)")
    a = ap.parse_args()
    res = [measure(f, a.skip) for f in a.files]
    if a.md:
        print_md(res)
    else:
        import json

        json.dump(res, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
