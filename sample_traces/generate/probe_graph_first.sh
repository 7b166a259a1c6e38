#!/bin/bash
# Issue 40: where a CUDA graph's first node starts within its cudaGraphLaunch call (node trace),
# for graph variants of one process launched onto an idle stream (plain elementwise chain, with
# a memset node first or mid-graph, GEMVs). One device call, corpus/ and drift/ parked (the
# 64 MiB limit): bash sample_traces/generate/probe_graph_first.sh   (carry .nsys-libs)
set -u
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-}
N=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
$N profile -t cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node --force-overwrite=true -o /tmp/gf python3 sample_traces/generate/probe_graph_first.py 2>&1 | grep -v "^\s*$" | tail -8
$N export --type sqlite --force-overwrite=true -o $OUT/gf.sqlite /tmp/gf.nsys-rep >/dev/null 2>&1
python3 - <<'PY'
import sqlite3, os
import pandas as pd
c = sqlite3.connect(os.environ.get("OUT", "/tmp/o") + "/gf.sqlite")
api = pd.read_sql("select r.start, r.end, r.correlationId cid from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id=r.nameId where s.value like 'cudaGraphLaunch%'", c)
ops = pd.concat([pd.read_sql(f"select start, correlationId cid from {t}", c) for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMSET") if c.execute(f"select count(*) from sqlite_master where name='{t}'").fetchone()[0]])
nv = pd.read_sql("select start, end, text from NVTX_EVENTS where text is not null and end is not null", c)
first = ops.groupby("cid").start.min(); n = ops.groupby("cid").size()
api = api.join(first.rename("first"), on="cid").join(n.rename("n"), on="cid")
for r in nv.itertuples():
    a = api[(api.start >= r.start) & (api.end <= r.end)]
    rel = (a["first"] - a.start) / 1e3; dur = (a.end - a.start) / 1e3
    print(f"{r.text:12s} launches {len(a)} nodes {int(a.n.median())} call {dur.median():.1f} us, first node at {rel.median():.1f} us (min {rel.min():.1f} max {rel.max():.1f})")
PY
