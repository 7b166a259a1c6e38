#!/usr/bin/env python3
"""A continuous-batching server loop, annotated the way serving engines annotate, for the
serving corpus of trace-gaps (issue 27).

Requests arrive over time (a fixed, seeded arrival schedule counted in scheduler ticks).
Each iteration the scheduler -- plain Python with real CPU work: block allocation, a
prefix-cache hash chain over every active request's tokens, incremental detokenization --
picks either a prefill of one newly arrived prompt (128-512 tokens) or a decode of every
active request (batch 1..8 as requests arrive and finish). The model is a small decoder with
random bf16 weights (4 layers, d_model 1024, 16 heads, SwiGLU d_ff 2816, vocab 32000; nothing
downloaded) and a simple per-request KV cache (one tensor per request and layer, attention
run request by request, as naive servers do). The first ``--warmup`` iterations serve a
dummy request (one prefill of 128 tokens, then decodes) and are annotated like the rest.

NVTX conventions (``--convention``), with the engines' public range names::

    vllm_scopes      vLLM V1 with VLLM_NVTX_SCOPES_FOR_PROFILING=1: sibling ranges
                     "gpu_model_runner: preprocess", "gpu_model_runner: forward",
                     "gpu_model_runner: postprocess" (logits), "gpu_model_runner: sample";
                     NO range around the iteration; scheduling and output processing between
                     them are not annotated
    batch_names      one range per iteration carrying the batch,
                     "step[DECODE bs=4 tokens=4]" / "step[PREFILL bs=1 tokens=512]", with
                     stages prepare_inputs, forward, sample, process_outputs
    sglang           SGLang-style: "run_batch" holding "forward_extend" (prefill) or
                     "forward_decode" (decode), then "sample" and "process_batch_result";
                     get_next_batch_to_run (the scheduler) not annotated
    layerwise        batch_names plus, inside forward, "model.layers.N" holding
                     "model.layers.N.self_attn" and "model.layers.N.mlp" (vLLM's module naming)
    layerwise_hooks  sglang plus SGLang's --enable-layerwise-nvtx-marker markers: a forward
                     pre-hook on every module pushes the repr of a dict
                     {'Module': 'model.model.layers.0.self_attn', 'Inputs': [[T, 1024]], ...}
                     (the hooks registered with module_prefix="model" on the causal LM), the
                     forward hook pops it and pushes/pops an output marker
    two_threads      the scheduler thread holds "scheduler_step" with stages schedule,
                     prepare_inputs, wait_for_forward, process_outputs; a second Python thread
                     (handed the batch through a queue) copies the inputs, runs the forward and
                     the sampler and launches all GPU work, with no ranges
    named_domain     batch_names with every range in the NVTX domain "llm_server" (not the
                     default domain): through the `nvtx` Python package if it imports, else
                     ctypes on a libnvToolsExt found on the machine
    none             no NVTX at all (for nsys --pytorch=autograd-nvtx, which adds its own)

``--device cpu`` runs the same Python logic without a GPU and without NVTX (float32);
``--dry-run`` prints the schedule (iterations per kind, batch sizes) without torch.
"""

import argparse
import contextlib
import ctypes
import glob
import hashlib
import math
import os
import queue
import random
import sys
import threading
import time

CONVENTIONS = (
    "vllm_scopes",
    "batch_names",
    "sglang",
    "layerwise",
    "layerwise_hooks",
    "two_threads",
    "named_domain",
    "none",
)
DOMAIN = "llm_server"
BLOCK = 16


# --------------------------------------------------------------------------------------------
# Requests and the scheduler (pure Python; no torch)


class Request:
    def __init__(self, rid, arrival, prompt_len, max_new, rng):
        self.rid = rid
        self.arrival = arrival
        self.prompt = [rng.randrange(32000) for _ in range(prompt_len)]
        self.max_new = max_new
        self.out = []
        self.blocks = []
        self.block_hashes = []
        self.text = ""
        self.cache = None  # per layer: tensor [2, heads, max_len, head_dim]

    @property
    def length(self):
        return len(self.prompt) + len(self.out)

    @property
    def max_len(self):
        return len(self.prompt) + self.max_new


class Plan:
    def __init__(self, kind, reqs):
        self.kind = kind  # "PREFILL" or "DECODE"
        self.reqs = reqs

    @property
    def tokens(self):
        return sum(r.length for r in self.reqs) if self.kind == "PREFILL" else len(self.reqs)

    def name(self):
        return f"step[{self.kind} bs={len(self.reqs)} tokens={self.tokens}]"


