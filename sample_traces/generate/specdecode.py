#!/usr/bin/env python3
"""Speculative-decoding workload that produces the sample traces of trace-gaps.

A target model (8-layer decoder-only transformer, d_model 1536, static KV cache) and a
draft model (1 layer by default, sharing the target's embedding and LM head, EAGLE-style) with
random weights, bf16 on the GPU. Each decode step is one NVTX range ``decode_step`` holding
the stages::

    draft_forward         4 sequential one-token draft passes, top-k of each kept on the GPU
    build_tree            top-k copied to the host, best-first (heapq) token-tree builder on the CPU
    prepare_for_verify    tree attention mask, positions, cache slots; one host->device copy
    verify_forward        the target over the tree tokens (eager, or a CUDA graph replay)
    accept_sample_commit  longest matching path, sample the bonus token, move accepted K/V

``--scenario plain_decode`` runs a plain decode loop instead (stages ``forward``, ``sample``).
The first ``--warmup`` steps are traced like the others (they load CUDA modules lazily and,
in the graph scenarios, capture the verify graph on first use).

Scenarios (``--scenario``)::

    spec_eager            verify runs eagerly (hundreds of kernel launches per step)
    spec_graph            verify replays a CUDA graph captured on first use
    spec_graph_bypassed   the graph is captured, but an off-by-one in the runner's size check
                          sends every step down the eager fallback
    spec_sync             spec_graph plus per-node .item() calls in accept_sample_commit and
                          .cpu()/.item() validation in prepare_for_verify
    spec_longctx_draft    spec_graph with a 1M-token draft KV cache: the draft is GPU-bound
    spec_two_ranks        two processes (ranks) share the GPU, each runs spec_eager; a gloo
                          all-reduce on the host per step keeps them in lock step
    plain_decode          one eager target forward per step, then sampling (one .item())
    plain_graph           plain_decode with the forward replayed from a CUDA graph captured
                          before the loop (attention over all --max-len slots with an additive
                          mask, so that its shapes are fixed)
    plain_detok           plain_decode plus a ``detokenize`` stage of 2 ms of host work per
                          step (pure Python, no CUDA call): the "before" of moving it off the step
    spec_sdpa_recompile   spec_eager with the decode attention left to PyTorch's backend choice:
                          on torch 2.11 / H200 that is cuDNN, which compiles and loads a new
                          kernel for every new KV length (found in the first captures)

Weights are random; nothing is downloaded. ``--device cpu`` runs the same Python logic on
the CPU (no NVTX, no CUDA graphs) for testing without a GPU.
"""

import argparse
import contextlib
import heapq
import math
import os
import subprocess
import sys
import time


def _launch_ranks():
    """spec_two_ranks: this process is only the launcher (like torchrun) and never imports
    torch; it starts the two ranks, each its own process and CUDA context on the same GPU."""
    argv = sys.argv[1:]
    if not any(a.endswith("spec_two_ranks") for a in argv) or "--rank" in argv:
        return
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + argv + ["--rank", str(r)], env=env
        )
        for r in range(2)
    ]
    rcs = [p.wait() for p in procs]
    sys.exit(f"rank exit codes {rcs}" if any(rcs) else 0)


if __name__ == "__main__":
    _launch_ranks()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

SCENARIOS = (
    "spec_eager",
    "spec_graph",
    "spec_graph_bypassed",
    "spec_sync",
    "spec_longctx_draft",
    "spec_two_ranks",
    "plain_decode",
    "spec_sdpa_recompile",
    "plain_graph",
    "plain_detok",
)

NEG_INF = float("-inf")


# --------------------------------------------------------------------------- NVTX
class Nvtx:
    """torch.cuda.nvtx push/pop, or nothing on the CPU."""

    def __init__(self, enabled):
        self.enabled = enabled

    def push(self, name):
        if self.enabled:
            torch.cuda.nvtx.range_push(name)

    def pop(self):
        if self.enabled:
            torch.cuda.nvtx.range_pop()


