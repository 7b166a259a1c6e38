#!/usr/bin/env python3
"""Decode loops shaped like production serving engines, for the what-if pairs (issue 40)
and the diff's drift measurement (issue 42).

The model is specdecode.py's target (random weights, bf16, static KV cache). Every loop's
step is one NVTX range ``step``; the stages differ by scenario (``--scenario``)::

    ra_eager        run-ahead loop (vLLM V1's async scheduling, SGLang's overlap scheduler):
                    schedule (host work), forward (eager), sample (argmax on the GPU, the
                    token copied to pinned memory without blocking, an event recorded),
                    process_output (waits for the *previous* step's event, then host work
                    for its token). The next token is fed from the GPU: no host round trip.
    ra_graph        ra_eager with the forward replayed from a CUDA graph captured before the
                    loop: the host runs ahead and the GPU sets the pace.
    ra_sync         ra_eager plus a blocking ``.item()`` of the token in sample: the loop no
                    longer runs ahead (the "before" of removing that sync; after: ra_eager).
    ra_graph_detok  ra_graph with --detok-ms (default 1.5) of host work in process_output:
                    a run-ahead loop paced by its host (after: ra_graph).
    wt_eager        continuous-batching shape with a worker thread: the scheduler thread holds
                    ``step`` > schedule, wait_for_worker, process_output; the worker thread
                    launches the forward under its own ranges ``forward_decode`` and
                    ``sample`` (SGLang's overlap scheduler works so); eager forward.
    wt_graph        wt_eager with the worker's forward replayed from a CUDA graph.
    sync_eager      a synchronous loop (schedule, forward, sample with ``.item()``,
                    process_output); --extra-host-ms adds a CPU stage ``postprocess`` of
                    that length (a host regression).
    sync_graph      sync_eager with the forward replayed from a CUDA graph: the diff's
                    repeats; a larger --d-ff is a GPU regression (the MLP's kernels slower).

``--forward-repeat 2`` runs the forward twice a step (the graph captures both): a redundant
recompute, the "before" of a pair whose after does the GPU work once (``forward=gpu50``).

``--dtype float32`` (default bfloat16) doubles the bytes every forward reads (weights and KV
cache): the "before" of a pair whose after moves half the bytes (issue 41).

``--device cpu`` runs the same Python logic on the CPU (no NVTX, no graphs) as a dry run.
"""

import argparse
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import specdecode  # noqa: E402

SCENARIOS = (
    "ra_eager",
    "ra_graph",
    "ra_sync",
    "ra_graph_detok",
    "wt_eager",
    "wt_graph",
    "sync_eager",
    "sync_graph",
)
NEG_INF = float("-inf")


def host_work(seconds):
    """Pure-Python host work of about this long (no CUDA call): a scheduler or detokenizer."""
    end = time.perf_counter() + seconds
    acc = []
    while time.perf_counter() < end:
        acc.append(len(str(acc[-8:])))
    return len(acc)


class Forward:
    """The target's one-token forward: eager over [0, kv_len), or a CUDA graph over all
    --max-len slots with an additive mask (fixed shapes), as specdecode's plain_graph."""

    def __init__(self, args, device, dtype, graph):
        gen = torch.Generator(device=device).manual_seed(args.seed)
        self.t = specdecode.make_target(args, device, dtype, gen)
        self.S = args.max_len
        self.repeat = args.forward_repeat
        self.graph = None
        if graph and device.type == "cuda":
            S = self.S
            self.g_tok = torch.zeros(1, dtype=torch.long, device=device)
            self.g_pos = torch.zeros(1, dtype=torch.long, device=device)
            self.g_mask = torch.zeros(1, 1, 1, S, dtype=dtype, device=device)
            self.slots = torch.arange(S, device=device)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.t.forward(self.g_tok, self.g_pos, self.g_pos, S, self.g_mask)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                for _ in range(self.repeat):
                    self.g_out = self.t.forward(self.g_tok, self.g_pos, self.g_pos, S, self.g_mask)
            torch.cuda.synchronize()

    def __call__(self, tok, cur):
        device = tok.device
        pos = torch.full((1,), cur, dtype=torch.long, device=device)
        if self.graph is not None:
            self.g_tok.copy_(tok)
            self.g_pos.copy_(pos)
            self.g_mask.copy_(torch.where(self.slots <= cur, 0.0, NEG_INF).view(1, 1, 1, self.S))
            self.graph.replay()
            logits = self.g_out
        else:
            for _ in range(self.repeat):
                logits = self.t.forward(tok, pos, pos, cur + 1)
        return logits


