#!/bin/bash
# The 2-GPU tensor-parallel sample traces (issue 18), on the GPU machine (kind nvidia-h200-x2),
# in one device call, from the repo root with .nsys-libs carried along:
#
#   bash sample_traces/generate/capture_tp.sh "$OUT"
#
# Three captures of tp_decode.py (one process per GPU, NCCL, NVLink multicast off), each
# independent of the others:
#   tp_eager             one nsys session over `torchrun --nproc-per-node 2 tp_decode.py --mode eager`
#                        (rank 0 does 3 ms of host work a step in `detokenize`)
#   tp_graph             the same with --mode graph (forward replayed from a CUDA graph with the
#                        all-reduces inside it, no planted host work)
#   tp_rank0, tp_rank1   one nsys session per rank: torchrun --no-python runs tp_rank_nsys.sh,
#                        which runs `nsys profile -o ..._rank$RANK python3 tp_decode.py --mode eager`
# each with `nsys profile -t cuda,nvtx,osrt --osrt-threshold=100000 --sample=none --cpuctxsw=none --cuda-graph-trace=node`,
# then `nsys export --type sqlite`, then scrub.py. Finished exports go flat into OUTDIR as
# NAME.sqlite if they are at most MAX_BYTES (5,000,000), else as NAME.over5MB.sqlite; when time
# is left after all three, an oversize capture is redone once with fewer steps. OUTDIR also gets
# capture_tp.log (everything printed, the workload's own output included).
#
# Environment: STEPS_EAGER (16: two ranks and torchrun in one export), STEPS_GRAPH (20),
# STEPS_PERRANK (20) measured steps, WARMUP (3), TP_PORT_BASE (29540: rendezvous ports 29541...),
# MAX_BYTES (5000000), BUDGET_S (345: a capture is cut off 45 s before it, for its export;
# none starts with less than 60 s to run), CAP_TIMEOUT_S (150 per capture; exports 60),
# NSYS (the nsys CLI), PYTHON (python3),
# TORCHRUN (torchrun, else "$PYTHON -m torch.distributed.run"), WORK (/tmp/tp_capture),
# TP_EXTRA_ARGS (appended to every tp_decode.py command line), NCCL_DEBUG (INFO) and
# NCCL_DEBUG_SUBSYS (INIT,ENV): NCCL's start-up lines (transport, NVLS off) go to the log.
#
# Dry run without a GPU or nsys (CPU, gloo, small model; fake_nsys.sh runs the commands as is):
#   NSYS=$PWD/sample_traces/generate/fake_nsys.sh PYTHON=.venv/bin/python TORCHRUN=.venv/bin/torchrun \
#   TP_EXTRA_ARGS="--device cpu --layers 2 --d-model 256 --n-heads 4 --d-ff 512 --vocab 1000 \
#   --max-len 256 --prompt-len 64" bash sample_traces/generate/capture_tp.sh /tmp/tp_dry
set -uo pipefail
OUTDIR=${1:?usage: capture_tp.sh OUTDIR}
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd) || exit 1

export LD_LIBRARY_PATH=$ROOT/.nsys-libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
# NVLink multicast off in NCCL, PyTorch and NVSHMEM: the device README requires it
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,ENV}
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
PYTHON=${PYTHON:-python3}
export NSYS PYTHON
if [ -n "${TORCHRUN:-}" ]; then
    read -ra TR <<< "$TORCHRUN"
elif command -v torchrun > /dev/null; then
    TR=(torchrun)
else
    TR=("$PYTHON" -m torch.distributed.run)
fi
W=${WORK:-/tmp/tp_capture}
STEPS_EAGER=${STEPS_EAGER:-16}
STEPS_GRAPH=${STEPS_GRAPH:-20}
STEPS_PERRANK=${STEPS_PERRANK:-20}
WARMUP=${WARMUP:-3}
MAX_BYTES=${MAX_BYTES:-5000000}
BUDGET_S=${BUDGET_S:-345}
CAP_TIMEOUT_S=${CAP_TIMEOUT_S:-150}
read -ra EXTRA <<< "${TP_EXTRA_ARGS:-}"
# OS-runtime calls shorter than 100 us are not traced: torchrun's TCPStore polls accept() ~120,000
# times a run (6.7 us each) and imports stat() thousands of files, which alone made the exports
# 7-17 MB; the long blocking waits (pthread_cond_wait, poll) stay.
PROFILE=(-t "cuda,nvtx,osrt" --osrt-threshold=100000 --sample=none --cpuctxsw=none --cuda-graph-trace=node)
TP=sample_traces/generate/tp_decode.py
export TP_PERRANK_PREFIX=$W/tp_perrank

rm -rf "$W" && mkdir -p "$W" || exit 1
exec > >(tee -a "$OUTDIR/capture_tp.log") 2>&1