# --------------------------------------------------------------------------- model
class Decoder:
    """Llama-like decoder: RMSNorm, rotary embeddings, SDPA attention, SwiGLU MLP.

    Written the way an eager reference implementation is (separate ops for the norm and
    rotary), so that one layer launches ~35 kernels. The KV cache is one static tensor
    ``cache[layer, k/v, head, slot, head_dim]``.
    """

    def __init__(
        self,
        n_layers,
        d_model,
        n_heads,
        d_ff,
        vocab,
        max_slots,
        device,
        dtype,
        embed=None,
        gen=None,
        layer_scale=1.0,
    ):
        self.n_layers, self.d, self.h = n_layers, d_model, n_heads
        self.hd = d_model // n_heads
        self.max_slots = max_slots
        self.device, self.dtype = device, dtype
        self.pin_decode_sdpa = True

        def w(*shape, std):
            t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=device) * std
            return t.to(dtype=dtype)

        if embed is None:
            embed = w(vocab, d_model, std=1.0)
        self.embed = embed  # tied LM head: logits = h @ embed.T
        s_in = 1.0 / math.sqrt(d_model)
        s_ff = 1.0 / math.sqrt(d_ff)
        self.layers = []
        for _ in range(n_layers):
            self.layers.append(
                dict(
                    ln1=torch.ones(d_model, device=device, dtype=dtype),
                    wqkv=w(d_model, 3 * d_model, std=s_in),
                    wo=w(d_model, d_model, std=s_in * layer_scale),
                    ln2=torch.ones(d_model, device=device, dtype=dtype),
                    wgu=w(d_model, 2 * d_ff, std=s_in),
                    wdown=w(d_ff, d_model, std=s_ff * layer_scale),
                )
            )
        self.lnf = torch.ones(d_model, device=device, dtype=dtype)
        # rotary tables
        inv = 1.0 / (
            10000 ** (torch.arange(0, self.hd, 2, dtype=torch.float32, device=device) / self.hd)
        )
        ang = torch.arange(max_slots, dtype=torch.float32, device=device)[:, None] * inv[None, :]
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(device=device, dtype=dtype)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(device=device, dtype=dtype)
        # KV cache; filled with random values standing in for an already prefilled prompt
        self.cache = torch.empty(
            n_layers, 2, n_heads, max_slots, self.hd, device=device, dtype=dtype
        )
        chunk = 65536
        for s in range(0, max_slots, chunk):
            e = min(max_slots, s + chunk)
            self.cache[:, :, :, s:e].normal_(generator=gen)

    def sdpa_ctx(self, mask):
        """Backend choice for attention.

        One-token decode attention (no mask, a new KV length every call) is pinned to the
        flash / memory-efficient kernels unless --sdpa auto: left to PyTorch 2.11 on an H200
        it goes to cuDNN, which builds (NVRTC) and loads a new kernel for every new KV length
        (~55 ms of host time each; scenario spec_sdpa_recompile keeps that on purpose).
        The tree-masked verify attention has one fixed shape and is left to PyTorch.
        """
        if mask is None and self.pin_decode_sdpa:
            return sdpa_kernel(
                [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
            )
        return contextlib.nullcontext()

    @staticmethod
    def rmsnorm(x, w, eps=1e-6):
        xf = x.float()
        var = xf.pow(2).mean(-1, keepdim=True)
        xf = xf * torch.rsqrt(var + eps)
        return xf.to(x.dtype) * w

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def rope(self, x, cos, sin):
        return x * cos + self.rotate_half(x) * sin

    def forward(self, tokens, pos, slots, kv_len, mask=None):
        """tokens, pos, slots: [T] long; attends to cache slots [0, kv_len).

        mask: additive [1, 1, T, kv_len] mask, or None (every query sees all kv_len slots).
        Writes this call's K/V into ``slots``. Returns logits [T, vocab].
        """
        T = tokens.shape[0]
        x = F.embedding(tokens, self.embed)
        cos = self.cos.index_select(0, pos)[:, None, :]  # [T, 1, hd]
        sin = self.sin.index_select(0, pos)[:, None, :]
        for li, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["ln1"])
            qkv = h @ L["wqkv"]
            q, k, v = qkv.view(T, 3, self.h, self.hd).unbind(1)
            q = self.rope(q, cos, sin)
            k = self.rope(k, cos, sin)
            kc, vc = self.cache[li, 0], self.cache[li, 1]  # [H, S, hd]
            kc.index_copy_(1, slots, k.transpose(0, 1))
            vc.index_copy_(1, slots, v.transpose(0, 1))
            with self.sdpa_ctx(mask):
                o = F.scaled_dot_product_attention(
                    q.transpose(0, 1)[None],
                    kc[None, :, :kv_len],
                    vc[None, :, :kv_len],
                    attn_mask=mask,
                )
            o = o[0].transpose(0, 1).reshape(T, self.d)
            x = x + o @ L["wo"]
            h = self.rmsnorm(x, L["ln2"])
            g, u = (h @ L["wgu"]).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ L["wdown"]
        x = self.rmsnorm(x, self.lnf)
        return x @ self.embed.t()


