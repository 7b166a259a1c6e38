#!/bin/bash
# Capture every sample trace of trace-gaps, on the GPU machine, in one device call.
#
#   bash sample_traces/generate/capture.sh          # from the repo root, .nsys-libs carried along
#
# For each scenario of specdecode.py: nsys profile (--cuda-graph-trace=node; the graph
# scenarios also =graph), nsys export --type sqlite, then nsys stats NVTX GPU-projection
# reports on spec_eager (and spec_graph_node) as CSV. Everything small goes back as one
# small.tar.xz in $OUT (split into 15 MiB parts if needed). If enough of the 10-minute
# command budget is left, the large trace (make_large.sh) follows and its parts go to $OUT too.
#
# Environment: STEPS (measured steps; default per scenario, below), WARMUP (3), LARGE (auto|1|0), BUDGET_S (600),
# NSYS (path of the nsys CLI), OUT (folder that comes back; default /tmp/tg_out).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
export LD_LIBRARY_PATH=$ROOT/.nsys-libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
W=${WORK:-/tmp/tg}
STEPS=${STEPS:-}
WARMUP=${WARMUP:-3}
LARGE=${LARGE:-auto}
BUDGET_S=${BUDGET_S:-590}
PY="python3 sample_traces/generate/specdecode.py"
mkdir -p "$OUT"
rm -rf "$W"; mkdir -p "$W/rep" "$W/sqlite" "$W/stats"
exec > >(tee -a "$OUT/capture.log") 2>&1

echo "== versions ($(date -u +%FT%TZ))"
nvidia-smi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c 'import sys,torch; print("python", sys.version.split()[0], "torch", torch.__version__, "torch.version.cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.get_device_name(0))'
nvcc --version 2>/dev/null | tail -2
"$NSYS" --version
uname -r; nproc
command -v xz || echo "no xz: python lzma fallback"

cap() {  # cap NAME GRAPH_TRACE_MODE SPECDECODE_ARGS...
    local name=$1 mode=$2; shift 2
    local t0=$SECONDS
    if [ $((BUDGET_S - SECONDS)) -lt 120 ]; then echo "!! $name skipped: command budget nearly spent"; return; fi
    echo "== $name: $NSYS profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=$mode $PY $*"
    timeout 300 "$NSYS" profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none \
        --cuda-graph-trace="$mode" -o "$W/rep/$name" --force-overwrite=true $PY "$@" \
        || echo "!! $name: nsys profile rc=$?"
    if [ -f "$W/rep/$name.nsys-rep" ]; then
        "$NSYS" export --type sqlite --force-overwrite=true -o "$W/sqlite/$name.sqlite" "$W/rep/$name.nsys-rep" \
            || echo "!! $name: nsys export rc=$?"
    fi
    ls -l "$W/sqlite/$name.sqlite" 2>/dev/null || echo "!! $name: no sqlite"
    echo "== $name: $((SECONDS - t0)) s (elapsed $SECONDS s)"
}

# Step counts keep each export near 2.5-3.5 MB (~1.3 MB of process start-up, mostly OSRT rows
# of Python imports, plus ~0.1 MB per eager speculative step), so that all nine fit in 25 MB.
W3="--warmup $WARMUP"
cap spec_eager                     node  --scenario spec_eager          --steps ${STEPS:-12} $W3
cap spec_graph_node                node  --scenario spec_graph          --steps ${STEPS:-12} $W3
cap spec_graph_graphmode           graph --scenario spec_graph          --steps ${STEPS:-12} $W3
cap spec_graph_bypassed            node  --scenario spec_graph_bypassed --steps ${STEPS:-10} $W3
cap spec_graph_bypassed_graphmode  graph --scenario spec_graph_bypassed --steps ${STEPS:-10} $W3
cap spec_sync                      node  --scenario spec_sync           --steps ${STEPS:-12} $W3
cap spec_longctx_draft             node  --scenario spec_longctx_draft  --steps ${STEPS:-12} $W3
cap spec_two_ranks                 node  --scenario spec_two_ranks      --steps ${STEPS:-6} $W3
cap plain_decode                   node  --scenario plain_decode        --steps ${STEPS:-16} $W3
cap spec_sdpa_recompile            node  --scenario spec_sdpa_recompile --steps ${STEPS:-8} $W3