echo "== preflight ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv || echo "(no nvidia-smi)"
nvidia-smi topo -m || true
"$PYTHON" -c 'import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)' \
    || echo "!! python/torch check failed"
"$NSYS" --version || echo "!! no nsys at $NSYS"
echo "torchrun: ${TR[*]}"
echo "extra tp_decode args: ${EXTRA[*]:-(none)}"
env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort
echo "== preflight done (elapsed $SECONDS s)"

left() { echo $((BUDGET_S - SECONDS)); }

limit() {  # seconds the next capture may take: CAP_TIMEOUT_S, or the budget less 45 s for its export
    local l=$(($(left) - 45))
    [ $l -gt "$CAP_TIMEOUT_S" ] && l=$CAP_TIMEOUT_S
    echo "$l"
}

summary() {  # summary FILE: size, processes, kernels (NCCL ones), runtime and NVTX rows
    "$PYTHON" - "$1" << 'EOF'
import os, sqlite3, sys
f = sys.argv[1]
c = sqlite3.connect(f)
tabs = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
def q(sql, default=None):
    try:
        return c.execute(sql).fetchall()
    except sqlite3.Error:
        return default
kern = {}
if "CUPTI_ACTIVITY_KIND_KERNEL" in tabs:
    for pid, n, nccl in q(
        "select (k.globalPid >> 24) & 16777215 as pid, count(*), sum(s.value like 'nccl%') "
        "from CUPTI_ACTIVITY_KIND_KERNEL k left join StringIds s on s.id = k.shortName group by pid", []):
        kern[pid] = (n, nccl or 0)
rt = dict(q("select (globalTid >> 24) & 16777215 as pid, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME "
            "group by pid", []) or [])
nvtx = (q("select count(*) from NVTX_EVENTS", [[None]]) or [[None]])[0][0]
print(f"   {os.path.basename(f)}: {os.path.getsize(f)} bytes, NVTX rows {nvtx}")
for pid in sorted(set(kern) | set(rt)):
    n, nccl = kern.get(pid, (0, 0))
    print(f"   pid {pid}: kernels {n} (nccl {nccl}), runtime rows {rt.get(pid, 0)}"
          + ("   !! CUDA calls but no kernels: did the process die at exit?" if n == 0 and rt.get(pid) else ""))
EOF
}

finish() {  # finish REP NAME: export, scrub, summary, place in OUTDIR. 0 ok, 1 failed, 2 oversize
    # (the capture functions return the same, or 3 when skipped for lack of time)
    local rep=$1 name=$2 t0=$SECONDS size
    if [ ! -f "$rep" ]; then echo "!! $name: no report $rep"; return 1; fi
    timeout -k 10 60 "$NSYS" export --type sqlite --force-overwrite=true -o "$W/$name.sqlite" "$rep" \
        || { echo "!! $name: nsys export rc=$?"; return 1; }
    [ -f "$W/$name.sqlite" ] || { echo "!! $name: no sqlite"; return 1; }
    "$PYTHON" sample_traces/generate/scrub.py "$W/$name.sqlite" || { echo "!! $name: scrub failed"; return 1; }
    summary "$W/$name.sqlite" || echo "!! $name: summary failed"
    size=$(stat -c %s "$W/$name.sqlite")
    echo "$size" > "$W/$name.size"
    rm -f "$OUTDIR/$name.sqlite" "$OUTDIR/$name.over5MB.sqlite"
    if [ "$size" -le "$MAX_BYTES" ]; then
        cp "$W/$name.sqlite" "$OUTDIR/$name.sqlite"
        echo "-- $name: $size bytes -> OUTDIR/$name.sqlite (export+scrub $((SECONDS - t0)) s)"
        return 0
    fi
    cp "$W/$name.sqlite" "$OUTDIR/$name.over5MB.sqlite"
    echo "!! $name: $size bytes > $MAX_BYTES -> OUTDIR/$name.over5MB.sqlite (export+scrub $((SECONDS - t0)) s)"
    return 2
}

# cap_session NAME MODE STEPS: one nsys session over torchrun and both ranks
cap_session() {
    local name=$1 mode=$2 steps=$3 t0=$SECONDS lim rc
    lim=$(limit)
    if [ "$lim" -lt 60 ]; then echo "!! $name skipped: $(left) s of the budget left"; return 3; fi
    echo "== $name: $NSYS profile ${PROFILE[*]} ${TR[*]} ${RDZV[*]} --nproc-per-node 2 $TP --mode $mode --steps $steps --warmup $WARMUP ${EXTRA[*]:-} (limit $lim s, elapsed $SECONDS s)"
    rm -f "$W/$name.nsys-rep"
    timeout -k 10 "$lim" "$NSYS" profile "${PROFILE[@]}" -o "$W/$name" --force-overwrite=true \
        "${TR[@]}" "${RDZV[@]}" --nproc-per-node 2 "$TP" \
        --mode "$mode" --steps "$steps" --warmup "$WARMUP" "${EXTRA[@]}"
    rc=$?
    echo "-- $name: profile rc=$rc after $((SECONDS - t0)) s"
    finish "$W/$name.nsys-rep" "$name"
    rc=$?
    echo "== $name: $((SECONDS - t0)) s (elapsed $SECONDS s)"
    return $rc
}

