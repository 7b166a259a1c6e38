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
import heapq
import os
import re
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


# --- The step ledger, recounted: which (stage, busy|idle) explains the most time per step ---
# Same definitions as DESIGN.md (busy: the stage of the running op that started first, an
# op's stage being the one open at its launching call's start on the step's thread; idle:
# the stage open on the step's thread), written again from the rows without trace_gaps.

NO_STAGE, OTHER_THREAD, NO_CALL, BETWEEN = (
    "(no stage)",
    "(other thread)",
    "(no launch call)",
    "(between steps)",
)
LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch")
EMIT_NVTX = re.compile(r", (?:seq|op_id|sizes|input_op_ids) = .*$")


def _columns(c, table):
    return {r[1] for r in c.execute(f"pragma table_info({table})")}


def _ranges(c, strings):
    """Per thread: default-domain push/pop and start/end ranges, (start, end, name), sorted."""
    cols = _columns(c, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"
    domain = "coalesce(domainId, 0) = 0" if "domainId" in cols else "1"
    rows = c.execute(
        f"select start, end, globalTid, text, {text_id} from NVTX_EVENTS "
        f"where eventType in (59, 60) and end is not null and end >= start and {domain}"
    ).fetchall()
    out = defaultdict(list)
    for s, e, tid, text, tid_ in rows:
        name = text if text is not None else strings.get(tid_, "")
        out[tid].append((s, e, EMIT_NVTX.sub("", str(name))))
    for lst in out.values():
        lst.sort(key=lambda r: (r[0], -r[1]))
    return out


def _lenders(calls, tid, pid_of, thread_steps):
    """The threads that launch for this step thread: when it makes no launch call in its
    steps and other threads of its process do (a scheduler thread and its worker)."""
    lo, hi = thread_steps[0][0], thread_steps[-1][1]
    launching = set()
    for s, e, t, _, name in calls:
        if pid_of(t) == pid_of(tid) and lo <= s < hi and name.startswith(LAUNCH_PREFIXES):
            launching.add(t)
    return set() if tid in launching else launching


def _nest(stages, lent):
    """The step thread's stages with a launching thread's ranges cut out of them, each
    named "stage/range" after the stage open at its start (or the range's name alone)."""
    def parent(t):
        return next((n for s, e, n in stages if s <= t < e), None)

    inner = [(s, e, f"{parent(s)}/{n}" if parent(s) else n) for s, e, n in lent]
    points = sorted({t for s, e, _ in stages + inner for t in (s, e)})
    flat = []
    for a, b in zip(points, points[1:]):
        name = next((n for s, e, n in inner if s <= a < e), None) or parent(a)
        if name is None:
            continue
        if flat and flat[-1][2] == name and flat[-1][1] == a:
            flat[-1] = (flat[-1][0], b, name)
        else:
            flat.append((a, b, name))
    return flat


def _outermost(ranges):
    """The ranges not inside another one of the list (sorted by start, longest first)."""
    top, end = [], None
    for s, e, n in ranges:
        if end is None or s >= end:
            top.append((s, e, n))
            end = e
    return top


def _ops(c, tabs):
    ops = []
    for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    ):
        if t in tabs:
            ops += c.execute(
                f"select start, end, globalPid, correlationId from {t} "
                "where not (start = 0 and end = 0)"
            ).fetchall()
    return ops


def _calls(c, tabs, strings):
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tabs:
        return []
    rows = c.execute(
        "select start, end, globalTid, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME "
        "where not (start = 0 and end = 0)"
    ).fetchall()
    return [(s, e, tid, corr, base(strings.get(nid, ""))) for s, e, tid, corr, nid in rows]


def _steps_of(ranges, step_name):
    """Disjoint instances of the step range per thread (a nested or overlapping one dropped)."""
    steps = {}
    for tid, lst in ranges.items():
        kept, end = [], None
        for s, e, n in lst:
            if n != step_name:
                continue
            if end is None or s >= end:
                kept.append((s, e))
                end = e
        if kept:
            steps[tid] = kept
    return steps


