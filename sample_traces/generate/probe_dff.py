#!/usr/bin/env python3
"""Pick the --d-ff of the diff's GPU regression (issue 42) on the machine that captures it.

    python3 sample_traces/generate/probe_dff.py [--share 0.08]

Times runahead.py's sync_graph loop (no profiler, no NVTX: its median step) and the graph
replay of its forward at several --d-ff (CUDA events over 100 back-to-back replays: GPU time
per forward), then prints the smallest --d-ff whose forward is slower than the default 4096's
by at least --share of the step, as the last line ``d_ff=N``; 8192 where none is.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import runahead  # noqa: E402
import specdecode  # noqa: E402

CANDIDATES = (4096, 4608, 5120, 5632, 6144, 6656, 7168, 8192)


def gpu_ms(d_ff, dev):
    args = runahead.parse(["--scenario", "sync_graph", "--d-ff", str(d_ff)])
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
    ap.add_argument("--share", type=float, default=0.08)
    share = ap.parse_args().share
    dev = torch.device("cuda")
    torch.cuda.set_device(0)
    with torch.inference_mode():
        base, args, fwd = gpu_ms(4096, dev)
        args.steps, args.warmup = 60, 5
        wall, _ = runahead.run_sync(args, dev, fwd, specdecode.Nvtx(False))
        meas = sorted(wall[args.warmup :])
        step = meas[len(meas) // 2] * 1e3
        del fwd
        print(f"step {step:.3f} ms; forward at d_ff 4096: {base:.3f} ms GPU", flush=True)
        chosen = CANDIDATES[-1]
        for d in CANDIDATES[1:]:
            ms, _, fwd = gpu_ms(d, dev)
            del fwd
            torch.cuda.empty_cache()
            print(f"d_ff {d}: {ms:.3f} ms GPU, +{(ms - base) * 1e3:.1f} µs = "
                  f"{100 * (ms - base) / step:.1f} % of the step", flush=True)
            if ms - base >= share * step:
                chosen = d
                break
    print(f"d_ff={chosen}")


if __name__ == "__main__":
    main()
