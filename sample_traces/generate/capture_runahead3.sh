#!/bin/bash
# The third device call of issue 40's pairs: the host-paced run-ahead pair (ra_graph_detok -> ra_graph),
# and the eager -> graph and sync-removed run-ahead pairs again, all back to back on one machine.
# Same flags as capture_runahead.sh; all come back as $OUT/pairs3.tar.xz.
set -u
P=sample_traces/generate/runahead.py
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
mkdir -p /tmp/pairs3 "$OUT"
c() {  # c NAME RUNAHEAD_ARGS...
    local n=$1; shift
    echo "= $n $* ($SECONDS s)"
    timeout 90 $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        --force-overwrite=true -o /tmp/$n python3 $P "$@" > /tmp/$n.log 2>&1
    grep '^\[' /tmp/$n.log; grep -i 'error' /tmp/$n.log | head -5
    timeout 60 $N export --type sqlite --force-overwrite=true -o /tmp/pairs3/$n.sqlite /tmp/$n.nsys-rep >/dev/null 2>&1
}
c ra_graph_detok3 --scenario ra_graph_detok --steps 24
c ra_graph3 --scenario ra_graph --steps 24
c ra_eager3 --scenario ra_eager --steps 24
c ra_sync3 --scenario ra_sync --steps 24
ls -l /tmp/pairs3
tar -C /tmp -cf - pairs3 | xz -T16 -6 > "$OUT/pairs3.tar.xz"
