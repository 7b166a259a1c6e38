#!/bin/bash
# Real captures of runahead.py in one device call, from the repo root with .nsys-libs carried:
#
#   bash sample_traces/generate/capture_runahead.sh
#
# 1. pairs.tar.xz   the what-if pairs of issue 40: run-ahead eager -> graph, a sync removed,
#                   a host-paced run-ahead loop -> its host work removed, and a worker thread's
#                   eager -> graph forward (-t cuda,nvtx,osrt --cuda-graph-trace=node).
# 2. metrics.tar.xz GPU metrics (issue 41): the graph-replayed synchronous loop and the eager
#                   run-ahead loop with --gpu-metrics-devices=all at 20 kHz, only the loop
#                   captured (--capture-range=cudaProfilerApi).
# 3. diff.tar.xz    diff's drift (issue 42): the same synchronous graph loop 6 times, with a CPU
#                   stage of ~5 % of the step 3 times, with its MLP ~8 % wider (GPU) 3 times.
# Then, here: tar -xJf each; python3 sample_traces/generate/scrub.py s/*.sqlite; xz -9.
set -u
P=sample_traces/generate/runahead.py
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
BUDGET=${BUDGET_S:-540}
mkdir -p /tmp/pairs /tmp/metrics /tmp/diff "$OUT"
$N --version; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
c() {  # c DIR NAME NSYS_FLAGS -- RUNAHEAD_ARGS...
    local d=$1 n=$2; shift 2
    local flags=()
    while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
    if [ "$SECONDS" -gt "$BUDGET" ]; then echo "= skip $n ($SECONDS s)"; return; fi
    echo "= $n $* ($SECONDS s)"
    timeout 90 $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        "${flags[@]}" --force-overwrite=true -o /tmp/$n python3 $P "$@" 2>&1 | grep -v '^Collecting\|^Generating\|^Processing' | tail -3
    timeout 60 $N export --type sqlite --force-overwrite=true -o /tmp/$d/$n.sqlite /tmp/$n.nsys-rep >/dev/null
}
for s in ra_eager ra_graph ra_sync ra_graph_detok wt_eager wt_graph; do
    c pairs $s -- --scenario $s --steps 24
done
G=(--gpu-metrics-devices=all --gpu-metrics-frequency=20000 --capture-range=cudaProfilerApi --capture-range-end=stop)
c metrics gm_sync_graph "${G[@]}" -- --scenario sync_graph --steps 24 --profiler-range
c metrics gm_ra_eager "${G[@]}" -- --scenario ra_eager --steps 24 --profiler-range
for i in 1 2 3 4 5 6; do c diff same_$i -- --scenario sync_graph --steps 30; done
for i in 1 2 3; do c diff cpu5_$i -- --scenario sync_graph --steps 30 --extra-host-ms 0.08; done
for i in 1 2 3; do c diff gpu5_$i -- --scenario sync_graph --steps 30 --d-ff 4416; done
ls -l /tmp/pairs /tmp/metrics /tmp/diff
for d in pairs metrics diff; do tar -C /tmp -cf - $d | xz -T16 -6 > "$OUT/$d.tar.xz"; done
ls -l "$OUT"
