#!/bin/bash
# A stand-in for the nsys CLI, for dry runs of capture_tp.sh on a machine without a GPU or
# nsys (see capture_tp.sh's header). Not used on the GPU machine.
#
#   fake_nsys.sh --version
#   fake_nsys.sh profile [-t X] [--opt=value ...] -o PREFIX [--force-overwrite=true] CMD...
#       runs CMD as is; if it exits 0, writes PREFIX.nsys-rep (the command line, as text)
#   fake_nsys.sh export --type sqlite [--force-overwrite=true] -o OUT.sqlite REP
#       writes a small SQLite file with the tables capture_tp.sh's summary reads, plus
#       FAKE_BYTES_PER_STEP bytes (default 0) for every step named by --steps in REP, so
#       that the size limit and the retry with fewer steps can be exercised
set -u
cmd=${1:-}
shift || true
case "$cmd" in
--version)
    echo "fake nsys (capture_tp.sh dry run)"
    ;;
profile)
    out=
    while [ $# -gt 0 ]; do
        case "$1" in
        -o) out=$2; shift 2 ;;
        -t) shift 2 ;;
        -*) shift ;;
        *) break ;;
        esac
    done
    [ -n "$out" ] || { echo "fake nsys: profile without -o" >&2; exit 2; }
    echo "[fake nsys] profile -> $out.nsys-rep: $*"
    "$@"
    rc=$?
    if [ $rc -eq 0 ]; then printf '%s\n' "$*" > "$out.nsys-rep"; fi
    exit $rc
    ;;
export)
    out=
    while [ $# -gt 1 ]; do
        case "$1" in
        -o) out=$2; shift 2 ;;
        --type) shift 2 ;;
        *) shift ;;
        esac
    done
    rep=${1:-}
    [ -n "$out" ] && [ -f "$rep" ] || { echo "fake nsys: export needs -o OUT and a report" >&2; exit 2; }
    python3 - "$out" "$rep" "${FAKE_BYTES_PER_STEP:-0}" <<'EOF'
import os, re, sqlite3, sys
out, rep, per_step = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = re.search(r"--steps (\d+)", open(rep).read())
steps = int(m.group(1)) if m else 0
if os.path.exists(out):
    os.remove(out)
c = sqlite3.connect(out)
c.executescript("""
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (globalPid INTEGER, shortName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (globalTid INTEGER);
CREATE TABLE NVTX_EVENTS (globalTid INTEGER, text TEXT);
CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
CREATE TABLE FAKE_PADDING (b BLOB);
INSERT INTO StringIds VALUES (1, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'), (2, 'gemv');
INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_1:ENVIRONMENT_VARIABLE', 'SECRET=1');
""")
pid = 4242 << 24  # nsys: globalPid = pid << 24 (upper bits: machine)
c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?)", [(pid, 1), (pid, 2)])
c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?)", (pid | 4243,))
if per_step * steps:
    c.execute("INSERT INTO FAKE_PADDING VALUES (randomblob(?))", (per_step * steps,))
c.commit()
c.close()
print(f"[fake nsys] export -> {out} ({steps} steps)")
EOF
    ;;
*)
    echo "fake nsys: unknown command '$cmd'" >&2
    exit 2
    ;;
esac
