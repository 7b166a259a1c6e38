#!/bin/bash
# The what-if before/after pairs (docs/what-if.md) and three repeats of the same unchanged
# eager decode (docs/diff.md), in one device call, from the repo root with .nsys-libs carried:
#
#   bash sample_traces/generate/capture_whatif.sh
#
# Each capture: nsys profile -t cuda,nvtx,osrt --cuda-graph-trace=node, nsys export --type
# sqlite into /tmp/s; all of them come back as $OUT/w.tar.xz. Then, here:
#   tar -xJf w.tar.xz; python3 sample_traces/generate/scrub.py s/*.sqlite; xz -9 s/*.sqlite
# and rename r1..r3 to repeat_eager_1..3, the others to whatif_<name> (below).
# The first run (H200, nsys 2025.3.2, torch on the image) took 133 s.
set -u
P=sample_traces/generate/specdecode.py
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
mkdir -p /tmp/s "$OUT"
c() {  # c NAME SPECDECODE_ARGS...
    local n=$1; shift
    echo "= $n $* $SECONDS"
    $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        -o /tmp/$n python3 $P "$@" 2>&1 | tail -3
    $N export --type sqlite -o /tmp/s/$n.sqlite /tmp/$n.nsys-rep >/dev/null
}
S="--steps 12"
for i in 1 2 3; do c r$i --scenario spec_eager $S; done   # repeat_eager_1..3
c sg --scenario spec_graph $S                              # whatif_spec_graph
L="--steps 16 --max-len 576"
c pe --scenario plain_decode $L                            # whatif_plain_eager
c pg --scenario plain_graph $L                             # whatif_plain_graph
c pd --scenario plain_detok $L                             # whatif_plain_detok
c ss --scenario spec_sync $S                               # whatif_spec_sync
M="$L --target-layers 16 --d-model 1024 --n-heads 8 --d-ff 2816"
c we --scenario plain_decode $M                            # whatif_wide_eager
c wg --scenario plain_graph $M                             # whatif_wide_graph
ls -l /tmp/s
tar -C /tmp -cf - s | xz -T16 -6 > "$OUT/w.tar.xz"
