#!/bin/bash
# Issue 34's figures on a many-core host (the GPU machine's 16 cores), whole process.
#
#   bash benchmarks/cores.sh big|many|process        (from the repository root)
#
# 1. One ~10M-kernel export: sample_traces/spec_eager.sqlite inflated x1030 (inflate.py),
#    `analyze` with --jobs 1 2 4 8 16 (bench_jobs.py: median wall, speed-up, peak RSS), and
#    every run's JSON report compared with the first's (must be identical).
# 2. Eight exports of one run (~1M kernels each, the sample inflated x100, copied 8 times):
#    serial against --jobs 8 on a local Dask cluster (bench_many.py), JSON compared.
# 3. process: whole commands as a user times them (bench_process.py) on the real ~1M-kernel
#    capture (LARGE=path, else its xz parts in .large/parts/, else captured here with
#    sample_traces/generate/make_large.sh) and on it inflated x10: analyze against the read floors, report, plot
#    and diff against analyze (PAIRS pairs, default 3).
# Needs the [fast] and [dask] extras importable (on the GPU machine: carried wheels).
set -u
PART=${1:?usage: cores.sh big|many|process}
T=${TG_CORES_TMP:-/tmp/tg-cores-work}
RUNS=${RUNS:-1}
JOBS=${JOBS:-1 2 4 8 16}
mkdir -p "$T"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "== host: $(nproc) cores, $(python3 -V 2>&1), $(python3 -c 'import pandas, numpy, pyarrow; print("pandas", pandas.__version__, "numpy", numpy.__version__, "pyarrow", pyarrow.__version__)')"
python3 -c 'import trace_gaps; print("trace_gaps", trace_gaps.__version__, trace_gaps.__file__)'
python3 -c "import adbc_driver_sqlite, dask.distributed; print(\"Arrow reader (adbc) and dask importable\")"
big() {
t0=$SECONDS
python3 benchmarks/inflate.py sample_traces/spec_eager.sqlite --factor 1030 -o "$T/big10m.sqlite"
echo "== inflated x1030 in $((SECONDS - t0)) s"
python3 benchmarks/bench_jobs.py "$T/big10m.sqlite" --jobs $JOBS --runs "$RUNS" --compare "$T/big-json"
}

many() {
t0=$SECONDS
python3 benchmarks/inflate.py sample_traces/spec_eager.sqlite --factor 100 -o "$T/rank0.sqlite"
# Eight ranks of one run: copies, each with its own session start (a copy with the same one
# is the same export, refused).
for r in 1 2 3 4 5 6 7; do
  cp "$T/rank0.sqlite" "$T/rank$r.sqlite"
  python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?', (int(sys.argv[2]),)); c.commit()" "$T/rank$r.sqlite" "$r"
done
echo "== 8 exports made in $((SECONDS - t0)) s"
python3 benchmarks/bench_many.py "$T"/rank?.sqlite --jobs 8 --repeat "$RUNS"
python3 -m trace_gaps analyze -f json "$T"/rank?.sqlite > "$T/many_serial.json" || echo "!! serial failed"
python3 -m trace_gaps analyze -f json --jobs 8 "$T"/rank?.sqlite > "$T/many_j8.json" || echo "!! --jobs 8 failed"
cmp "$T/many_serial.json" "$T/many_j8.json" && echo "== 8 exports: JSON of serial and --jobs 8 identical"
}

process() {
L=${LARGE:-$T/spec_eager_large.sqlite}
if [ ! -f "$L" ] && ls .large/parts/spec_eager_large.sqlite.xz.part-* >/dev/null 2>&1; then
  cat .large/parts/spec_eager_large.sqlite.xz.part-* | xz -d -T0 > "$L"
elif [ ! -f "$L" ]; then  # captured here (GPU machine): ~80 s
  LARGE_NO_XZ=1 bash sample_traces/generate/make_large.sh "$T/large-made" > "$T/make_large.log" 2>&1
  L=/tmp/tg_large/spec_eager_large.sqlite
  cat "$T/large-made/spec_eager_large.txt" || { echo "!! no large capture"; return 1; }
fi
t0=$SECONDS
python3 benchmarks/inflate.py "$L" --factor 10 -o "$T/large_x10.sqlite"
echo "== inflated x10 in $((SECONDS - t0)) s"
python3 benchmarks/bench_process.py "$L" --pairs "${PAIRS:-3}"
python3 benchmarks/bench_process.py "$T/large_x10.sqlite" --pairs "${PAIRS_X10:-2}" --commands analyze
python3 benchmarks/bench_process.py "$T/large_x10.sqlite" --pairs 1 --commands "analyze sqlite3"
}

"$PART"
