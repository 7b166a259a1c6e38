#!/usr/bin/env python3
"""Tensor-parallel decode workload for trace-gaps' multi-GPU sample traces.

One process per GPU, started by torchrun::

    torchrun --standalone --nproc-per-node 2 sample_traces/generate/tp_decode.py --mode eager

A Llama-like decoder with random bf16 weights (nothing is downloaded): 8 layers, d_model
2048, 16 heads of 128 split across the ranks, SwiGLU MLP (d_ff 5632) split column-parallel
(gate/up) and row-parallel (down), vocab 32000 with a replicated (untied) LM head, RMSNorm and
rotary written as separate ops, static KV cache of 2048 slots per layer (the ranks' own
heads), a prompt of 512 slots pre-filled with random K/V. Every layer does a
``torch.distributed.all_reduce`` (NCCL on the GPU) of the attention output projection and
of the MLP down projection: two collectives per layer, 16 per step.

Each decode step is one token, one NVTX range ``decode_step`` holding the stages::

    forward     inputs into the static buffers, then the forward (eager, or a CUDA graph replay)
    sample      softmax, multinomial (same seeded generator on every rank), .item()
    detokenize  rank 0 only, when --detokenize-ms N > 0: N ms of pure host work
                (Python string work in a loop, no sleep), as rank 0 of a real server does

Scenarios (``--mode``)::

    eager   the forward runs eagerly (~300 kernel launches a step per rank); rank 0 does
            --detokenize-ms 3 by default, so the other rank waits for it inside its
            all-reduces
    graph   the forward is captured once into a CUDA graph (inside step 0, all-reduces
            inside the graph) and replayed every step; --detokenize-ms 0 by default (no
            planted host work): the clean counterpart for ``trace-gaps diff``

The first --warmup steps are traced like the others. At the end every process synchronises,
checks that all ranks sampled the same tokens, drops its CUDA graph, passes a barrier and
destroys its process group, so that no process dies at exit (nsys would lose its GPU
records).

NVLink multicast (NVLS) stays off: this script sets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 in its own environment before
torch is imported (the shared GPU host requires it; see the device README).

``--device cpu`` runs the same code with the gloo backend (no NVTX, no CUDA graph; ``--mode
graph`` then runs the forward eagerly through the same static buffers) so that it can be
tested without a GPU. The tokens it prints are the same for any world size with the same
seed (weights are generated whole from the seed, then sliced per rank), which checks the
tensor-parallel split::

    torchrun --standalone --nproc-per-node 1 tp_decode.py --device cpu --steps 3
    torchrun --standalone --nproc-per-node 2 tp_decode.py --device cpu --steps 3
"""

import os

# NVLink multicast off in NCCL, PyTorch and NVSHMEM, before anything reads them.
for _k, _v in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    if os.environ.get(_k) != _v:
        os.environ[_k] = _v