def arrival_schedule(seed, n_requests, mean_gap, prompt_lo=128, prompt_hi=512, new_lo=6, new_hi=28):
    rng = random.Random(seed)
    reqs, t = [], 0.0
    for rid in range(n_requests):
        reqs.append(
            Request(rid, int(t), rng.randint(prompt_lo, prompt_hi), rng.randint(new_lo, new_hi), rng)
        )
        t += rng.expovariate(1.0 / mean_gap)
    return reqs


class Scheduler:
    """Prefill first (one prompt per iteration) while a slot is free, else decode all."""

    def __init__(self, reqs, max_batch, num_blocks=8192, vocab=None):
        self.pending = sorted(reqs, key=lambda r: (r.arrival, r.rid))
        self.waiting, self.active, self.finished = [], [], []
        self.max_batch = max_batch
        self.free_blocks = list(range(num_blocks))
        self.tick = 0
        self.vocab = vocab or [f"t{i}" for i in range(32000)]
        self.prefix_cache = {}

    def idle(self):
        return not (self.pending or self.waiting or self.active)

    def admit(self):
        while self.pending and self.pending[0].arrival <= self.tick:
            self.waiting.append(self.pending.pop(0))

    def _hash_chain(self, r):
        """Block hashes of the request's full blocks (prefix caching), recomputed from the
        start every iteration: the host work of an unoptimised scheduler."""
        toks = r.prompt + r.out
        h, hashes = b"", []
        for i in range(0, len(toks) - BLOCK + 1, BLOCK):
            h = hashlib.sha256(h + repr(toks[i : i + BLOCK]).encode()).digest()
            hashes.append(h)
        r.block_hashes = hashes
        for hh in hashes[-2:]:
            self.prefix_cache[hh] = r.rid

    def _grow(self, r, n):
        need = math.ceil((r.length + n) / BLOCK) - len(r.blocks)
        for _ in range(max(0, need)):
            r.blocks.append(self.free_blocks.pop())

    def schedule(self):
        """The next batch, or None when nothing is ready (the clock then moves on)."""
        self.admit()
        while not self.waiting and not self.active and self.pending:
            self.tick = self.pending[0].arrival
            self.admit()
        if self.waiting and len(self.active) < self.max_batch:
            r = self.waiting.pop(0)
            self._grow(r, 0)
            self._hash_chain(r)
            plan = Plan("PREFILL", [r])
        elif self.active:
            for r in self.active:
                self._grow(r, 1)
                self._hash_chain(r)
            plan = Plan("DECODE", list(self.active))
        else:
            return None
        self.tick += 1
        return plan

    def update(self, plan, sampled):
        """Append the sampled tokens, detokenize, retire finished requests."""
        for r, t in zip(plan.reqs, sampled):
            r.out.append(int(t) % len(self.vocab))
            r.text = " ".join(self.vocab[x] for x in r.out)  # incremental detok, naively
        if plan.kind == "PREFILL":
            self.active.append(plan.reqs[0])
        done = [r for r in self.active if len(r.out) >= r.max_new]
        for r in done:
            self.active.remove(r)
            self.free_blocks.extend(r.blocks)
            r.blocks, r.cache = [], None
            self.finished.append(r)
        return done


def dry_run(args):
    reqs = arrival_schedule(args.seed, args.requests, args.mean_gap)
    s = Scheduler(reqs, args.max_batch)
    counts, bss, it = {"PREFILL": 0, "DECODE": 0}, [], 0
    while it < args.iterations and not s.idle():
        p = s.schedule()
        if p is None:
            break
        counts[p.kind] += 1
        if p.kind == "DECODE":
            bss.append(len(p.reqs))
        s.update(p, [1] * len(p.reqs))
        it += 1
    print(f"iterations {it}: {counts}; decode batch sizes {sorted(set(bss))}, mean {sum(bss) / max(1, len(bss)):.2f}; "
          f"finished {len(s.finished)} of {len(reqs)}; prompt lengths {[len(r.prompt) for r in reqs]}")


# --------------------------------------------------------------------------------------------
# NVTX