def _warmup(steps, load_starts):
    """How many leading steps to skip: the leading run of steps longer than 3x the median or
    loading code, where loads are not in more than half of the steps; at most half."""
    walls = [e - s for s, e in steps]
    med = statistics.median(walls)
    loads = [any(s <= t < e for t in load_starts) for s, e in steps]
    steady = sum(loads) * 2 > len(steps)
    run = 0
    while run < len(steps) and (walls[run] > 3 * med or (loads[run] and not steady)):
        run += 1
    if run * 2 > len(steps):
        run = 0
        while run < len(steps) and walls[run] > 3 * med:
            run += 1
    return run


def _charge(window, ops, stages, totals, waits=()):
    """Add one step's busy, wait and idle ns per stage to totals. ops: (start, end, stage);
    waits: (start, end, stage) of collectives waiting for a peer (not counted in ops)."""
    ws, we = window

    def clipped(items):
        return sorted(
            (max(s, ws), min(e, we), st) for s, e, st in items if e > ws and s < we and e > s
        )

    ops, waits = clipped(ops), clipped(waits)
    points = sorted({ws, we, *(t for s, e, _ in ops + waits for t in (s, e))})
    running, waiting, i, j, idle = [], [], 0, 0, []
    for a, b in zip(points, points[1:]):
        while i < len(ops) and ops[i][0] <= a:
            heapq.heappush(running, ops[i])
            i += 1
        while j < len(waits) and waits[j][0] <= a:
            heapq.heappush(waiting, waits[j])
            j += 1
        while running and running[0][1] <= a:
            heapq.heappop(running)
        while waiting and waiting[0][1] <= a:
            heapq.heappop(waiting)
        if running:
            totals[(running[0][2], "busy")] += b - a
        elif waiting:
            totals[(waiting[0][2], "wait")] += b - a
        else:
            idle.append((a, b))
    # Idle time: the stage open on the step's thread.
    for a, b in idle:
        t = a
        for s, e, n in stages:
            if e <= t or s >= b:
                continue
            if s > t:
                totals[(NO_STAGE, "idle")] += s - t
                t = s
            upto = min(e, b)
            totals[(n, "idle")] += upto - t
            t = upto
        if t < b:
            totals[(NO_STAGE, "idle")] += b - t


def _collective_waits(c, tabs, strings):
    """{(pid, start): wait end} for NCCL kernels that wait for a peer: the k-th kernel of a
    family (AllReduce, SendRecv, ...) on each (process, GPU) is one instance; accepted when
    the ends agree within max(5 us, 1 % of the shortest); the wait lasts until the last
    participant's kernel starts."""
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tabs:
        return {}
    rows = c.execute(
        "select start, end, globalPid, deviceId, shortName from CUPTI_ACTIVITY_KIND_KERNEL "
        "where not (start = 0 and end = 0)"
    ).fetchall()
    family = re.compile(
        r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll)", re.I
    )
    by_key = defaultdict(list)
    for s, e, gp, dev, nid in rows:
        name = strings.get(nid, "")
        if not (name.startswith("ncclKernel") or name.startswith("ncclDevKernel")):
            continue
        f = family.search(name)
        by_key[(f.group(1).lower() if f else name, (gp >> 24) & 0xFFFFFF, dev)].append((s, e))
    participants = defaultdict(list)
    for (fam, pid, dev), lst in by_key.items():
        lst.sort()
        participants[fam].append((pid, lst))
    waits = {}
    for fam, members in participants.items():
        if len(members) < 2:
            continue
        for k in range(max(len(lst) for _, lst in members)):
            inst = [(pid, lst[k]) for pid, lst in members if k < len(lst)]
            if len(inst) < len(members):
                continue
            ends = [e for _, (s, e) in inst]
            shortest = min(e - s for _, (s, e) in inst)
            if max(ends) - min(ends) > max(5_000, 0.01 * shortest):
                continue
            latest = max(s for _, (s, e) in inst)
            earliest = min(s for _, (s, e) in inst)
            for pid, (s, e) in inst:
                if latest > s:
                    waits[(pid, s)] = min(latest, e)
                elif earliest < latest:
                    LAST_ARRIVALS[pid] += 1
    return waits


LAST_ARRIVALS = defaultdict(int)  # pid -> instances in which it arrived last (filled above)