import argparse  # noqa: E402
import datetime  # noqa: E402
import hashlib  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402


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
class TPDecoder:
    """One rank's shard of a Llama-like decoder (Megatron-style tensor parallelism).

    Attention: the fused QKV projection is column-parallel by heads (this rank holds heads
    [rank*Hl, (rank+1)*Hl)), the output projection row-parallel, then all-reduce.
    MLP: gate/up column-parallel over d_ff, down row-parallel, then all-reduce.
    Embedding, norms and the LM head are replicated.

    Every weight is generated whole from (seed, tensor index) and then sliced, so that the
    model is the same function for any world size.
    """

    def __init__(self, args, rank, world, device, dtype):
        d, H, Fd = args.d_model, args.n_heads, args.d_ff
        if d % H or H % world or Fd % world:
            raise SystemExit(f"d_model {d}, n_heads {H}, d_ff {Fd} do not split over {world} ranks")
        self.d, self.hd = d, d // H
        self.Hl, self.Fl = H // world, Fd // world
        self.S = args.max_len
        self.device, self.dtype = device, dtype
        self.world = world
        hd, Hl, Fl, S = self.hd, self.Hl, self.Fl, self.S
        h0, h1 = rank * Hl, (rank + 1) * Hl
        f0, f1 = rank * Fl, (rank + 1) * Fl
        gen = torch.Generator(device=device)

        def full(idx, *shape, std):
            gen.manual_seed(args.seed * 1_000_003 + idx)
            return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * std

        def cast(t):
            return t.contiguous().to(dtype)

        self.embed = cast(full(0, args.vocab, d, std=1.0))
        # untied LM head, replicated; logits of std ~4 (a peaked, not one-hot, distribution)
        self.lm_head = cast(full(1, args.vocab, d, std=4.0 / math.sqrt(d)))
        s_in, s_ff = 1.0 / math.sqrt(d), 1.0 / math.sqrt(Fd)
        self.layers = []
        for li in range(args.layers):
            base = 16 * (li + 1)
            wqkv = full(base + 0, d, 3, H, hd, std=s_in)[:, :, h0:h1].reshape(d, 3 * Hl * hd)
            wo = full(base + 1, H, hd, d, std=s_in)[h0:h1].reshape(Hl * hd, d)
            wgu = full(base + 2, d, 2, Fd, std=s_in)[:, :, f0:f1].reshape(d, 2 * Fl)
            wdown = full(base + 3, Fd, d, std=s_ff)[f0:f1]
            self.layers.append(
                dict(
                    ln1=torch.ones(d, device=device, dtype=dtype),
                    wqkv=cast(wqkv),
                    wo=cast(wo),
                    ln2=torch.ones(d, device=device, dtype=dtype),
                    wgu=cast(wgu),
                    wdown=cast(wdown),
                )
            )
        self.lnf = torch.ones(d, device=device, dtype=dtype)
        # rotary tables [S, hd]
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd))
        ang = torch.arange(S, dtype=torch.float32, device=device)[:, None] * inv[None, :]
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype)
        self.slot_ids = torch.arange(S, device=device)
        # static KV cache cache[layer, k/v, local head, slot, head_dim]; the prompt's slots
        # hold random K/V standing in for a prefilled prompt (generated whole, sliced)
        self.cache = torch.zeros(args.layers, 2, Hl, S, hd, device=device, dtype=dtype)
        P = args.prompt_len
        for li in range(args.layers):
            kv = full(16 * (li + 1) + 4, 2, H, P, hd, std=1.0)[:, h0:h1]
            self.cache[li, :, :, :P] = kv.to(dtype)

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

    def all_reduce(self, t):
        dist.all_reduce(t)  # SUM over the tensor-parallel group (a copy when world is 1)
        return t

    def forward(self, tok, pos):
        """tok, pos: [1] long tensors on the device (static buffers in graph mode).

        Writes this token's K/V at slot ``pos`` and attends to slots [0, pos] through a mask
        over the whole static cache, so that every step has the same shapes (capturable).
        Returns logits [1, vocab] (replicated on every rank).
        """
        Hl, hd = self.Hl, self.hd
        x = F.embedding(tok, self.embed)  # [1, d]
        cos = self.cos.index_select(0, pos)[:, None, :]  # [1, 1, hd]
        sin = self.sin.index_select(0, pos)[:, None, :]
        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        ninf = torch.full((), float("-inf"), dtype=self.dtype, device=self.device)
        mask = torch.where(self.slot_ids <= pos, zero, ninf).view(1, 1, 1, self.S)
        for li, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["ln1"])
            q, k, v = (h @ L["wqkv"]).view(1, 3, Hl, hd).unbind(1)  # [1, Hl, hd] each
            q = self.rope(q, cos, sin)
            k = self.rope(k, cos, sin)
            kc, vc = self.cache[li, 0], self.cache[li, 1]  # [Hl, S, hd]
            kc.index_copy_(1, pos, k.transpose(0, 1))
            vc.index_copy_(1, pos, v.transpose(0, 1))
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
                o = F.scaled_dot_product_attention(
                    q.transpose(0, 1)[None], kc[None], vc[None], attn_mask=mask
                )  # [1, Hl, 1, hd]
            o = o[0].transpose(0, 1).reshape(1, Hl * hd)
            x = x + self.all_reduce(o @ L["wo"])
            h = self.rmsnorm(x, L["ln2"])
            g, u = (h @ L["wgu"]).view(1, 2, self.Fl).unbind(1)
            x = x + self.all_reduce((F.silu(g) * u) @ L["wdown"])
        x = self.rmsnorm(x, self.lnf)
        return x @ self.lm_head.t()


