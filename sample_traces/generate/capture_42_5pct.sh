#!/bin/bash
# Issue 42's ~5 % GPU regression on an H100, in one device call, from the repo root with
# .nsys-libs carried: the synchronous graph loop unchanged (same_i) and with the MLP twice as
# wide (--d-ff 8192: mlp2x_i), interleaved, three each, 30 steps. Comes back as
# $OUT/drift5.tar.xz; here: tar -xJf, scrub.py, xz -9, into sample_traces/drift/ as
# h100_same5_i / h100_mlp2x_i.
set -u
P=sample_traces/generate/runahead.py
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
D=/tmp/drift5
mkdir -p $D "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv
c() {  # c NAME RUNAHEAD_ARGS...
    local n=$1; shift
    echo "= $n $* ($SECONDS s)"
    timeout 120 $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        --force-overwrite=true -o /tmp/$n python3 $P "$@" > /tmp/$n.log 2>&1
    grep '^\[' /tmp/$n.log; grep -i 'error' /tmp/$n.log | head -5
    timeout 60 $N export --type sqlite --force-overwrite=true -o $D/$n.sqlite /tmp/$n.nsys-rep >/dev/null 2>&1
}
for i in 1 2 3; do
    c same_$i --scenario sync_graph --steps 30
    c mlp2x_$i --scenario sync_graph --steps 30 --d-ff 8192
done
ls -l $D
tar -C /tmp -cf - drift5 | xz -T16 -6 > "$OUT/drift5.tar.xz"
echo "== done in $SECONDS s"
