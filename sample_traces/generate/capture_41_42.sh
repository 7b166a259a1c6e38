#!/bin/bash
# Captures of issues 41 and 42 in one device call, from the repo root with .nsys-libs carried:
#
#   bash sample_traces/generate/capture_41_42.sh      # SRC=dir of runahead.py etc. (default
#                                                      # sample_traces/generate)
#
# 1. drift.tar.xz  diff's drift (issue 42): probe_gpu_regression.py picks a regression whose
#                  forward is slower by about 7 % of the captured step (more KV cache slots,
#                  --max-len: the attention kernels slower); then, interleaved, the synchronous
#                  graph loop unchanged (base_1..3) and with it (gpureg_1..3), 30 steps each.
# 2. gm.tar.xz     GPU metrics at 20 kHz, only the loop captured (issue 41): the run-ahead
#                  graph loop in float32 then bfloat16 (half the bytes: gm_bytes_fp32/_bf16),
#                  the serving loop (serving.py batch_names, 30 served iterations after
#                  warm-up, gm_serving), and the synchronous graph loop in float32 then
#                  bfloat16 (gm_sync_fp32/_bf16). PAIRS=0 leaves the fp32/bf16 pairs out.
# Then, here: tar -xJf each; python3 sample_traces/generate/scrub.py */*.sqlite; xz -9.
set -u
S=${SRC:-sample_traces/generate}
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
BUDGET=${BUDGET_S:-500}
mkdir -p /tmp/drift /tmp/gm "$OUT"
exec > >(tee -a "$OUT/capture.log") 2>&1
$N --version; nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,memory.total,driver_version --format=csv
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
c() {  # c DIR NAME SCRIPT NSYS_FLAGS -- ARGS...
    local d=$1 n=$2 p=$3; shift 3
    local flags=()
    while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
    if [ "$SECONDS" -gt "$BUDGET" ]; then echo "= skip $n ($SECONDS s)"; return; fi
    echo "= $n $* ($SECONDS s)"
    timeout 120 $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        "${flags[@]}" --force-overwrite=true -o /tmp/$n python3 $p "$@" 2>&1 | grep -v '^Collecting\|^Generating\|^Processing' | tail -3
    timeout 60 $N export --type sqlite --force-overwrite=true -o /tmp/$d/$n.sqlite /tmp/$n.nsys-rep >/dev/null
    ls -l /tmp/$d/$n.sqlite 2>&1 | tail -1
}
R=$S/runahead.py
timeout 120 python3 $S/probe_gpu_regression.py | tee /tmp/probe.txt
REG=$(sed -n 's/^ARGS=//p' /tmp/probe.txt); REG=${REG:---max-len 4096}
echo "== GPU regression: $REG ($SECONDS s)"
for i in 1 2 3; do
    c drift base_$i $R -- --scenario sync_graph --steps 30
    # shellcheck disable=SC2086
    c drift gpureg_$i $R -- --scenario sync_graph --steps 30 $REG
done
G=(--gpu-metrics-devices=all --gpu-metrics-frequency=20000 --capture-range=cudaProfilerApi --capture-range-end=stop)
c gm gm_serving $S/serving.py "${G[@]}" -- --convention batch_names --iterations 30 --profiler-range
if [ "${PAIRS:-1}" = 1 ]; then
    c gm gm_bytes_fp32 $R "${G[@]}" -- --scenario ra_graph --steps 24 --dtype float32 --profiler-range
    c gm gm_bytes_bf16 $R "${G[@]}" -- --scenario ra_graph --steps 24 --dtype bfloat16 --profiler-range
    c gm gm_sync_fp32 $R "${G[@]}" -- --scenario sync_graph --steps 24 --dtype float32 --profiler-range
    c gm gm_sync_bf16 $R "${G[@]}" -- --scenario sync_graph --steps 24 --dtype bfloat16 --profiler-range
fi
for f in /tmp/gm/*.sqlite; do
    python3 - "$f" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
t = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
print(sys.argv[1], "GPU_METRICS" in t and c.execute("select count(*) from GPU_METRICS").fetchone())
if "TARGET_INFO_GPU_METRICS" in t:
    print(sorted({r[0] for r in c.execute("select metricName from TARGET_INFO_GPU_METRICS")}))
if "TARGET_INFO_GPU" in t:
    print(c.execute("select * from TARGET_INFO_GPU").fetchall())
PY
done
echo "$REG" > /tmp/drift/regression.txt; cp /tmp/probe.txt /tmp/drift/
for d in drift gm; do tar -C /tmp -cf - $d | xz -T16 -6 > "$OUT/$d.tar.xz"; done
ls -l "$OUT"; echo "== done in $SECONDS s"