echo "== nsys stats (elapsed $SECONDS s)"
"$NSYS" stats --help-reports > "$W/stats/help-reports.txt" 2>&1 || true
grep -i nvtx "$W/stats/help-reports.txt" | head -20
for name in spec_eager spec_graph_node; do
    [ -f "$W/sqlite/$name.sqlite" ] || continue
    cp "$W/sqlite/$name.sqlite" "$W/stats_$name.sqlite"   # nsys stats may write into its input
    timeout 120 "$NSYS" stats --report nvtx_gpu_proj_sum --report nvtx_gpu_proj_trace --report nvtx_sum \
        --report cuda_api_sum --report cuda_gpu_kern_sum --format csv --force-overwrite=true \
        --output "$W/stats/$name" "$W/stats_$name.sqlite" > "$W/stats/$name.stats.log" 2>&1 \
        || echo "!! stats $name rc=$?"
    tail -5 "$W/stats/$name.stats.log"
done
ls -l "$W/stats"

echo "== row counts"
python3 - "$W/sqlite" <<'EOF'
import sqlite3, sys, os, glob
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.sqlite"))):
    c = sqlite3.connect(f)
    tabs = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
    n = lambda t: c.execute(f"select count(*) from {t}").fetchone()[0] if t in tabs else None
    print(os.path.basename(f), os.path.getsize(f), "kernels", n("CUPTI_ACTIVITY_KIND_KERNEL"),
          "runtime", n("CUPTI_ACTIVITY_KIND_RUNTIME"), "nvtx", n("NVTX_EVENTS"),
          "graph_trace", n("CUPTI_ACTIVITY_KIND_GRAPH_TRACE"), "osrt", n("OSRT_API"))
EOF

echo "== pack small (elapsed $SECONDS s)"
compress() {  # compress SRC DST LEVEL
    if command -v xz >/dev/null; then xz -T16 "-$3" --block-size=16MiB -c "$1" > "$2"
    else python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.compress(open(sys.argv[1],"rb").read(), preset=int(sys.argv[3])))' "$1" "$2" "$3"; fi
}
tar -C "$W" -cf "$W/small.tar" sqlite stats
compress "$W/small.tar" "$W/small.tar.xz" 6
ls -l "$W/small.tar" "$W/small.tar.xz"
if [ "$(stat -c %s "$W/small.tar.xz")" -gt 15728640 ]; then
    split -b 15m "$W/small.tar.xz" "$OUT/small.tar.xz.part-"
else
    cp "$W/small.tar.xz" "$OUT/"
fi
ls -l "$OUT"

left=$((BUDGET_S - SECONDS))
if [ "$LARGE" = 1 ] || { [ "$LARGE" = auto ] && [ $left -gt 300 ]; }; then
    echo "== large capture ($left s left)"
    bash sample_traces/generate/make_large.sh "$W/large"
    nparts=$(ls "$W/large"/*.part-* 2>/dev/null | wc -l)
    nout=$(ls "$OUT" | wc -l)
    bytes=$(du -cb "$OUT"/* "$W/large"/*.part-* 2>/dev/null | tail -1 | cut -f1)
    if [ "$nparts" -gt 0 ] && [ $((nout + nparts + 1)) -le 8 ] && [ "$bytes" -le 62914560 ]; then
        cp "$W/large"/*.part-* "$W/large"/*.txt "$OUT/" 2>/dev/null
    else
        echo "!! large parts not copied: $nparts parts, $nout files already, $bytes bytes"
    fi
else
    echo "== large capture skipped ($left s left): run make_large.sh in its own call"
fi
ls -l "$OUT"
echo "== done in $SECONDS s"