def run_ahead(args, device, fwd, nv):
    """ra_*: the host enqueues step N+1 while the GPU runs step N."""
    cuda = device.type == "cuda"
    S, cur = args.max_len, args.prompt_len
    tok = torch.ones(1, dtype=torch.long, device=device)
    host_tok = [torch.zeros(1, dtype=torch.long, pin_memory=cuda) for _ in range(2)]
    events = [torch.cuda.Event() if cuda else None for _ in range(2)]
    pending, out, wall = None, [], []
    detok = args.detok_ms * 1e-3
    if cuda:
        torch.cuda.synchronize()
    for step in range(args.warmup + args.steps):
        if cur + 1 > S:
            cur = args.prompt_len
        t0 = time.perf_counter()
        nv.push("step")
        nv.push("schedule")
        host_work(args.schedule_ms * 1e-3)
        nv.pop()
        nv.push("forward")
        logits = fwd(tok, cur)
        nv.pop()
        nv.push("sample")
        tok = torch.argmax(logits[0].float(), dim=-1, keepdim=True)
        slot = step % 2
        host_tok[slot].copy_(tok, non_blocking=True)
        if cuda:
            events[slot].record()
        if args.scenario == "ra_sync":
            out.append(int(tok.item()))  # the blocking read the run-ahead loop avoids
        nv.pop()
        nv.push("process_output")
        if pending is not None:
            if cuda:
                events[pending].synchronize()  # the previous step's token, not this one's
            out.append(int(host_tok[pending][0]))
            host_work(detok)
        nv.pop()
        pending = slot
        cur += 1
        nv.pop()
        wall.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
    return wall, len(out)


def run_sync(args, device, fwd, nv):
    """sync_eager: every step waits for its own token (.item()) before the next."""
    cuda = device.type == "cuda"
    S, cur = args.max_len, args.prompt_len
    tok = torch.ones(1, dtype=torch.long, device=device)
    out, wall = [], []
    if cuda:
        torch.cuda.synchronize()
    for _ in range(args.warmup + args.steps):
        if cur + 1 > S:
            cur = args.prompt_len
        t0 = time.perf_counter()
        nv.push("step")
        nv.push("schedule")
        host_work(args.schedule_ms * 1e-3)
        nv.pop()
        nv.push("forward")
        logits = fwd(tok, cur)
        nv.pop()
        nv.push("sample")
        tok = torch.argmax(logits[0].float(), dim=-1, keepdim=True)
        out.append(int(tok.item()))
        nv.pop()
        nv.push("process_output")
        host_work(args.detok_ms * 1e-3)
        nv.pop()
        if args.extra_host_ms > 0:  # --extra-host-ms: the CPU regression
            nv.push("postprocess")
            host_work(args.extra_host_ms * 1e-3)
            nv.pop()
        cur += 1
        nv.pop()
        wall.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
    return wall, len(out)