class Forward:
    """The forward over the static input buffers: eager, or a CUDA graph captured on first use."""

    def __init__(self, model, tok_buf, pos_buf, mode, device):
        self.model, self.tok, self.pos = model, tok_buf, pos_buf
        self.use_graph = mode == "graph" and device.type == "cuda"
        self.graph = None
        self.out = None

    def capture(self):
        # warm-up on a side stream (as torch.cuda.graphs asks), then capture; NCCL's
        # communicator already exists (eager init in init_process_group with device_id)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model.forward(self.tok, self.pos)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.model.forward(self.tok, self.pos)

    def __call__(self):
        if not self.use_graph:
            return self.model.forward(self.tok, self.pos)
        if self.graph is None:
            self.capture()
        self.graph.replay()
        return self.out

    def release(self):
        # NCCL >= 2.26 destroys a communicator only after every graph that holds it is gone
        if self.graph is not None:
            self.graph.reset()
            self.graph = None
            self.out = None


# --------------------------------------------------------------------------- host work
class Detokenizer:
    """Rank 0's host work: append the token's text, then keep re-normalising the tail of the
    text until N ms have passed (pure Python string work, the GIL held, no sleep)."""

    def __init__(self, vocab, seed):
        rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.pieces = [
            ("\u2581" if rng.random() < 0.4 else "")
            + "".join(rng.choice(letters) for _ in range(rng.randint(1, 8)))
            for _ in range(vocab)
        ]
        self.text = ""
        self.rounds = 0

    def __call__(self, token, ms):
        deadline = time.perf_counter() + ms / 1e3
        self.text += self.pieces[token]
        tail = self.text[-512:]
        while True:
            words = tail.replace("\u2581", " ").split()
            tail = "\u2581".join(w.capitalize() for w in words).lower()[-512:]
            self.rounds += 1
            if time.perf_counter() >= deadline:
                break
        return tail