class Nvtx:
    """push/pop in the default domain (torch.cuda.nvtx) or in a named domain."""

    def __init__(self, enabled, domain=None):
        self.enabled = enabled
        self.push = self.pop = None
        self.backend = "off"
        if not enabled:
            return
        if domain is None:
            import torch

            self.push, self.pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
            self.backend = "torch.cuda.nvtx (default domain)"
            return
        try:
            import nvtx  # the `nvtx` Python package (NVTX 3, domains)

            if not nvtx.enabled():
                raise RuntimeError("nvtx.enabled() is False (no NVTX injection library loaded)")
            dom = nvtx.get_domain(DOMAIN)
            self.push = lambda name: nvtx.push_range(message=name, domain=DOMAIN)
            self.pop = lambda: nvtx.pop_range(domain=DOMAIN)
            self.backend = (
                f"nvtx {getattr(nvtx, '__version__', '?')} python package, domain {DOMAIN!r} ({dom}), "
                f"enabled={nvtx.enabled()}"
            )
            return
        except Exception as e:  # noqa: BLE001
            print(f"serving: `nvtx` package unusable ({e!r}); trying ctypes", file=sys.stderr)
        self._ctypes_domain()

    def _ctypes_domain(self):
        import torch

        cands = glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libnvToolsExt*.so*"))
        for d in sys.path:
            cands += glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvToolsExt*.so*"))
        cands += glob.glob("/usr/local/cuda*/lib64/libnvToolsExt*.so*")
        cands += glob.glob("/usr/local/cuda*/targets/*/lib/libnvToolsExt*.so*")
        for path in cands:
            try:
                lib = ctypes.CDLL(path)
                lib.nvtxDomainCreateA.restype = ctypes.c_void_p
                lib.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
                lib.nvtxDomainRangePushEx.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
                lib.nvtxDomainRangePop.argtypes = [ctypes.c_void_p]
            except (OSError, AttributeError):
                continue

            class Attr(ctypes.Structure):
                _fields_ = [
                    ("version", ctypes.c_uint16),
                    ("size", ctypes.c_uint16),
                    ("category", ctypes.c_uint32),
                    ("colorType", ctypes.c_int32),
                    ("color", ctypes.c_uint32),
                    ("payloadType", ctypes.c_int32),
                    ("reserved0", ctypes.c_int32),
                    ("payload", ctypes.c_uint64),
                    ("messageType", ctypes.c_int32),
                    ("message", ctypes.c_char_p),
                ]

            dom = lib.nvtxDomainCreateA(DOMAIN.encode())
            keep = []

            def push(name, lib=lib, dom=dom, Attr=Attr, keep=keep):
                msg = name.encode()
                a = Attr(3, ctypes.sizeof(Attr), 0, 0, 0, 0, 0, 0, 1, msg)  # messageType 1: ASCII
                keep.append(msg)
                if len(keep) > 64:
                    del keep[:32]
                lib.nvtxDomainRangePushEx(dom, ctypes.byref(a))

            self.push = push
            self.pop = lambda lib=lib, dom=dom: lib.nvtxDomainRangePop(dom)
            self.backend = f"ctypes {path}, domain {DOMAIN!r}"
            return
        raise SystemExit(f"serving: no way to write a named NVTX domain (tried `nvtx` and {cands})")

    @contextlib.contextmanager
    def range(self, name):
        if not self.enabled or name is None:
            yield
            return
        self.push(name)
        try:
            yield
        finally:
            self.pop()


# --------------------------------------------------------------------------------------------
# The model (torch from here on)