def ledger_top(path, step_name=None):
    """Per process: {pid: dict(steps, analysed, top=(stage, bucket, ns_per_step), ledger)}.

    step_name None: no step range; each process is one step spanning its ops and calls,
    on the thread that made the most launch calls, with the outermost ranges as stages.
    """
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tabs = tables(c)
    strings = dict(c.execute("select id, value from StringIds"))
    ranges = _ranges(c, strings) if "NVTX_EVENTS" in tabs else {}
    ops = _ops(c, tabs)
    calls = _calls(c, tabs, strings)
    collective_waits = _collective_waits(c, tabs, strings)
    pid_of = lambda g: (g >> 24) & 0xFFFFFF
    first_call = {}
    for s, e, tid, corr, name in calls:
        key = (pid_of(tid), corr)
        if key not in first_call or s < first_call[key][0]:
            first_call[key] = (s, tid)
    if step_name is not None:
        steps = _steps_of(ranges, step_name)
    else:
        steps = {}
        span = {}
        for s, e, gp, _ in ops:
            lo, hi = span.get(pid_of(gp), (s, e))
            span[pid_of(gp)] = (min(lo, s), max(hi, e))
        launches = defaultdict(int)
        for s, e, tid, _, name in calls:
            pid = pid_of(tid)
            if pid in span:
                lo, hi = span[pid]
                span[pid] = (min(lo, s), max(hi, e))
                if name.startswith(LAUNCH_PREFIXES) or re.match(r"cu(da)?Mem(cpy|set)\w*Async", name):
                    launches[tid] += 1
        for pid, window in span.items():
            mine = sorted((-n, tid) for tid, n in launches.items() if pid_of(tid) == pid)
            tid = mine[0][1] if mine else (pid << 24) | pid
            steps[tid] = [window]
    load_starts = defaultdict(list)
    for s, e, tid, _, name in calls:
        if name.startswith(("cuModuleLoad", "cuLibraryLoad", "cudaLibraryLoad", "cuLink", "nvrtc")):
            load_starts[pid_of(tid)].append(s)
    step_tids = set(steps)
    out = {}
    for tid, thread_steps in sorted(steps.items()):
        pid = pid_of(tid)
        skip = _warmup(thread_steps, load_starts[pid]) if step_name is not None else 0
        starts = [s for s, _ in thread_steps]
        inner = [r for r in ranges.get(tid, []) if r[2] != step_name]
        per_step = []
        lenders = _lenders(calls, tid, pid_of, thread_steps)
        lent = [r for t in lenders for r in _outermost(ranges.get(t, []))]
        for s0, e0 in thread_steps:
            inside = [r for r in inner if r[0] >= s0 and r[1] <= e0]
            stages = _outermost(inside)
            mine = [r for r in lent if r[0] >= s0 and r[1] <= e0]
            per_step.append(_nest(stages, mine) if mine else stages)

        def stage_at(t):
            i = bisect.bisect_right(starts, t) - 1
            if i < 0 or t >= thread_steps[i][1]:
                return BETWEEN
            for s, e, n in per_step[i]:
                if s <= t < e:
                    return n
            return NO_STAGE

        staged = []
        for s, e, gp, corr in ops:
            if pid_of(gp) != pid:
                continue
            call = first_call.get((pid, corr))
            if call is None:
                stage = NO_CALL
            elif call[1] != tid and call[1] not in lenders:
                stage = OTHER_THREAD if call[1] not in step_tids else BETWEEN
            else:
                stage = stage_at(call[0])
            staged.append((s, e, stage))
        waits = []
        for k, (s, e, stage) in enumerate(staged):
            wait_end = collective_waits.get((pid, s))
            if wait_end is not None:
                waits.append((s, wait_end, stage))
                staged[k] = (wait_end, e, stage)
        staged = [op for op in staged if op[1] > op[0]]
        staged.sort()
        waits.sort()
        wait_starts = [s for s, _, _ in waits]
        op_starts = [s for s, _, _ in staged]
        totals = defaultdict(int)
        analysed = thread_steps[skip:]
        longest = max((e - s for s, e, _ in staged), default=0)
        for i, (s0, e0) in enumerate(thread_steps):
            if i < skip:
                continue
            lo = bisect.bisect_left(op_starts, s0 - longest)
            hi = bisect.bisect_left(op_starts, e0)
            wlo = bisect.bisect_left(wait_starts, s0 - longest)
            whi = bisect.bisect_left(wait_starts, e0)
            _charge((s0, e0), staged[lo:hi], per_step[i], totals, waits[wlo:whi])
        n = max(1, len(analysed))
        ledger = {k: v / n for k, v in totals.items()}
        top = max(ledger.items(), key=lambda kv: (kv[1], kv[0]), default=(("-", "-"), 0))
        entry = out.setdefault(pid, dict(steps=0, analysed=0, ledger=defaultdict(float)))
        entry["steps"] += len(thread_steps)
        entry["analysed"] += len(analysed)
        for k, v in ledger.items():
            entry["ledger"][k] += v
    for entry in out.values():
        k, v = max(entry["ledger"].items(), key=lambda kv: (kv[1], kv[0]), default=(("-", "-"), 0))
        entry["top"] = (k[0], k[1], round(v))
        entry["ledger"] = dict(entry["ledger"])
    return out