# --------------------------------------------------------------------------- main
def parse(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mode", choices=("eager", "graph"), default="eager")
    ap.add_argument("--steps", type=int, default=20, help="measured steps (after warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps (traced too)")
    ap.add_argument(
        "--detokenize-ms",
        type=float,
        default=None,
        help="host work per step in a `detokenize` stage on rank 0 (default 3 in eager, 0 in graph)",
    )
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float32", "float64"),
        default="auto",
        help="auto: bfloat16 on cuda, float32 on cpu",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--n-heads", type=int, default=16)
    ap.add_argument("--d-ff", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-len", type=int, default=2048, help="KV cache slots")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--dump", default=None, help="rank 0 saves tokens and last logits here")
    a = ap.parse_args(argv)
    if a.detokenize_ms is None:
        a.detokenize_ms = 3.0 if a.mode == "eager" else 0.0
    if a.prompt_len >= a.max_len:
        ap.error("--prompt-len must be below --max-len")
    return a


def main(argv=None):
    args = parse(argv)
    # without torchrun (plain `python3 tp_decode.py`): one rank, world size 1
    for k, v in (
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29531"),
    ):
        os.environ.setdefault(k, v)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device; use --device cpu")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=120))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    assert dist.get_rank() == rank and dist.get_world_size() == world
    dtype = {
        "auto": torch.bfloat16 if cuda else torch.float32,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
        "float64": torch.float64,
    }[args.dtype]
    nv = Nvtx(cuda)
    tag = f"[tp rank{rank}/{world}]"
    print(
        f"{tag} mode {args.mode} torch {torch.__version__} backend {dist.get_backend()} "
        f"device {torch.cuda.get_device_name(device) if cuda else 'cpu'} dtype {dtype} "
        f"pid {os.getpid()} detokenize_ms {args.detokenize_ms if rank == 0 else 0} "
        f"NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}",
        flush=True,
    )

    t_init = time.perf_counter()
    with torch.inference_mode():
        model = TPDecoder(args, rank, world, device, dtype)
        tok_buf = torch.ones(1, dtype=torch.long, device=device)
        pos_buf = torch.zeros(1, dtype=torch.long, device=device)
        fwd = Forward(model, tok_buf, pos_buf, args.mode, device)
        sample_gen = torch.Generator(device=device)
        sample_gen.manual_seed(args.seed + 12345)  # same on every rank: same tokens everywhere
        detok = Detokenizer(args.vocab, args.seed) if rank == 0 else None
        if cuda:
            torch.cuda.synchronize()
        print(f"{tag} model built in {time.perf_counter() - t_init:.1f} s", flush=True)

        tok = torch.ones(1, dtype=torch.long, device=device)
        cur = args.prompt_len
        tokens, wall = [], []
        logits = None
        for _ in range(args.warmup + args.steps):
            if cur >= model.S:  # cache full: start a new request over the same prompt
                cur = args.prompt_len
            t0 = time.perf_counter()
            nv.push("decode_step")

            nv.push("forward")
            tok_buf.copy_(tok)
            pos_buf.fill_(cur)
            logits = fwd()
            nv.pop()

            nv.push("sample")
            probs = torch.softmax(logits[0].float() / args.temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=sample_gen)
            tid = int(tok.item())
            nv.pop()

            if detok is not None and args.detokenize_ms > 0:
                nv.push("detokenize")
                detok(tid, args.detokenize_ms)
                nv.pop()

            nv.pop()  # decode_step
            wall.append(time.perf_counter() - t0)
            tokens.append(tid)
            cur += 1

        if cuda:
            torch.cuda.synchronize()
        digest = hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest()[:16]
        # every rank must have sampled the same tokens: max and -min of one 63-bit number
        h = int(digest[:15], 16)
        agree = torch.tensor([h, -h], dtype=torch.long, device=device)
        dist.all_reduce(agree, op=dist.ReduceOp.MAX)
        same = int(agree[0]) == h == -int(agree[1])
        last = logits[0].double().cpu()

    w = args.warmup
    meas = sorted(wall[w:]) or [float("nan")]
    print(
        f"{tag} steps={len(wall)} warmup={w} host_wall_ms first={[round(x * 1e3, 1) for x in wall[: w + 1]]} "
        f"measured_median={meas[len(meas) // 2] * 1e3:.2f} min={meas[0] * 1e3:.2f} "
        f"max={meas[-1] * 1e3:.2f}",
        flush=True,
    )
    print(f"{tag} tokens_sha256={digest} ranks_agree={same}", flush=True)
    if rank == 0:
        print(f"{tag} tokens={tokens}", flush=True)
        print(
            f"{tag} last_logits sum={last.sum().item():.6e} absmax={last.abs().max().item():.6e}",
            flush=True,
        )
        if detok is not None:
            print(f"{tag} detokenize rounds={detok.rounds} text_tail={detok.text[-40:]!r}")
        if args.dump:
            torch.save({"tokens": tokens, "last_logits": last}, args.dump)

    # clean exit: GPU work done, graph released before its communicator, everyone here
    if cuda:
        torch.cuda.synchronize()
    fwd.release()
    if cuda:
        torch.cuda.synchronize()
        dist.barrier(device_ids=[local_rank])
    else:
        dist.barrier()
    dist.destroy_process_group()
    if not same:
        sys.exit(f"{tag} ranks sampled different tokens")


if __name__ == "__main__":
    main()
