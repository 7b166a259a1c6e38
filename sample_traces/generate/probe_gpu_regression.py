#!/usr/bin/env python3
"""Pick the size of the diff's GPU regression (issue 42) on the machine that captures it.

    python3 sample_traces/generate/probe_gpu_regression.py [--share 0.12]

Times runahead.py's sync_graph loop (no profiler, no NVTX: its median step) and the graph
replay of its forward (CUDA events over 100 back-to-back replays: GPU time per forward) with
more KV cache slots (--max-len: the graph's attention reads every slot, so only the attention
kernels slow down; no kernel is added or removed), then with a wider MLP (--d-ff), and prints
the first setting whose forward is slower than the default's by at least --share of the
step, as the last line ``ARGS=--flag N`` (the largest --max-len tried where none is).
A step under nsys is about 1.6x the unprofiled one (H200, sync_graph): --share 0.12 aims at
a regression of about 7 % of the captured step.

On an H200 (first device call, d_ff only): 4096 -> 8192 added 76 µs per forward (0.856 ->
0.932 ms), 5.5 % of the unprofiled step and 3.7 % of the captured one: the forward's GEMVs
are far from the memory bandwidth and barely slow down as they grow.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import runahead  # noqa: E402
import specdecode  # noqa: E402

CANDIDATES = [("--max-len", n) for n in (1024, 1536, 2048, 3072, 4096, 6144, 8192)] + [
    ("--d-ff", n) for n in (8192, 12288, 16384)
]


def gpu_ms(extra, dev):
    args = runahead.parse(["--scenario", "sync_graph", *extra])
    fwd = runahead.Forward(args, dev, torch.bfloat16, graph=True)
    tok = torch.ones(1, dtype=torch.long, device=dev)
    for _ in range(10):
        fwd(tok, args.prompt_len)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(100):
        fwd(tok, args.prompt_len)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 100, args, fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--share", type=float, default=0.12)
    share = ap.parse_args().share
    dev = torch.device("cuda")
    torch.cuda.set_device(0)
    with torch.inference_mode():
        base, args, fwd = gpu_ms([], dev)
        args.steps, args.warmup = 60, 5
        wall, _ = runahead.run_sync(args, dev, fwd, specdecode.Nvtx(False))
        meas = sorted(wall[args.warmup :])
        step = meas[len(meas) // 2] * 1e3
        del fwd
        print(f"step {step:.3f} ms; forward {base:.3f} ms GPU", flush=True)
        chosen = ("--max-len", 8192)
        for flag, n in CANDIDATES:
            ms, _, fwd = gpu_ms([flag, str(n)], dev)
            del fwd
            torch.cuda.empty_cache()
            print(f"{flag} {n}: {ms:.3f} ms GPU, +{(ms - base) * 1e3:.1f} µs = "
                  f"{100 * (ms - base) / step:.1f} % of the step", flush=True)
            if ms - base >= share * step:
                chosen = (flag, n)
                break
    print(f"ARGS={chosen[0]} {chosen[1]}")


if __name__ == "__main__":
    main()
