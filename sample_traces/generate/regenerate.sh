#!/bin/bash
# Redo every sample trace from scratch. Three steps:
#
# 1. here, once (the importer of nsys needs libdw/libelf, which the GPU image lacks):
#      bash sample_traces/generate/regenerate.sh setup
# 2. on the GPU machine, in one device call (command, carry [".nsys-libs"], timeout 600 s):
#      bash sample_traces/generate/regenerate.sh device
#    = capture.sh: ten nsys captures + exports + nsys stats, then the large trace if the
#    10-minute budget allows (~4 min in all when it ran); everything lands in $OUT.
#    If the large trace was skipped: a second call with `bash sample_traces/generate/make_large.sh $OUT`.
# 3. here, with the folder the device call brought back (the tool's files_at):
#      bash sample_traces/generate/regenerate.sh install /work/.device/N
#    unpacks small.tar.xz, copies the nine committed exports into sample_traces/, the nsys
#    stats CSVs into sample_traces/nsys_stats/, spec_graph_bypassed into
#    trace_gaps/data/demo.sqlite, reassembles the large trace into .large/, and prints the
#    measured facts (measure.py) that sample_traces/README.md quotes.
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMITTED="spec_eager spec_graph_node spec_graph_graphmode spec_graph_bypassed spec_sync
           spec_longctx_draft spec_two_ranks plain_decode spec_sdpa_recompile"
case "${1:-}" in
setup)
    bash ../shared/nsys/fetch-libs.sh .nsys-libs
    for p in /.nsys-libs/ /.large/; do grep -qxF "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
    ;;
device)
    bash sample_traces/generate/capture.sh
    ;;
install)
    src=${2:?usage: regenerate.sh install FOLDER}
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    if ls "$src"/small.tar.xz.part-* >/dev/null 2>&1; then cat "$src"/small.tar.xz.part-* > "$tmp/small.tar.xz"
    else cp "$src/small.tar.xz" "$tmp/"; fi
    tar -C "$tmp" -xJf "$tmp/small.tar.xz"
    mkdir -p sample_traces/nsys_stats .large trace_gaps/data
    for n in $COMMITTED; do cp "$tmp/sqlite/$n.sqlite" sample_traces/; done
    cp "$tmp"/sqlite/*.sqlite .large/ 2>/dev/null || true     # every export, the uncommitted one too
    cp "$tmp"/stats/*.csv "$tmp"/stats/help-reports.txt sample_traces/nsys_stats/
    python3 sample_traces/generate/scrub.py sample_traces/*.sqlite
    cp sample_traces/spec_graph_bypassed.sqlite trace_gaps/data/demo.sqlite
    cp "$src/capture.log" .large/ 2>/dev/null || true
    if ls "$src"/spec_eager_large.sqlite.xz.part-* >/dev/null 2>&1; then
        cat "$src"/spec_eager_large.sqlite.xz.part-* > .large/spec_eager_large.sqlite.xz
        xz -dkcT0 .large/spec_eager_large.sqlite.xz > .large/spec_eager_large.sqlite
        cp "$src/spec_eager_large.txt" .large/
        sha256sum .large/spec_eager_large.sqlite
    fi
    du -cb sample_traces/*.sqlite | tail -1
    python3 sample_traces/generate/measure.py --md sample_traces/*.sqlite
    ;;
*)
    sed -n '2,18p' "$0"; exit 2
    ;;
esac
