#!/bin/bash
# Capture the serving corpus (serving.py, one export per NVTX convention) on the GPU machine,
# in one device call:
#
#   bash sample_traces/generate/capture_serving.sh     # repo root; carry .nsys-libs (and
#                                                       # .wheels-nvtx for named_domain)
#
# .wheels-nvtx holds the `nvtx` Python package (0.2.17, cp312 manylinux; `pip download
# --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 nvtx`
# here): the machine reaches no index, and torch.cuda.nvtx has no domains. Without it,
# serving.py tries ctypes on a libnvToolsExt found on the machine.
#
# Each capture runs on its own (one failing does not stop the others), is exported to SQLite,
# scrubbed (scrub.py), xz-compressed and listed with its row counts; all .sqlite.xz files go
# into one tar, $OUT/serving_corpus.tar (the device returns at most 8 files), beside the log.
# One over 5,000,000 bytes compressed is captured again with half the iterations if the
# budget allows. Environment: NSYS, OUT (default /tmp/tg_out), BUDGET_S (560), ONLY (names
# of captures, space-separated; default all), ITER (served iterations, default 90),
# ITER_AUTOGRAD (default 40).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
export LD_LIBRARY_PATH=$ROOT/.nsys-libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
OUT=${OUT:-/tmp/tg_out}
W=${WORK:-/tmp/tg_serving}
BUDGET_S=${BUDGET_S:-560}
ONLY=${ONLY:-}
ITER=${ITER:-90}
ITER_AUTOGRAD=${ITER_AUTOGRAD:-40}
PY="python3 sample_traces/generate/serving.py"
mkdir -p "$OUT"
rm -rf "$W"; mkdir -p "$W/rep" "$W/sqlite" "$W/xz"
exec > >(tee -a "$OUT/capture_serving.log") 2>&1

echo "== start $(date -u +%FT%TZ)"
if ls .wheels-nvtx/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site_nvtx .wheels-nvtx/*.whl \
        && export PYTHONPATH=/tmp/site_nvtx${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c 'import sys,torch; print("python", sys.version.split()[0], "torch", torch.__version__, "gpu", torch.cuda.get_device_name(0))'
python3 -c 'import nvtx; print("nvtx package", nvtx.__file__)' || echo "(no nvtx package)"
"$NSYS" --version
"$NSYS" profile --help | grep -i -A12 -- '--pytorch' | head -30

cap() {  # cap NAME "NSYS OPTIONS" SERVING_ARGS...
    local name=$1 opts=$2; shift 2
    local t0=$SECONDS
    if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
    if [ $((BUDGET_S - SECONDS)) -lt 45 ]; then echo "!! $name skipped: budget nearly spent"; return; fi
    echo "== $name: nsys profile $opts $PY $*"
    # shellcheck disable=SC2086
    timeout 150 "$NSYS" profile $opts --sample=none --cpuctxsw=none \
        -o "$W/rep/$name" --force-overwrite=true $PY "$@" || echo "!! $name: nsys profile rc=$?"
    if [ -f "$W/rep/$name.nsys-rep" ]; then
        timeout 90 "$NSYS" export --type sqlite --force-overwrite=true -o "$W/sqlite/$name.sqlite" \
            "$W/rep/$name.nsys-rep" >/dev/null || echo "!! $name: nsys export rc=$?"
    fi
    if [ -f "$W/sqlite/$name.sqlite" ]; then
        python3 sample_traces/generate/scrub.py "$W/sqlite/$name.sqlite"
        xz -T16 -9 -k -f "$W/sqlite/$name.sqlite" && mv -f "$W/sqlite/$name.sqlite.xz" "$W/xz/"
        ls -l "$W/sqlite/$name.sqlite" "$W/xz/$name.sqlite.xz"
        counts "$W/sqlite/$name.sqlite"
    else
        echo "!! $name: no sqlite"
    fi
    echo "== $name: $((SECONDS - t0)) s (elapsed $SECONDS s)"
}

counts() {
    python3 - "$1" <<'EOF'
import sqlite3, sys, os
f = sys.argv[1]
c = sqlite3.connect(f)
tabs = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
n = lambda t: c.execute(f"select count(*) from {t}").fetchone()[0] if t in tabs else None
print(os.path.basename(f), os.path.getsize(f), "kernels", n("CUPTI_ACTIVITY_KIND_KERNEL"),
      "runtime", n("CUPTI_ACTIVITY_KIND_RUNTIME"), "nvtx", n("NVTX_EVENTS"), "osrt", n("OSRT_API"))
if "NVTX_EVENTS" in tabs:
    s = dict(c.execute("select id, value from StringIds"))
    rows = c.execute("select coalesce(domainId, 0), globalTid, eventType, count(*) from NVTX_EVENTS group by 1, 2, 3").fetchall()
    for r in rows:
        print("  nvtx domain", r[0], "tid", r[1] & 0xFFFFFF, "eventType", r[2], "rows", r[3])
    doms = c.execute("select domainId, coalesce(text, '') from NVTX_EVENTS where eventType = 75").fetchall()
    print("  domains created:", doms)
    top = c.execute("select coalesce(text, (select value from StringIds where id = textId)) as t, count(*) from NVTX_EVENTS "
                    "where eventType in (59, 60) group by t order by count(*) desc limit 12").fetchall()
    for t, k in top:
        print("   ", k, (t or "")[:110])
if "CUPTI_ACTIVITY_KIND_RUNTIME" in tabs:
    for tid, k in c.execute("select globalTid, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME group by 1"):
        print("  runtime calls tid", tid & 0xFFFFFF, k)
EOF
}

FLAGS="-t cuda,nvtx,osrt --cuda-graph-trace=node"
all() {
    local it=$1 ita=$2
    cap serving_vllm_scopes      "$FLAGS" --convention vllm_scopes --iterations "$it"
    cap serving_batch_names      "$FLAGS" --convention batch_names --iterations "$it"
    cap serving_sglang           "$FLAGS" --convention sglang --iterations "$it"
    cap serving_layerwise        "$FLAGS" --convention layerwise --iterations "$it"
    cap serving_two_threads      "$FLAGS" --convention two_threads --iterations "$it"
    cap serving_named_domain     "$FLAGS" --convention named_domain --iterations "$it"
    cap serving_layerwise_hooks  "$FLAGS" --convention layerwise_hooks --iterations "$it"
    # nsys's own PyTorch annotation (an NVTX range per aten op) over the batch_names loop
    cap serving_autograd_nvtx    "$FLAGS --pytorch=autograd-nvtx" --convention batch_names --iterations "$ita"
}
all "$ITER" "$ITER_AUTOGRAD"

# Too big compressed: once more with half the iterations, if time allows.
big=""
for f in "$W"/xz/*.sqlite.xz; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt 5000000 ]; then
        b=$(basename "$f" .sqlite.xz); big="$big $b"; mv "$f" "$W/xz/$b.over5MB.sqlite.xz"
    fi
done
if [ -n "$big" ]; then
    echo "== over 5 MB compressed:$big; again with half the iterations"
    ONLY="$big" all $((ITER / 2)) $((ITER_AUTOGRAD / 2))
fi

(cd "$W/xz" && tar cf "$OUT/serving_corpus.tar" ./*.sqlite.xz) && tar tvf "$OUT/serving_corpus.tar"
ls -l "$OUT"
echo "== done in $SECONDS s"