def run_worker(args, device, fwd, nv):
    """wt_*: the scheduler thread holds the step; a worker thread launches the forward under
    its own NVTX ranges and hands the token back through a queue."""
    cuda = device.type == "cuda"
    S = args.max_len
    jobs, done = queue.Queue(), queue.Queue()

    def worker():
        try:
            with torch.inference_mode():  # thread-local: the worker needs its own
                work()
        except BaseException as error:  # the scheduler waits on `done`: hand it the error
            done.put(error)
            raise

    def work():
        tok = torch.ones(1, dtype=torch.long, device=device)
        if cuda:
            torch.cuda.set_device(0)
        while True:
            cur = jobs.get()
            if cur is None:
                return
            nv.push("forward_decode")
            logits = fwd(tok, cur)
            nv.pop()
            nv.push("sample")
            tok = torch.argmax(logits[0].float(), dim=-1, keepdim=True)
            done.put(int(tok.item()))
            nv.pop()

    thread = threading.Thread(target=worker, name="tp_worker", daemon=True)
    thread.start()
    cur, out, wall = args.prompt_len, [], []
    if cuda:
        torch.cuda.synchronize()
    for _ in range(args.warmup + args.steps):
        if cur + 1 > S:
            cur = args.prompt_len
        t0 = time.perf_counter()
        nv.push("step")
        nv.push("schedule")
        host_work(args.schedule_ms * 1e-3)
        nv.pop()
        nv.push("wait_for_worker")
        jobs.put(cur)
        token = done.get()
        if isinstance(token, BaseException):
            raise RuntimeError("the worker thread failed") from token
        nv.pop()
        nv.push("process_output")
        out.append(token)
        host_work(args.detok_ms * 1e-3)
        nv.pop()
        cur += 1
        nv.pop()
        wall.append(time.perf_counter() - t0)
    jobs.put(None)
    thread.join()
    if cuda:
        torch.cuda.synchronize()
    return wall, len(out)


def parse(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenario", choices=SCENARIOS, default="ra_eager")
    ap.add_argument("--steps", type=int, default=24, help="measured steps (after warm-up)")
    ap.add_argument("--warmup", type=int, default=4, help="warm-up steps (traced too)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=1536)
    ap.add_argument("--n-heads", type=int, default=12)
    ap.add_argument("--d-ff", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-len", type=int, default=576, help="KV cache slots")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--schedule-ms", type=float, default=0.2, help="host work in schedule")
    ap.add_argument(
        "--detok-ms",
        type=float,
        default=None,
        help="host work in process_output (0.2; 1.5 in ra_graph_detok)",
    )
    ap.add_argument(
        "--forward-repeat", type=int, default=1, help="forwards a step (2: a redundant recompute)"
    )
    ap.add_argument("--extra-host-ms", type=float, default=0.0, help="sync_*: a CPU stage")
    ap.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        default="bfloat16",
        help="weights, KV cache and activations on the GPU (float32 moves twice the bytes)",
    )
    ap.add_argument(
        "--profiler-range",
        action="store_true",
        help="call cudaProfilerStart/Stop around the loop (nsys --capture-range=cudaProfilerApi)",
    )
    a = ap.parse_args(argv)
    if a.detok_ms is None:
        a.detok_ms = 1.5 if a.scenario == "ra_graph_detok" else 0.2
    # specdecode.make_target reads these
    a.layer_scale, a.sdpa = 6.0, "pinned"
    return a


def main(argv=None):
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    dtype = getattr(torch, args.dtype) if device.type == "cuda" else torch.float32
    nv = specdecode.Nvtx(device.type == "cuda")
    torch.manual_seed(args.seed)
    graph = args.scenario in ("ra_graph", "ra_graph_detok", "wt_graph", "sync_graph")
    ranged = args.profiler_range and device.type == "cuda"
    with torch.inference_mode():
        fwd = Forward(args, device, dtype, graph)
        if ranged:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        if args.scenario.startswith("ra_"):
            wall, n = run_ahead(args, device, fwd, nv)
        elif args.scenario.startswith("wt_"):
            wall, n = run_worker(args, device, fwd, nv)
        else:
            wall, n = run_sync(args, device, fwd, nv)
        if ranged:
            torch.cuda.profiler.stop()
    meas = sorted(wall[args.warmup :]) or [float("nan")]
    print(
        f"[{args.scenario}] steps={len(wall)} warmup={args.warmup} "
        f"measured_median_ms={meas[len(meas) // 2] * 1e3:.3f} mean_ms="
        f"{sum(meas) / len(meas) * 1e3:.3f} tokens={n} extra_host_ms={args.extra_host_ms} "
        f"d_ff={args.d_ff} dtype={args.dtype} pid={os.getpid()}",
        flush=True,
    )


if __name__ == "__main__":
    main()