# --------------------------------------------------------------------------- verify runner
class VerifyRunner:
    """Runs the target over the tree: eager, or by replaying a CUDA graph captured on first use."""

    def __init__(self, target, n_tokens, mode, device):
        self.t = target
        self.mode = mode  # "eager" | "graph" | "graph_bypassed"
        self.device = device
        self.n = n_tokens
        # the off-by-one planted in spec_graph_bypassed: the graph is sized for the drafted
        # nodes only, the tree also holds its root, so the size check never passes
        self.captured_n = n_tokens - 1 if mode == "graph_bypassed" else n_tokens
        self.graph = None
        self.warned = False
        S = target.max_slots
        self.s_tok = torch.zeros(self.captured_n, dtype=torch.long, device=device)
        self.s_pos = torch.zeros(self.captured_n, dtype=torch.long, device=device)
        self.s_slot = torch.arange(self.captured_n, dtype=torch.long, device=device)
        self.s_mask = torch.zeros(1, 1, self.captured_n, S, dtype=target.dtype, device=device)
        self.s_out = None

    def capture(self):
        if self.device.type != "cuda":
            return
        S = self.t.max_slots
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.t.forward(self.s_tok, self.s_pos, self.s_slot, S, self.s_mask)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.s_out = self.t.forward(self.s_tok, self.s_pos, self.s_slot, S, self.s_mask)
        torch.cuda.synchronize()

    def can_replay(self, n):
        return self.graph is not None and n == self.captured_n

    def __call__(self, tok, pos, slot, mask):
        S = self.t.max_slots
        if self.mode != "eager":
            if self.graph is None and self.device.type == "cuda":
                self.capture()
            if self.can_replay(tok.shape[0]):
                self.s_tok.copy_(tok)
                self.s_pos.copy_(pos)
                self.s_slot.copy_(slot)
                self.s_mask.copy_(mask)
                self.graph.replay()
                return self.s_out
            if not self.warned and self.device.type == "cuda":
                print(
                    f"[verify] graph captured for {self.captured_n} tokens, tree has "
                    f"{tok.shape[0]}: running eagerly",
                    file=sys.stderr,
                )
                self.warned = True
        return self.t.forward(tok, pos, slot, S, mask)


# --------------------------------------------------------------------------- tree
def build_tree(top_lp, top_tok, n_nodes):
    """Best-first token tree from per-depth top-k of the draft.

    top_lp, top_tok: host lists [depth][k]. Node 0 is the root (the last committed token).
    A candidate child at depth d+1 of a node takes the j-th top-k token of draft pass d with
    score parent + logp. Returns (tokens, parents, depths) of n_nodes nodes (tokens[0] None).
    """
    depth_max = len(top_lp)
    k = len(top_lp[0])
    tokens, parents, depths, scores = [None], [-1], [0], [0.0]
    heap = []
    counter = 0

    def push_children(node):
        nonlocal counter
        d = depths[node]
        if d >= depth_max:
            return
        base = scores[node]
        for j in range(k):
            s = base + top_lp[d][j]
            heapq.heappush(heap, (-s, counter, node, top_tok[d][j], s))
            counter += 1

    push_children(0)
    while heap and len(tokens) < n_nodes:
        _, _, parent, tok, s = heapq.heappop(heap)
        tokens.append(tok)
        parents.append(parent)
        depths.append(depths[parent] + 1)
        scores.append(s)
        push_children(len(tokens) - 1)
    return tokens, parents, depths


def ancestor_rows(parents):
    """For each node, the list of node indices it may attend to (its ancestors and itself)."""
    rows = []
    for i, p in enumerate(parents):
        rows.append((rows[p] if p >= 0 else []) + [i])
    return rows


def children_of(parents):
    ch = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            ch[p].append(i)
    return ch