# --- Serving loops: steps by a name glob or as cycles, split into kinds (issue 27) ---
# A step is either an outermost range whose name matches a glob (only '*' and '?' are
# wildcards; brackets are literal), or a *cycle*: from one outermost occurrence of a first
# range to the next on the same thread (the last cycle ends with the last outermost range
# that starts inside it). Its stages are the outermost ranges inside it on its thread; time
# in none is "(no stage)". Kind: the phase word (PREFILL, DECODE, MIXED, EXTEND, any case,
# also in prefill_batch ...) in the step's name, else the one phase word found in the names
# of the ranges inside the step (forward_extend -> EXTEND, forward_decode -> DECODE), else
# "(one kind)". Busy/idle per stage as in the ledger above; a GPU op launched by another
# thread of the process is charged by time, to the stage open on the step's thread at the
# start of its launching call. Ranges of every NVTX domain count, except the library
# domains below (or only --domain NAME).

LIBRARY_DOMAINS = re.compile(r"^(NCCL|CCCL|cuBLAS|cuBLASLt|cuDNN|TSL|cuSPARSE|cuFFT|cuSOLVER|NVSHMEM|nvJPEG)\b", re.I)
PHASE = re.compile(r"(?i)(?<![a-z])(prefill|decode|mixed|extend)(?![a-z])")
UNANNOTATED = NO_STAGE


def glob_re(pattern):
    return re.compile(
        "^" + re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".") + "$", re.S
    )


