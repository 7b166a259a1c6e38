#!/bin/bash
# Issue 40's run-ahead pairs that the GPU paces, all back to back in one device call, from the
# repo root with .nsys-libs carried: bash sample_traces/generate/capture_gpu_paced.sh
#
# The model is large enough (fp32, d_model 8192, d_ff 32768, 4 layers: ~4.3 GB of weights a
# layer) that even the eager forward's launches run ahead of its GPU work. First a timing probe
# without nsys (eager vs graph step), then, each with --detok-ms 0 unless said:
#   gp_eager        ra_eager                    before of forward=graph
#   gp_graph        ra_graph                    the "after" of every pair below
#   gp_graph_detok  ra_graph, --detok-ms 1.0    before of process_output=nohost
#   gp_graph_x2     ra_graph, --forward-repeat 2 (a redundant recompute) before of forward=gpu50
#   gp_graph_again  ra_graph                    the after again (run-to-run spread)
#   gp_graph_gm     ra_graph with GPU metrics (20 kHz, the loop only): speed of light of a
#                   GPU-paced loop
# All come back as $OUT/gpu_paced.tar.xz; here: tar -xJf, scrub.py, xz -9.
set -u
P=sample_traces/generate/runahead.py
export LD_LIBRARY_PATH=$PWD/.nsys-libs:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
N=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
D=/tmp/gpu_paced
mkdir -p $D "$OUT"
exec > >(tee -a "$OUT/capture.log") 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv
BIG=(--dtype float32 --d-model 8192 --n-heads 64 --d-ff 32768 --target-layers 4 --steps 24)
echo "== probe ($SECONDS s)"
for s in ra_eager ra_graph; do timeout 120 python3 $P --scenario $s "${BIG[@]}" --steps 12 --detok-ms 0; done
c() {  # c NAME [NSYS_FLAGS --] RUNAHEAD_ARGS...
    local n=$1; shift
    local flags=()
    if [[ " $* " == *" -- "* ]]; then
        while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
    fi
    echo "= $n $* ($SECONDS s)"
    timeout 150 $N profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
        "${flags[@]}" --force-overwrite=true -o /tmp/$n python3 $P "$@" > /tmp/$n.log 2>&1
    grep '^\[' /tmp/$n.log; grep -i 'error' /tmp/$n.log | head -5
    timeout 90 $N export --type sqlite --force-overwrite=true -o $D/$n.sqlite /tmp/$n.nsys-rep >/dev/null 2>&1
    ls -l $D/$n.sqlite | tail -1
}
c gp_eager --scenario ra_eager "${BIG[@]}" --detok-ms 0
c gp_graph --scenario ra_graph "${BIG[@]}" --detok-ms 0
c gp_graph_detok --scenario ra_graph "${BIG[@]}" --detok-ms 1.0
c gp_graph_x2 --scenario ra_graph "${BIG[@]}" --detok-ms 0 --forward-repeat 2
c gp_graph_again --scenario ra_graph "${BIG[@]}" --detok-ms 0
c gp_graph_gm --gpu-metrics-devices=all --gpu-metrics-frequency=20000 --capture-range=cudaProfilerApi \
    --capture-range-end=stop -- --scenario ra_graph "${BIG[@]}" --detok-ms 0 --profiler-range
tar -C /tmp -cf - gpu_paced | xz -T16 -6 > "$OUT/gpu_paced.tar.xz"
ls -l "$OUT"; echo "== done in $SECONDS s"
