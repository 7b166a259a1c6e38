#!/bin/bash
# One nsys session per rank, as multi-node runs are captured: torchrun starts this wrapper
# once per rank (--no-python), and each copy profiles its own tp_decode.py process.
#
#   torchrun --master-addr 127.0.0.1 --master-port 29543 --nproc-per-node 2 --no-python \
#       bash sample_traces/generate/tp_rank_nsys.sh --mode eager --steps 20 --warmup 3
#
# writes ${TP_PERRANK_PREFIX}_rank$RANK.nsys-rep (default prefix /tmp/tp_perrank); every
# argument goes to tp_decode.py. Environment: NSYS (the nsys CLI), PYTHON (python3),
# TP_PERRANK_PREFIX. capture_tp.sh runs it as its third capture.
set -u
: "${RANK:?RANK is not set: run me under torchrun --no-python}"
here=$(cd "$(dirname "$0")" && pwd)
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
PYTHON=${PYTHON:-python3}
# NVLink multicast stays off (tp_decode.py sets these too)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "[tp_rank_nsys] rank $RANK/${WORLD_SIZE:-?} local ${LOCAL_RANK:-?} -> ${TP_PERRANK_PREFIX:-/tmp/tp_perrank}_rank$RANK"
exec "$NSYS" profile -t cuda,nvtx,osrt --osrt-threshold=100000 --sample=none --cpuctxsw=none --cuda-graph-trace=node \
    -o "${TP_PERRANK_PREFIX:-/tmp/tp_perrank}_rank$RANK" --force-overwrite=true \
    "$PYTHON" "$here/tp_decode.py" "$@"