def _ranges_domains(c, strings, domain=None):
    """Per thread: push/pop and start/end ranges of the default domain and of user domains
    (library domains left out); with domain, only that domain. Also {domainId: name}."""
    cols = _columns(c, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"
    dom_col = "coalesce(domainId, 0)" if "domainId" in cols else "0"
    names = {0: "(default)"}
    if "domainId" in cols:
        for did, text, tid_ in c.execute(
            f"select domainId, text, {text_id} from NVTX_EVENTS where eventType = 75"
        ):
            names[did] = text if text is not None else strings.get(tid_, "")
    rows = c.execute(
        f"select start, end, globalTid, text, {text_id}, {dom_col} from NVTX_EVENTS "
        "where eventType in (59, 60) and end is not null and end >= start"
    ).fetchall()
    out, seen = defaultdict(list), defaultdict(int)
    for s, e, tid, text, tid_, did in rows:
        dname = names.get(did, f"domain {did}")
        if domain is not None:
            if dname != domain:
                continue
        elif did != 0 and LIBRARY_DOMAINS.match(dname or ""):
            continue
        seen[dname] += 1
        name = text if text is not None else strings.get(tid_, "")
        out[tid].append((s, e, EMIT_NVTX.sub("", str(name))))
    for lst in out.values():
        lst.sort(key=lambda r: (r[0], -r[1]))
    return out, dict(seen)


def _kind(name, inner_names):
    m = PHASE.search(name)
    if m:
        return m.group(1).upper()
    found = {PHASE.search(n).group(1).upper() for n in inner_names if PHASE.search(n)}
    return found.pop() if len(found) == 1 else "(one kind)"


def serving(path, step_glob=None, cycle=None, skip=3, domain=None):
    """{file, domains, threads: [{pid, tid, how, steps, skipped, kinds: {kind: {...}}}]}."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tabs = tables(c)
    strings = dict(c.execute("select id, value from StringIds"))
    ranges, seen = _ranges_domains(c, strings, domain) if "NVTX_EVENTS" in tabs else ({}, {})
    ops = _ops(c, tabs)
    calls = _calls(c, tabs, strings)
    pid_of = lambda g: (g >> 24) & 0xFFFFFF
    first_call = {}
    for s, e, tid, corr, name in calls:
        key = (pid_of(tid), corr)
        if key not in first_call or s < first_call[key][0]:
            first_call[key] = (s, tid)
    pat = glob_re(step_glob if step_glob is not None else cycle)
    res = {"file": os.path.basename(path), "bytes": os.path.getsize(path), "domains": seen, "threads": []}
    for tid, lst in sorted(ranges.items()):
        top = _outermost(lst)
        if step_glob is not None:
            steps = [(s, e, n) for s, e, n in _outermost([r for r in lst if pat.match(r[2])])]
            how = f"steps: outermost ranges matching {step_glob!r}"
        else:
            firsts = [s for s, e, n in top if pat.match(n)]
            steps = []
            for i, s0 in enumerate(firsts):
                if i + 1 < len(firsts):
                    e0 = firsts[i + 1]
                else:
                    e0 = max(e for s, e, n in top if s >= s0)
                steps.append((s0, e0, f"cycle of {cycle}"))
            how = f"cycles: from one outermost {cycle!r} to the next on the thread"
        if len(steps) < 2:
            continue
        pid = pid_of(tid)
        starts = [s for s, _, _ in steps]
        per_step, kinds = [], []
        lst_starts = [r[0] for r in lst]
        for s0, e0, n0 in steps:
            lo, hi = bisect.bisect_left(lst_starts, s0), bisect.bisect_left(lst_starts, e0)
            inside = [r for r in lst[lo:hi] if (r[0], r[1], r[2]) != (s0, e0, n0)]
            if step_glob is not None:
                inside = [r for r in inside if r[1] <= e0]
            stages = [(s, min(e, e0), n) for s, e, n in _outermost(inside)]
            per_step.append(stages)
            kinds.append(_kind(n0 if step_glob is not None else "", [r[2] for r in inside]))

        def stage_at(t):
            i = bisect.bisect_right(starts, t) - 1
            if i < 0 or t >= steps[i][1]:
                return BETWEEN
            for s, e, n in per_step[i]:
                if s <= t < e:
                    return n
            return NO_STAGE

        staged, by_time = [], 0
        for s, e, gp, corr in ops:
            if pid_of(gp) != pid:
                continue
            call = first_call.get((pid, corr))
            if call is None:
                stage = NO_CALL
            else:
                stage = stage_at(call[0])
                by_time += call[1] != tid
            staged.append((s, e, stage))
        staged = [op for op in staged if op[1] > op[0]]
        staged.sort()
        op_starts = [s for s, _, _ in staged]
        longest = max((e - s for s, e, _ in staged), default=0)
        by_kind = defaultdict(lambda: dict(n=0, walls=[], totals=defaultdict(int), stage_wall=defaultdict(int)))
        all_kinds = defaultdict(int)
        for i, (s0, e0, _) in enumerate(steps):
            all_kinds[kinds[i]] += 1
            if i < skip:
                continue
            k = by_kind[kinds[i]]
            k["n"] += 1
            k["walls"].append(e0 - s0)
            lo = bisect.bisect_left(op_starts, s0 - longest)
            hi = bisect.bisect_left(op_starts, e0)
            _charge((s0, e0), staged[lo:hi], per_step[i], k["totals"])
            for s, e, n in per_step[i]:
                k["stage_wall"][n] += e - s
        kinds_out = {}
        for kind, k in by_kind.items():
            n = k["n"]
            stages = sorted(
                {st for st, _ in k["totals"]} | set(k["stage_wall"]),
                key=lambda st: -sum(v for (x, _), v in k["totals"].items() if x == st),
            )
            kinds_out[kind] = dict(
                steps=all_kinds[kind],
                measured=n,
                mean_ms=sum(k["walls"]) / n / 1e6,
                median_ms=median(k["walls"]) / 1e6,
                min_ms=min(k["walls"]) / 1e6,
                max_ms=max(k["walls"]) / 1e6,
                busy_ms=sum(v for (_, b), v in k["totals"].items() if b == "busy") / n / 1e6,
                stages={
                    st: dict(
                        wall_ms=k["stage_wall"].get(st, 0) / n / 1e6,
                        busy_ms=k["totals"].get((st, "busy"), 0) / n / 1e6,
                        idle_ms=k["totals"].get((st, "idle"), 0) / n / 1e6,
                    )
                    for st in stages
                },
            )
        order = sorted(kinds_out, key=lambda k: (k != "DECODE", k))
        res["threads"].append(
            dict(
                pid=pid,
                tid=tid & 0xFFFFFF,
                how=how,
                steps=len(steps),
                skipped=min(skip, len(steps)),
                ops_launched_by_other_threads=by_time,
                kinds={k: kinds_out[k] for k in order},
            )
        )
    return res


def print_serving_md(res):
    for r in res:
        doms = ", ".join(f"{k} ({v} ranges)" for k, v in r["domains"].items())
        print(f"### {r['file']} ({r['bytes'] / 1e6:.2f} MB; NVTX domains: {doms or 'none'})\n")
        if not r["threads"]:
            print("no steps found\n")
        for t in r["threads"]:
            print(
                f"pid {t['pid']} tid {t['tid']}: {t['steps']} {t['how']}; first {t['skipped']} skipped "
                f"(warm-up); GPU ops launched by other threads of the process, charged by time: "
                f"{t['ops_launched_by_other_threads']}\n"
            )
            print("| kind | steps | measured | mean ms | median ms | min ms | max ms | GPU busy ms/step |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for kind, k in t["kinds"].items():
                print(
                    f"| {kind} | {k['steps']} | {k['measured']} | {k['mean_ms']:.3f} | {k['median_ms']:.3f} | "
                    f"{k['min_ms']:.3f} | {k['max_ms']:.3f} | {k['busy_ms']:.3f} |"
                )
            print()
            print("| kind | stage | wall ms/step | busy ms/step | idle ms/step |")
            print("|---|---|---:|---:|---:|")
            for kind, k in t["kinds"].items():
                for st, v in k["stages"].items():
                    print(
                        f"| {kind} | {st[:80]} | {v['wall_ms']:.3f} | {v['busy_ms']:.3f} | {v['idle_ms']:.3f} |"
                    )
            print()


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
    ap.add_argument(
        "--top",
        metavar="STEP",
        help="only the recounted ledger's top (stage, bucket) per process, for step range "
        "STEP ('-': no step range, each process one step)",
    )
    ap.add_argument(
        "--steps",
        metavar="GLOB",
        help="serving recount: steps are the outermost ranges matching GLOB ('*', '?'), per kind",
    )
    ap.add_argument(
        "--cycle",
        metavar="FIRST",
        help="serving recount: steps are cycles from one outermost FIRST range (name or glob) to "
        "the next on its thread, per kind",
    )
    ap.add_argument("--domain", help="serving recount: only ranges of this NVTX domain")
    a = ap.parse_args()
    if a.steps or a.cycle:
        res = [serving(f, a.steps, a.cycle if not a.steps else None, a.skip, a.domain) for f in a.files]
        if a.md:
            print_serving_md(res)
        else:
            import json

            json.dump(res, sys.stdout, indent=1)
            print()
        return
    if a.top:
        for f in a.files:
            LAST_ARRIVALS.clear()
            found = ledger_top(f, None if a.top == "-" else a.top)
            for pid, entry in found.items():
                stage, bucket, ns = entry["top"]
                wait = sum(v for (_, b), v in entry["ledger"].items() if b == "wait")
                print(
                    f"{os.path.basename(f)} pid {pid}: {entry['analysed']} of {entry['steps']} "
                    f"steps; top {stage} {bucket} {ns / 1e6:.2f} ms/step; wait in collectives "
                    f"{wait / 1e6:.2f} ms/step; last to arrive in {LAST_ARRIVALS[pid]} collectives"
                )
            if LAST_ARRIVALS:
                pace = max(sorted(LAST_ARRIVALS), key=lambda p: LAST_ARRIVALS[p])
                print(f"{os.path.basename(f)}: pace setter pid {pace}")
        return
    res = [measure(f, a.skip) for f in a.files]
    if a.md:
        print_md(res)
    else:
        import json

        json.dump(res, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