# --------------------------------------------------------------------------- loops
def make_target(args, device, dtype, gen):
    t = Decoder(
        args.target_layers,
        args.d_model,
        args.n_heads,
        args.d_ff,
        args.vocab,
        args.max_len,
        device,
        dtype,
        gen=gen,
        layer_scale=args.layer_scale,
    )
    t.pin_decode_sdpa = args.sdpa == "pinned"
    return t


def run_spec(args, device, dtype, nv):
    gen = torch.Generator(device=device).manual_seed(args.seed)
    target = make_target(args, device, dtype, gen)
    draft_prefix = args.draft_ctx  # extra context the draft attends to (long in spec_longctx_draft)
    draft = Decoder(
        args.draft_layers,
        args.d_model,
        args.n_heads,
        args.d_ff,
        args.vocab,
        draft_prefix + args.max_len,
        device,
        dtype,
        embed=target.embed,
        gen=gen,
        layer_scale=args.layer_scale,
    )
    draft.pin_decode_sdpa = args.sdpa == "pinned"
    mode = {
        "spec_graph": "graph",
        "spec_graph_bypassed": "graph_bypassed",
        "spec_sync": "graph",
        "spec_longctx_draft": "graph",
    }.get(args.scenario, "eager")
    T = args.tree_nodes
    runner = VerifyRunner(target, T, mode, device)
    S = args.max_len
    sync_heavy = args.scenario == "spec_sync"

    # preallocated buffers
    pin = device.type == "cuda"
    host_meta = torch.zeros(3 * T + T * T, dtype=torch.long, pin_memory=pin)
    dev_meta = torch.zeros_like(host_meta, device=device)
    mask = torch.empty(1, 1, T, S, dtype=dtype, device=device)
    root = torch.tensor([1], dtype=torch.long, device=device)  # last committed token (on the GPU)
    ar_slot = torch.arange(T, device=device)

    dist = None
    if args.rank is not None:
        import datetime
        import torch.distributed as tdist

        try:
            tdist.init_process_group(
                "gloo",
                init_method=f"tcp://127.0.0.1:{args.port}",
                rank=args.rank,
                world_size=2,
                timeout=datetime.timedelta(seconds=60),
            )
            dist = tdist
        except Exception as e:  # keep the trace even without the host barrier
            print(
                f"[rank{args.rank}] gloo init failed ({e}); running without the per-step all-reduce",
                file=sys.stderr,
                flush=True,
            )

    cur = args.prompt_len  # committed tokens whose K/V are in slots [0, cur)
    n_total = args.warmup + args.steps
    wall, accepted_hist = [], []
    committed = 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    for step in range(n_total):
        if cur + T + args.draft_depth + 2 > S:  # context full: start a new request
            cur = args.prompt_len
        t0 = time.perf_counter()
        nv.push("decode_step")

        # ---- draft_forward: chain of one-token passes, top-k of each on the GPU
        nv.push("draft_forward")
        lps, toks = [], []
        x = root
        for d in range(args.draft_depth):
            p = draft_prefix + cur + d
            pos = torch.full((1,), p, dtype=torch.long, device=device)
            logits = draft.forward(x, pos, pos, p + 1)
            lp = torch.log_softmax(logits[0].float(), dim=-1)
            v, i = torch.topk(lp, args.topk)
            lps.append(v)
            toks.append(i)
            x = i[:1]
        top_lp = torch.stack(lps)
        top_tok = torch.stack(toks)
        nv.pop()

        # ---- build_tree: host copy of the top-k, best-first heap on the CPU
        nv.push("build_tree")
        top_lp_h = top_lp.cpu().tolist()
        top_tok_h = top_tok.cpu().tolist()
        tokens, parents, depths = build_tree(top_lp_h, top_tok_h, T)
        n = len(tokens)
        nv.pop()

        # ---- prepare_for_verify: tree mask + inputs, one H2D copy, mask built on the GPU
        nv.push("prepare_for_verify")
        rows = ancestor_rows(parents)
        flat = [0] + tokens[1:] + [cur + dd for dd in depths] + [cur + j for j in range(n)]
        anc = [0] * (n * n)
        for i, r in enumerate(rows):
            for j in r:
                anc[i * n + j] = 1
        host_meta[: 3 * n + n * n].copy_(torch.tensor(flat + anc, dtype=torch.long))
        dev_meta.copy_(host_meta, non_blocking=True)
        tok_d = dev_meta[:n].clone()
        tok_d[:1] = root
        pos_d = dev_meta[n : 2 * n]
        slot_d = dev_meta[2 * n : 3 * n]
        anc_d = dev_meta[3 * n : 3 * n + n * n].view(n, n).bool()
        mask.fill_(NEG_INF)
        mask[0, 0, :, :cur] = 0
        mask[0, 0, :, cur : cur + n] = torch.where(
            anc_d,
            torch.zeros((), dtype=dtype, device=device),
            torch.full((), NEG_INF, dtype=dtype, device=device),
        )
        if sync_heavy:
            # "defensive" validation that a user added: each one is a host sync
            if int(pos_d.max().item()) >= S:
                raise RuntimeError("tree runs past the KV cache")
            visible = mask[0, 0].isfinite().sum(-1).cpu()
            if bool((visible < cur + 1).any()):
                raise RuntimeError("a tree node sees less than the committed prefix")
            if int(tok_d.min().item()) < 0:
                raise RuntimeError("bad token id")
        nv.pop()

        # ---- verify_forward: the target over the tree tokens
        nv.push("verify_forward")
        tlogits = runner(tok_d, pos_d, slot_d, mask)
        nv.pop()

        # ---- accept_sample_commit
        nv.push("accept_sample_commit")
        greedy = tlogits.argmax(-1)
        ch = children_of(parents)
        path = [0]
        node = 0
        if sync_heavy:
            # naive walk: one .item() per candidate child
            while True:
                nxt = None
                want = greedy[node].item()
                for c in ch[node]:
                    if tok_d[c].item() == want:
                        nxt = c
                        break
                if nxt is None:
                    break
                path.append(nxt)
                node = nxt
        else:
            g = greedy[:n].cpu().tolist()
            while True:
                nxt = next((c for c in ch[node] if tokens[c] == g[node]), None)
                if nxt is None:
                    break
                path.append(nxt)
                node = nxt
        # sample the bonus token after the last accepted node
        probs = torch.softmax(tlogits[node].float() / args.temperature, dim=-1)
        nxt_tok = torch.multinomial(probs, 1)
        if dist is not None:
            # ranks must agree on how many tokens to commit (host all-reduce, gloo)
            t_acc = torch.tensor([len(path) - 1], dtype=torch.long)
            dist.all_reduce(t_acc, op=dist.ReduceOp.MIN)
            path = path[: int(t_acc[0]) + 1]
        # commit: move accepted drafted nodes' K/V from their tree slots to consecutive slots
        if len(path) > 1:
            src = torch.tensor([cur + j for j in path[1:]], dtype=torch.long).to(
                device, non_blocking=True
            )
            dst = torch.tensor([cur + 1 + i for i in range(len(path) - 1)], dtype=torch.long).to(
                device, non_blocking=True
            )
            target.cache.index_copy_(3, dst, target.cache.index_select(3, src))
        root = nxt_tok
        acc = len(path) - 1
        cur += 1 + acc
        committed += 1 + acc
        nv.pop()

        nv.pop()  # decode_step
        wall.append(time.perf_counter() - t0)
        accepted_hist.append(acc)

    if device.type == "cuda":
        torch.cuda.synchronize()
    report(args, wall, accepted_hist, committed)
    if dist is not None:
        dist.destroy_process_group()


