"""Issue 40 probe (not yet run on a GPU): where a CUDA graph's first node starts within its
cudaGraphLaunch call (node trace), for graph variants launched onto an idle stream."""

import sys
import time

import torch

torch.cuda.set_device(0)
dev = torch.device("cuda")
nvtx = torch.cuda.nvtx


def build(kind):
    x = torch.randn(4096, device=dev)
    w = torch.randn(1536, 1536, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, 1536, device=dev, dtype=torch.bfloat16)
    buf = torch.empty(1 << 20, device=dev)

    def body():
        y = x
        if kind == "memset":
            buf.zero_()
        for i in range(300 if kind != "gemv" else 100):
            if kind == "gemv":
                v.copy_(torch.tanh(v @ w))
            else:
                y = y * 1.0001 + 0.5
            if kind == "memset_mid" and i == 150:
                buf.zero_()
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


kinds = sys.argv[1:] or ["plain", "memset", "memset_mid", "gemv"]
graphs = {k: build(k) for k in kinds}
for k, g in graphs.items():
    nvtx.range_push(k)
    for _ in range(20):
        g.replay()
        torch.cuda.synchronize()
        time.sleep(0.001)
    nvtx.range_pop()
print("done", kinds)
