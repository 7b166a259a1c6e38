"""Issue 40 probe: where a CUDA graph's first node starts within its cudaGraphLaunch call (node
trace), for graph variants launched onto an idle stream: a straight line of kernels, with a
memset or a device-to-device copy node, GEMVs, cuDNN and flash attention, a one-rank NCCL
all-reduce."""

import os
import sys
import time

import torch
import torch.nn.functional as F

torch.cuda.set_device(0)
dev = torch.device("cuda")
nvtx = torch.cuda.nvtx


def nccl():
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    return dist


def build(kind):
    x = torch.randn(4096, device=dev)
    w = torch.randn(1536, 1536, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, 1536, device=dev, dtype=torch.bfloat16)
    buf = torch.empty(1 << 20, device=dev)
    src = torch.randn(1 << 20, device=dev)
    q = torch.randn(1, 16, 64, 128, device=dev, dtype=torch.bfloat16)
    dist = nccl() if kind == "nccl" else None
    backend = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION"}.get(kind)

    def body():
        y = x
        if kind == "memset":
            buf.zero_()
        for i in range(300 if kind != "gemv" else 100):
            if kind == "gemv":
                v.copy_(torch.tanh(v @ w))
            else:
                y = y * 1.0001 + 0.5
            if i % 50 == 25:
                if kind == "memset_mid":
                    buf.zero_()
                elif kind == "copy_mid":
                    buf.copy_(src)
                elif kind == "nccl":
                    dist.all_reduce(y)
                elif backend:
                    from torch.nn.attention import SDPBackend, sdpa_kernel

                    with sdpa_kernel(getattr(SDPBackend, backend)):
                        q.copy_(F.scaled_dot_product_attention(q, q, q))
        return y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize()
    return g


kinds = sys.argv[1:] or [
    "plain", "memset", "memset_mid", "copy_mid", "gemv", "sdpa_cudnn", "sdpa_flash", "nccl",
]
graphs = {}
for k in kinds:
    try:
        graphs[k] = build(k)
    except Exception as e:  # a variant this machine cannot build is reported, the rest run
        print("skipped", k, type(e).__name__, str(e)[:200])
for k, g in graphs.items():
    nvtx.range_push(k)
    for _ in range(20):
        g.replay()
        torch.cuda.synchronize()
        time.sleep(0.001)
    nvtx.range_pop()
print("done", list(graphs))