def run_plain(args, device, dtype, nv):
    gen = torch.Generator(device=device).manual_seed(args.seed)
    target = make_target(args, device, dtype, gen)
    S = args.max_len
    tok = torch.tensor([1], dtype=torch.long, device=device)
    cur = args.prompt_len
    out, wall = [], []
    graph = None
    if args.scenario == "plain_graph":
        g_tok, g_pos = tok.clone(), tok.clone()
        g_mask = torch.zeros(1, 1, 1, S, dtype=dtype, device=device)
        for _ in range(2):
            target.forward(g_tok, g_pos, g_pos, S, g_mask)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            g_out = target.forward(g_tok, g_pos, g_pos, S, g_mask)
        slots = torch.arange(S, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    for step in range(args.warmup + args.steps):
        if cur + 1 > S:
            cur = args.prompt_len
        t0 = time.perf_counter()
        nv.push("decode_step")
        nv.push("forward")
        pos = torch.full((1,), cur, dtype=torch.long, device=device)
        if graph is not None:
            g_tok.copy_(tok)
            g_pos.copy_(pos)
            g_mask.copy_(torch.where(slots <= cur, 0.0, NEG_INF).view(1, 1, 1, S))
            graph.replay()
            logits = g_out
        else:
            logits = target.forward(tok, pos, pos, cur + 1)
        nv.pop()
        nv.push("sample")
        probs = torch.softmax(logits[0].float() / args.temperature, dim=-1)
        tok = torch.multinomial(probs, 1)
        out.append(int(tok.item()))  # detokenizer wants the id on the host
        cur += 1
        nv.pop()
        if args.scenario == "plain_detok":  # host-only detokenizer stand-in, 2 ms
            nv.push("detokenize")
            t_end = time.perf_counter() + 2e-3
            while time.perf_counter() < t_end:
                str(out)
            nv.pop()
        nv.pop()
        wall.append(time.perf_counter() - t0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    report(args, wall, None, len(out))


def report(args, wall, accepted, committed):
    w = args.warmup
    meas = sorted(wall[w:]) or [float("nan")]
    med = meas[len(meas) // 2]
    tag = f"rank{args.rank}" if args.rank is not None else args.scenario
    print(
        f"[{tag}] steps={len(wall)} warmup={w} host_wall_ms first={[round(x * 1e3, 1) for x in wall[: w + 1]]} "
        f"measured_median={med * 1e3:.2f} min={meas[0] * 1e3:.2f} max={meas[-1] * 1e3:.2f} "
        f"committed_tokens={committed}",
        flush=True,
    )
    if accepted is not None:
        a = accepted[w:] or [0]
        print(
            f"[{tag}] accepted_draft_tokens_per_step mean={sum(a) / len(a):.2f} "
            f"hist={ {k: a.count(k) for k in sorted(set(a))} }",
            flush=True,
        )


def parse(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--scenario", choices=SCENARIOS, default="spec_eager")
    ap.add_argument("--steps", type=int, default=30, help="measured steps (after warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps (traced too)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-layers", type=int, default=8)
    ap.add_argument("--draft-layers", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=1536)
    ap.add_argument("--n-heads", type=int, default=12)
    ap.add_argument("--d-ff", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-len", type=int, default=2048, help="target KV cache slots")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--draft-depth", type=int, default=4, help="sequential draft passes")
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--tree-nodes", type=int, default=32, help="tree size including its root")
    ap.add_argument(
        "--draft-ctx",
        type=int,
        default=None,
        help="extra draft context (default 0; 1048576 in spec_longctx_draft)",
    )
    ap.add_argument(
        "--sdpa",
        choices=("pinned", "auto"),
        default=None,
        help="decode attention backend: pinned to flash/efficient (default), or PyTorch's "
        "own choice (auto; default in spec_sdpa_recompile)",
    )
    ap.add_argument(
        "--layer-scale",
        type=float,
        default=6.0,
        help="scale of the layers' residual writes (sets how often draft and target agree)",
    )
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=29511, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.draft_ctx is None:
        a.draft_ctx = 1048576 if a.scenario == "spec_longctx_draft" else 0
    if a.sdpa is None:
        a.sdpa = "auto" if a.scenario == "spec_sdpa_recompile" else "pinned"
    return a


def main(argv=None):
    args = parse(argv)
    if args.scenario == "spec_two_ranks" and args.rank is None:
        # parent: start two ranks (each its own process and CUDA context on the same GPU)
        base = [sys.executable, os.path.abspath(__file__)] + (
            argv if argv is not None else sys.argv[1:]
        )
        env = dict(os.environ, GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
        procs = [subprocess.Popen(base + ["--rank", str(r)], env=env) for r in range(2)]
        rcs = [p.wait() for p in procs]
        if any(rcs):
            sys.exit(f"rank exit codes {rcs}")
        return
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    nv = Nvtx(device.type == "cuda")
    torch.manual_seed(args.seed)
    print(
        f"[{args.scenario}{'' if args.rank is None else f' rank{args.rank}'}] torch {torch.__version__} "
        f"device {torch.cuda.get_device_name(0) if device.type == 'cuda' else 'cpu'} "
        f"pid {os.getpid()}",
        flush=True,
    )
    with torch.inference_mode():
        if args.scenario.startswith("plain_"):
            run_plain(args, device, dtype, nv)
        else:
            run_spec(args, device, dtype, nv)


if __name__ == "__main__":
    main()