def build(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dt = torch.bfloat16 if args.device == "cuda" else torch.float32
    dev = torch.device(args.device)
    H, D = args.heads, args.d_model
    Dh = D // H
    nv = args.nvtx

    if args.device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        # Decode attention has a new KV length every call: left to PyTorch 2.11 on the H200
        # it goes to cuDNN, which builds a kernel per length (see spec_sdpa_recompile).
        attn_ctx = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])
    else:
        attn_ctx = contextlib.nullcontext

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(D))

        def forward(self, x):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (xf * self.weight.float()).to(x.dtype)

    class Attention(nn.Module):
        def __init__(self, idx):
            super().__init__()
            self.idx = idx
            self.q_proj = nn.Linear(D, D, bias=False)
            self.k_proj = nn.Linear(D, D, bias=False)
            self.v_proj = nn.Linear(D, D, bias=False)
            self.o_proj = nn.Linear(D, D, bias=False)

        def forward(self, x, batch):
            T = x.shape[0]
            q = self.q_proj(x).view(T, H, Dh)
            k = self.k_proj(x).view(T, H, Dh)
            v = self.v_proj(x).view(T, H, Dh)
            cos, sin = batch["cos"], batch["sin"]  # [T, 1, Dh/2]

            def rope(t):
                a, b = t[..., : Dh // 2], t[..., Dh // 2 :]
                return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

            q, k = rope(q), rope(k)
            outs = []
            with attn_ctx():
                for (s, n, pos0), r in zip(batch["spans"], batch["reqs"]):
                    cache = r.cache[self.idx]
                    cache[0, :, pos0 : pos0 + n] = k[s : s + n].transpose(0, 1)
                    cache[1, :, pos0 : pos0 + n] = v[s : s + n].transpose(0, 1)
                    L = pos0 + n
                    o = F.scaled_dot_product_attention(
                        q[s : s + n].transpose(0, 1).unsqueeze(0),
                        cache[0, :, :L].unsqueeze(0),
                        cache[1, :, :L].unsqueeze(0),
                        is_causal=n > 1,
                    )
                    outs.append(o[0].transpose(0, 1).reshape(n, D))
            return self.o_proj(torch.cat(outs) if len(outs) > 1 else outs[0])

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(D, args.d_ff, bias=False)
            self.up_proj = nn.Linear(D, args.d_ff, bias=False)
            self.down_proj = nn.Linear(args.d_ff, D, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    layer_ranges = args.convention == "layerwise"

    class DecoderLayer(nn.Module):
        def __init__(self, idx):
            super().__init__()
            self.idx = idx
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention(idx)
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x, batch):
            p = f"model.layers.{self.idx}" if layer_ranges else None
            with nv.range(p):
                h = self.input_layernorm(x)
                with nv.range(p and p + ".self_attn"):
                    h = self.self_attn(h, batch)
                x = x + h
                h = self.post_attention_layernorm(x)
                with nv.range(p and p + ".mlp"):
                    h = self.mlp(h)
                return x + h

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(args.vocab, D)
            self.layers = nn.ModuleList([DecoderLayer(i) for i in range(args.layers)])
            self.norm = RMSNorm()

        def forward(self, ids, batch):
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x, batch)
            return x

    class CausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Model()
            self.lm_head = nn.Linear(D, args.vocab, bias=False)

        def forward(self, ids, batch):
            return self.model(ids, batch)

        def logits(self, hidden, last):
            return self.lm_head(self.model.norm(hidden[last])).float()

    torch.manual_seed(args.seed)
    with torch.device(dev):
        lm = CausalLM().to(dt)
        for name, p in lm.named_parameters():
            if p.dim() == 2:
                p.data.normal_(0.0, 0.02)
    lm.eval()
    inv = 1.0 / (10000 ** (torch.arange(0, Dh // 2, device=dev, dtype=torch.float32) / (Dh // 2)))
    ang = torch.arange(args.max_pos, device=dev, dtype=torch.float32)[:, None] * inv[None]
    rope_tab = (ang.cos().to(dt), ang.sin().to(dt))
    if args.convention == "layerwise_hooks":
        register_marker_hooks(lm, nv, torch, nn)
    return lm, rope_tab, dt, dev


def register_marker_hooks(lm, nv, torch, nn):
    """SGLang's --enable-layerwise-nvtx-marker (PytHooks.register_hooks(model,
    module_prefix="model")): every module's forward is a range named by the repr of a dict
    of its name, parameter shapes, input shapes and static parameters; after it, an output
    marker (the same dict with the output shapes) is pushed and popped at once. Written again
    here (not imported): the names have the same form."""
    names = {}

    def shapes(obj, out):
        if isinstance(obj, (list, tuple)):
            for o in obj:
                shapes(o, out)
        elif isinstance(obj, torch.Tensor):
            out.append(list(obj.size()))
        return out

    def marker(module, inputs=None, kwargs=None, outputs=None):
        d = {"Module": names.get(module, "unknown")}
        params = {n: list(p.size()) for n, p in module.named_parameters(recurse=False)}
        if params:
            d["TrainableParams"] = params
        ins = shapes(inputs, [])
        if ins:
            d["Inputs"] = ins
        outs = shapes(outputs, [])
        if outs:
            d["Outputs"] = outs
        for k, v in (kwargs or {}).items():
            got = shapes(v, [])
            if got:
                d[k] = got
        if isinstance(module, nn.Linear):
            d["StaticParams"] = {"in_features": module.in_features, "out_features": module.out_features}
        elif isinstance(module, nn.Embedding):
            d["StaticParams"] = {"num_embeddings": module.num_embeddings, "embedding_dim": module.embedding_dim}
        return "{}".format(d)

    def pre(module, args, kwargs):
        nv.push(marker(module, inputs=args, kwargs=kwargs))

    def post(module, args, out):
        nv.pop()
        nv.push(marker(module, outputs=out))
        nv.pop()

    for name, m in lm.named_modules(prefix="model"):
        names[m] = name
        m.register_forward_pre_hook(pre, with_kwargs=True)
        m.register_forward_hook(post)


# --------------------------------------------------------------------------------------------
# One iteration


STAGES = {
    # logical stage -> range name, per convention (None: not annotated)
    "vllm_scopes": dict(
        step=None,
        prepare="gpu_model_runner: preprocess",
        forward="gpu_model_runner: forward",
        logits="gpu_model_runner: postprocess",
        sample="gpu_model_runner: sample",
        process=None,
    ),
    "batch_names": dict(step="*", prepare="prepare_inputs", forward="forward", logits=None, sample="sample", process="process_outputs"),
    "sglang": dict(step="run_batch", prepare="*", forward="*", logits=None, sample="sample", process="process_batch_result"),
    "none": dict(step=None, prepare=None, forward=None, logits=None, sample=None, process=None),
}
STAGES["layerwise"] = STAGES["batch_names"]
STAGES["named_domain"] = STAGES["batch_names"]
STAGES["layerwise_hooks"] = STAGES["sglang"]


class Runner:
    def __init__(self, args, lm, rope_tab, dt, dev):
        import torch

        self.torch, self.args, self.lm, self.dt, self.dev = torch, args, lm, dt, dev
        self.cos, self.sin = rope_tab
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(args.seed)
        self.pin = args.device == "cuda"

    def prepare(self, plan):
        """Host lists -> one pinned buffer -> device (input ids, positions, last-token rows)."""
        torch = self.torch
        ids, pos, spans, last = [], [], [], []
        s = 0
        for r in plan.reqs:
            if r.cache is None:
                r.cache = [
                    torch.empty(2, self.args.heads, r.max_len, self.args.d_model // self.args.heads, dtype=self.dt, device=self.dev)
                    for _ in range(self.args.layers)
                ]
            if plan.kind == "PREFILL":
                toks, p0 = r.prompt, 0
            else:
                toks, p0 = [r.out[-1]], r.length - 1
            ids += toks
            pos += range(p0, p0 + len(toks))
            spans.append((s, len(toks), p0))
            s += len(toks)
            last.append(s - 1)
        host = torch.tensor(ids + pos + last, dtype=torch.int64, pin_memory=self.pin)
        dev = host.to(self.dev, non_blocking=True)
        T = len(ids)
        ids_d, pos_d, last_d = dev[:T], dev[T : 2 * T], dev[2 * T :]
        batch = dict(
            spans=spans,
            reqs=plan.reqs,
            cos=self.cos[pos_d].unsqueeze(1),
            sin=self.sin[pos_d].unsqueeze(1),
        )
        return ids_d, batch, last_d

    def forward(self, ids, batch):
        return self.lm(ids, batch)

    def logits(self, hidden, last):
        return self.lm.logits(hidden, last)

    def sample(self, logits):
        probs = self.torch.softmax(logits / 0.8, dim=-1)
        return self.torch.multinomial(probs, 1, generator=self.gen).view(-1).tolist()


def run_iteration(plan, sched, runner, nv, conv):
    st = STAGES[conv]
    step = st["step"]
    if step == "*":
        step = plan.name()
    fwd_name = st["forward"]
    if fwd_name == "*":
        fwd_name = "forward_extend" if plan.kind == "PREFILL" else "forward_decode"
    with nv.range(step):
        if st["prepare"] == "*":  # SGLang: input preparation happens inside forward_extend/decode
            with nv.range(fwd_name):
                ids, batch, last = runner.prepare(plan)
                hidden = runner.forward(ids, batch)
                logits = runner.logits(hidden, last)
        else:
            with nv.range(st["prepare"]):
                ids, batch, last = runner.prepare(plan)
            with nv.range(fwd_name):
                hidden = runner.forward(ids, batch)
                if st["logits"] is None:
                    logits = runner.logits(hidden, last)
            if st["logits"] is not None:
                with nv.range(st["logits"]):
                    logits = runner.logits(hidden, last)
        with nv.range(st["sample"]):
            sampled = runner.sample(logits)
        with nv.range(st["process"]):
            sched.update(plan, sampled)


class TwoThreads:
    """The scheduler thread holds the ranges; a worker thread launches all GPU work."""

    def __init__(self, runner, nv):
        self.runner, self.nv = runner, nv
        self.inq, self.outq = queue.Queue(), queue.Queue()
        self.thread = threading.Thread(target=self._work, name="forward_worker", daemon=True)
        self.thread.start()

    def _work(self):
        torch = self.runner.torch
        with torch.inference_mode():
            while True:
                plan = self.inq.get()
                if plan is None:
                    return
                try:
                    ids, batch, last = self.runner.prepare(plan)
                    hidden = self.runner.forward(ids, batch)
                    self.outq.put(self.runner.sample(self.runner.logits(hidden, last)))
                except BaseException as e:  # noqa: BLE001
                    self.outq.put(e)

    def iteration(self, sched):
        nv = self.nv
        with nv.range("scheduler_step"):
            with nv.range("schedule"):
                plan = sched.schedule()
            if plan is None:
                return None
            with nv.range("prepare_inputs"):
                plan.host_view = [(r.rid, r.length, list(r.blocks)) for r in plan.reqs]
                self.inq.put(plan)
            with nv.range("wait_for_forward"):
                sampled = self.outq.get()
                if isinstance(sampled, BaseException):
                    raise sampled
            with nv.range("process_outputs"):
                sched.update(plan, sampled)
        return plan

    def close(self):
        self.inq.put(None)
        self.thread.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--convention", choices=CONVENTIONS, default="batch_names")
    ap.add_argument("--iterations", type=int, default=90, help="served iterations (warm-up not counted)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--mean-gap", type=float, default=3.0, help="mean ticks between arrivals")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--d-ff", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-pos", type=int, default=1024)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument(
        "--profiler-range",
        action="store_true",
        help="call cudaProfilerStart/Stop around the served iterations (after warm-up) "
        "(nsys --capture-range=cudaProfilerApi: GPU metrics of the loop only)",
    )
    args = ap.parse_args()
    if args.dry_run:
        dry_run(args)
        return
    import torch

    conv = args.convention
    use_nvtx = args.device == "cuda" and conv != "none"
    args.nvtx = Nvtx(use_nvtx, DOMAIN if conv == "named_domain" else None)
    print(f"serving: convention {conv}, NVTX {args.nvtx.backend}, torch {torch.__version__}", file=sys.stderr)
    lm, rope_tab, dt, dev = build(args)
    runner = Runner(args, lm, rope_tab, dt, dev)
    nv = args.nvtx
    counts = {"PREFILL": 0, "DECODE": 0}
    ranged = args.profiler_range and args.device == "cuda"
    t0 = time.perf_counter()
    with torch.inference_mode():
        # warm-up: a dummy request, one prefill then decodes, annotated like the rest
        wreq = arrival_schedule(args.seed + 1000, 1, 1.0, 128, 128, args.warmup, args.warmup)
        wsched = Scheduler(wreq, args.max_batch)
        two = TwoThreads(runner, nv) if conv == "two_threads" else None
        for _ in range(args.warmup):
            if two:
                two.iteration(wsched)
            else:
                plan = wsched.schedule()
                run_iteration(plan, wsched, runner, nv, conv)
        if args.device == "cuda":
            torch.cuda.synchronize()
        if ranged:
            torch.cuda.profiler.start()
        t1 = time.perf_counter()
        sched = Scheduler(arrival_schedule(args.seed, args.requests, args.mean_gap), args.max_batch)
        it = 0
        while it < args.iterations and not sched.idle():
            if two:
                plan = two.iteration(sched)
            else:
                plan = sched.schedule()
                if plan is not None:
                    run_iteration(plan, sched, runner, nv, conv)
            if plan is None:
                break
            counts[plan.kind] += 1
            it += 1
        if two:
            two.close()
        if args.device == "cuda":
            torch.cuda.synchronize()
    t2 = time.perf_counter()
    if ranged:
        torch.cuda.profiler.stop()
    print(
        f"serving: warm-up {args.warmup} iterations {1e3 * (t1 - t0):.1f} ms; served {it} iterations "
        f"({counts}) in {1e3 * (t2 - t1):.1f} ms ({1e3 * (t2 - t1) / max(1, it):.2f} ms each); "
        f"finished {len(sched.finished)} requests",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
