#!/bin/bash
# Capture the transformers corpus (hf_generate.py) on the GPU machine, in one device call.
#
#   bash sample_traces/generate/capture_hf.sh      # repo root; carry .nsys-libs and .wheels
#
# .wheels holds transformers 4.57.1 and its pure-Python/abi3 dependencies for Python 3.12
# (made here with `pip download --python-version 3.12 --platform manylinux2014_x86_64
# --only-binary=:all: -d .wheels transformers==4.57.1`, numpy removed: the machine has it);
# the GPU machine reaches no package index. Each export is scrubbed (scrub.py) and copied
# to $OUT flat. Environment: NSYS, OUT (default /tmp/tg_out), BUDGET_S (590), ONLY (names of
# the captures to make, space-separated; default all).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
export LD_LIBRARY_PATH=$ROOT/.nsys-libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 TOKENIZERS_PARALLELISM=false
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
W=${WORK:-/tmp/tg_hf}
BUDGET_S=${BUDGET_S:-590}
ONLY=${ONLY:-}
PY="python3 sample_traces/generate/hf_generate.py"
mkdir -p "$OUT"
rm -rf "$W"; mkdir -p "$W/rep" "$W/sqlite"
exec > >(tee -a "$OUT/capture_hf.log") 2>&1

echo "== install ($(date -u +%FT%TZ))"
python3 -m pip install -q --no-index --find-links .wheels transformers==4.57.1 2>&1 | tail -3
python3 -c 'import sys,torch,transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "gpu", torch.cuda.get_device_name(0))'
"$NSYS" --version

cap() {  # cap NAME "NSYS OPTIONS" HF_GENERATE_ARGS...
    local name=$1 opts=$2; shift 2
    local t0=$SECONDS
    if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
    if [ $((BUDGET_S - SECONDS)) -lt 60 ]; then echo "!! $name skipped: budget nearly spent"; return; fi
    echo "== $name: nsys profile $opts $PY $*"
    # shellcheck disable=SC2086
    timeout 240 "$NSYS" profile $opts --sample=none --cpuctxsw=none \
        -o "$W/rep/$name" --force-overwrite=true $PY "$@" || echo "!! $name: nsys profile rc=$?"
    if [ -f "$W/rep/$name.nsys-rep" ]; then
        "$NSYS" export --type sqlite --force-overwrite=true -o "$W/sqlite/$name.sqlite" \
            "$W/rep/$name.nsys-rep" >/dev/null || echo "!! $name: nsys export rc=$?"
    fi
    if [ -f "$W/sqlite/$name.sqlite" ]; then
        python3 sample_traces/generate/scrub.py "$W/sqlite/$name.sqlite"
        cp "$W/sqlite/$name.sqlite" "$OUT/"
        ls -l "$OUT/$name.sqlite"
    else
        echo "!! $name: no sqlite"
    fi
    echo "== $name: $((SECONDS - t0)) s (elapsed $SECONDS s)"
}

FULL="-t cuda,nvtx,osrt"
NODE="--cuda-graph-trace=node"
# The capture covers generate() only (cudaProfilerApi range): the imports' OS-runtime rows
# alone would push an export past 5 MB. generate's first step still loads its code lazily.
CR="--capture-range=cudaProfilerApi --capture-range-end=stop"
ONE="--profile-generate"
# (a) greedy, static cache, eager; (d) sampling, dynamic cache; (c) assisted generation.
cap hf_greedy_static_eager   "$FULL $NODE $CR" --scenario greedy_static_eager --new-tokens 40 $ONE
cap hf_sample_dynamic        "$FULL $NODE $CR" --scenario sample_dynamic --new-tokens 40 $ONE
cap hf_assisted              "$FULL $NODE $CR" --scenario assisted --new-tokens 30 $ONE
# (e) the same greedy loop traced without OS-runtime calls, from process start.
cap hf_greedy_static_noosrt  "-t cuda,nvtx $NODE" --scenario greedy_static_eager --new-tokens 40
# (b) generate's own torch.compile (cudagraph trees), second call traced; node and graph mode.
TWO="--profile-second-call"
cap hf_greedy_compiled       "$FULL $NODE $CR" --scenario greedy_static_compiled --new-tokens 40 $TWO
cap hf_greedy_compiled_graphmode "$FULL --cuda-graph-trace=graph $CR" --scenario greedy_static_compiled --new-tokens 40 $TWO

echo "== row counts"
python3 - "$OUT" <<'EOF'
import sqlite3, sys, os, glob
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.sqlite"))):
    c = sqlite3.connect(f)
    tabs = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
    n = lambda t: c.execute(f"select count(*) from {t}").fetchone()[0] if t in tabs else None
    print(os.path.basename(f), os.path.getsize(f), "kernels", n("CUPTI_ACTIVITY_KIND_KERNEL"),
          "runtime", n("CUPTI_ACTIVITY_KIND_RUNTIME"), "driver", n("CUPTI_ACTIVITY_KIND_DRIVER"),
          "nvtx", n("NVTX_EVENTS"), "graph_trace", n("CUPTI_ACTIVITY_KIND_GRAPH_TRACE"), "osrt", n("OSRT_API"))
EOF
ls -l "$OUT"
echo "== done in $SECONDS s"
