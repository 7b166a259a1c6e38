#!/bin/bash
# The second device call of issue 40's pairs (after capture_runahead.sh): the worker-thread
# pair (its first capture hung: the worker thread failed and the scheduler waited), and the
# run-ahead "sync removed" pair again, back to back, with the eager -> graph pair once more.
# Same flags as capture_runahead.sh; all come back as $OUT/pairs2.tar.xz.
set -u
P=sample_traces/generate/runahead.py
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
mkdir -p /tmp/pairs2 "$OUT"
c() {  # c NAME RUNAHEAD_ARGS...
    local n=$1; shift
    echo "= $n $* ($SECONDS s)"
    timeout 90 $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        --force-overwrite=true -o /tmp/$n python3 $P "$@" > /tmp/$n.log 2>&1
    grep '^\[' /tmp/$n.log; grep -i 'error' /tmp/$n.log | head -5
    timeout 60 $N export --type sqlite --force-overwrite=true -o /tmp/pairs2/$n.sqlite /tmp/$n.nsys-rep >/dev/null 2>&1
}
c wt_eager --scenario wt_eager --steps 24
c wt_graph --scenario wt_graph --steps 24
c ra_sync2 --scenario ra_sync --steps 24
c ra_eager2 --scenario ra_eager --steps 24
c ra_graph2 --scenario ra_graph --steps 24
ls -l /tmp/pairs2
tar -C /tmp -cf - pairs2 | xz -T16 -6 > "$OUT/pairs2.tar.xz"
