#!/bin/bash
# The large trace (~1M kernels): spec_eager for 1,700 steps, node-level graph tracing.
# Not committed to git; it lives in /work/main/.large/ (ignored via .git/info/exclude).
#
# On the GPU machine, from the repo root, with .nsys-libs carried along:
#   bash sample_traces/generate/make_large.sh DEST         (e.g. DEST=$OUT)
# writes DEST/spec_eager_large.sqlite.xz.part-aa, -ab, ... (xz -9, 15 MiB parts) and
# DEST/spec_eager_large.txt (row counts, sha256 of the .sqlite).
# Back here:
#   cat .large/spec_eager_large.sqlite.xz.part-* | xz -d > .large/spec_eager_large.sqlite
#
# Environment: LARGE_STEPS (1700), LARGE_SCENARIO (spec_eager), NSYS, LARGE_NO_XZ.
set -u
cd "$(dirname "$0")/../.."
DEST=${1:?usage: make_large.sh DEST}
ROOT=$PWD
export LD_LIBRARY_PATH=$ROOT/.nsys-libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
STEPS=${LARGE_STEPS:-1700}
SCEN=${LARGE_SCENARIO:-spec_eager}
NAME=${SCEN}_large
T=/tmp/tg_large
rm -rf "$T"; mkdir -p "$T" "$DEST"
t0=$SECONDS
echo "== $NAME: nsys profile --cuda-graph-trace=node specdecode.py --scenario $SCEN --steps $STEPS --warmup 3"
timeout 400 "$NSYS" profile -t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-graph-trace=node \
    -o "$T/$NAME" --force-overwrite=true \
    python3 sample_traces/generate/specdecode.py --scenario "$SCEN" --steps "$STEPS" --warmup 3 \
    || echo "!! profile rc=$?"
echo "== profiled in $((SECONDS - t0)) s"
"$NSYS" export --type sqlite --force-overwrite=true -o "$T/$NAME.sqlite" "$T/$NAME.nsys-rep" || echo "!! export rc=$?"
echo "== exported at $((SECONDS - t0)) s"
ls -l "$T"
python3 - "$T/$NAME.sqlite" > "$DEST/$NAME.txt" <<'EOF'
import hashlib, os, sqlite3, sys
f = sys.argv[1]
c = sqlite3.connect(f)
print("file", os.path.basename(f), "bytes", os.path.getsize(f))
h = hashlib.sha256()
with open(f, "rb") as fh:
    for b in iter(lambda: fh.read(1 << 20), b""):
        h.update(b)
print("sha256", h.hexdigest())
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API"):
    try:
        print(t, c.execute(f"select count(*) from {t}").fetchone()[0])
    except sqlite3.Error as e:
        print(t, "missing", e)
EOF
cat "$DEST/$NAME.txt"
# LARGE_NO_XZ=1: keep only the export in /tmp/tg_large (a benchmark on the same machine).
[ -n "${LARGE_NO_XZ:-}" ] && exit 0
if command -v xz >/dev/null; then
    xz -T16 -9 --block-size=24MiB -c "$T/$NAME.sqlite" > "$T/$NAME.sqlite.xz"
else
    python3 - "$T/$NAME.sqlite" "$T/$NAME.sqlite.xz" <<'EOF'
import lzma, sys
from concurrent.futures import ProcessPoolExecutor
def comp(b): return lzma.compress(b, preset=9)
data = open(sys.argv[1], "rb").read()
chunks = [data[i:i + (24 << 20)] for i in range(0, len(data), 24 << 20)]
with ProcessPoolExecutor(16) as ex, open(sys.argv[2], "wb") as out:
    for z in ex.map(comp, chunks):
        out.write(z)   # concatenated .xz streams: xz -d reads them as one file
EOF
fi
echo "== compressed at $((SECONDS - t0)) s"
ls -l "$T/$NAME.sqlite.xz"
split -b 15m "$T/$NAME.sqlite.xz" "$DEST/$NAME.sqlite.xz.part-"
ls -l "$DEST"