# cap_perrank NAME MODE STEPS: one nsys session per rank (NAME0, NAME1), torchrun outside nsys
cap_perrank() {
    local name=$1 mode=$2 steps=$3 t0=$SECONDS lim rc r worst=0
    lim=$(limit)
    if [ "$lim" -lt 60 ]; then echo "!! ${name}0/1 skipped: $(left) s of the budget left"; return 3; fi
    echo "== ${name}0/1: ${TR[*]} ${RDZV[*]} --nproc-per-node 2 --no-python bash sample_traces/generate/tp_rank_nsys.sh --mode $mode --steps $steps --warmup $WARMUP ${EXTRA[*]:-} (limit $lim s, elapsed $SECONDS s)"
    rm -f "$TP_PERRANK_PREFIX"_rank*.nsys-rep
    timeout -k 10 "$lim" "${TR[@]}" "${RDZV[@]}" --nproc-per-node 2 --no-python \
        bash sample_traces/generate/tp_rank_nsys.sh \
        --mode "$mode" --steps "$steps" --warmup "$WARMUP" "${EXTRA[@]}"
    rc=$?
    echo "-- ${name}0/1: torchrun rc=$rc after $((SECONDS - t0)) s"
    for r in 0 1; do
        finish "${TP_PERRANK_PREFIX}_rank$r.nsys-rep" "$name$r"
        rc=$?
        [ $rc -eq 1 ] && worst=1
        [ $rc -eq 2 ] && [ $worst -eq 0 ] && worst=2
    done
    echo "== ${name}0/1: $((SECONDS - t0)) s (elapsed $SECONDS s)"
    return $worst
}

declare -A TOOK STEPS STATUS
PORT=${TP_PORT_BASE:-29540}
run() {  # run KEY FUNC NAME MODE STEPS
    local key=$1 t0=$SECONDS
    # static rendezvous on 127.0.0.1 (no host name to resolve), a new port for every capture
    PORT=$((PORT + 1))
    RDZV=(--master-addr 127.0.0.1 --master-port "$PORT")
    STEPS[$key]=$5
    "$2" "$3" "$4" "$5"
    STATUS[$key]=$?
    TOOK[$key]=$((SECONDS - t0))
}

run tp_eager cap_session tp_eager eager "$STEPS_EAGER"
run tp_graph cap_session tp_graph graph "$STEPS_GRAPH"
run tp_rank cap_perrank tp_rank eager "$STEPS_PERRANK"

# an oversize capture is redone once with fewer steps, if the budget still allows it.
# size = start-up + steps * per-step, so scaling the steps by 0.9 * MAX / size is on the safe side.
for key in tp_eager tp_graph tp_rank; do
    [ "${STATUS[$key]}" -eq 2 ] || continue
    if [ "$key" = tp_rank ]; then
        size=$(cat "$W/tp_rank0.size" "$W/tp_rank1.size" 2> /dev/null | sort -n | tail -1)
    else
        size=$(cat "$W/$key.size")
    fi
    steps=$((STEPS[$key] * MAX_BYTES * 9 / 10 / size))
    need=$((TOOK[$key] + 20))
    if [ "$steps" -lt 5 ] || [ "$(left)" -lt "$need" ]; then
        echo "!! $key: not redone ($steps steps would fit; $(left) s left, it took ${TOOK[$key]} s)"
        continue
    fi
    echo "== $key: redo with $steps measured steps (was ${STEPS[$key]}, $size bytes)"
    case $key in
    tp_eager) run tp_eager cap_session tp_eager eager "$steps" ;;
    tp_graph) run tp_graph cap_session tp_graph graph "$steps" ;;
    tp_rank) run tp_rank cap_perrank tp_rank eager "$steps" ;;
    esac
done

echo "== summary (elapsed $SECONDS s)"
for key in tp_eager tp_graph tp_rank; do
    case ${STATUS[$key]} in 0) s=ok ;; 2) s=OVERSIZE ;; 3) s=SKIPPED ;; *) s=FAILED ;; esac
    echo "$key: $s, ${STEPS[$key]} measured + $WARMUP warm-up steps, ${TOOK[$key]} s"
done
ls -l "$OUTDIR"
echo "== done in $SECONDS s"
