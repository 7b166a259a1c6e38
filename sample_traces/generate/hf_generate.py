"""Decode loops written by someone else: Hugging Face transformers' own `generate()`.

Each run builds a small Llama with random bf16 weights (nothing downloaded) and calls
`model.generate()` as a user would. NVTX ranges come only from hooks the library offers
or from wrapping its methods -- the library's loop itself is not edited:

- the target's `prepare_inputs_for_generation` (called once per decode iteration) opens a
  new `decode_step` and its stage `prepare_inputs`; when it returns, stage `forward`
  (`target_verify` in assisted generation) begins;
- a `LogitsProcessor` appended to generate's list switches to stage `sample`
  (`accept_sample` in assisted generation) when the logits reach it;
- in assisted generation, `AssistedCandidateGenerator.get_candidates` (the draft model's
  own `generate()`) opens the step instead, as stage `draft`.

So a step runs from one iteration's first hook to the next one's: every nanosecond of the
loop belongs to a step, and step 0 is the prefill.

    python3 hf_generate.py --scenario greedy_static_eager --new-tokens 40
    python3 hf_generate.py --scenario greedy_static_compiled   # generate's own torch.compile
    python3 hf_generate.py --scenario assisted                 # draft model proposes tokens
    python3 hf_generate.py --scenario sample_dynamic           # temperature / top-k / top-p

`--profile-second-call` runs generate once untraced (compilation, autotuning), then
brackets the second call with cudaProfilerStart/Stop for `nsys --capture-range=cudaProfilerApi`;
`--profile-generate` brackets the only call so (the capture leaves out the imports and the
model's construction, not generate's own first-step code loading).
`--device cpu` runs the same code without CUDA or NVTX, for a dry run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList
from transformers.generation import candidate_generator

SCENARIOS = ("greedy_static_eager", "greedy_static_compiled", "assisted", "sample_dynamic")


class StageMarker:
    """Pushes and pops NVTX ranges so that each decode iteration is one `decode_step`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.step_open = False
        self.stage: str | None = None
        self.steps = 0

    def _push(self, name: str) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_push(name)

    def _pop(self) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_pop()

    def begin_step(self, stage: str) -> None:
        self.end_all()
        self._push("decode_step")
        self.step_open = True
        self.steps += 1
        self.enter(stage)

    def enter(self, stage: str) -> None:
        if not self.step_open:
            self.begin_step(stage)
            return
        if self.stage is not None:
            self._pop()
        self._push(stage)
        self.stage = stage

    def end_all(self) -> None:
        if self.stage is not None:
            self._pop()
            self.stage = None
        if self.step_open:
            self._pop()
            self.step_open = False


class MarkSample(LogitsProcessor):
    """A no-op logits processor whose call marks the end of the forward pass."""

    def __init__(self, marker: StageMarker, after: str, stage: str) -> None:
        self.marker = marker
        self.after = after
        self.stage = stage

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.marker.stage == self.after:
            self.marker.enter(self.stage)
        return scores


def wrap_prepare_inputs(
    model: LlamaForCausalLM, marker: StageMarker, *, new_step: bool, forward_stage: str
) -> None:
    original: Callable[..., Any] = model.prepare_inputs_for_generation

    def prepare_inputs_for_generation(*args: Any, **kwargs: Any) -> Any:
        if new_step:
            marker.begin_step("prepare_inputs")
        else:
            marker.enter("prepare_inputs")
        out = original(*args, **kwargs)
        marker.enter(forward_stage)
        return out

    model.prepare_inputs_for_generation = prepare_inputs_for_generation  # type: ignore[method-assign]


def wrap_get_candidates(marker: StageMarker) -> None:
    cls = candidate_generator.AssistedCandidateGenerator
    original = cls.get_candidates

    def get_candidates(self: Any, *args: Any, **kwargs: Any) -> Any:
        marker.begin_step("draft")
        return original(self, *args, **kwargs)

    cls.get_candidates = get_candidates  # type: ignore[method-assign]


def build_model(layers: int, hidden: int, device: str, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=None,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model = model.to(dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--prompt", type=int, default=128, help="prompt length in tokens")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--draft-layers", type=int, default=1)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--profile-second-call", action="store_true")
    parser.add_argument("--profile-generate", action="store_true")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    on_gpu = args.device == "cuda"
    model = build_model(args.layers, args.hidden, args.device, args.seed)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    prompt = torch.randint(2, 32000, (1, args.prompt), generator=gen).to(args.device)
    mask = torch.ones_like(prompt)

    kwargs: dict[str, Any] = {
        "max_new_tokens": args.new_tokens,
        "min_new_tokens": args.new_tokens,
        "attention_mask": mask,
    }
    marker = StageMarker(enabled=on_gpu)
    if args.scenario == "assisted":
        draft = build_model(args.draft_layers, args.hidden, args.device, args.seed + 7)
        draft.generation_config.num_assistant_tokens = args.draft_tokens
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        kwargs |= {"assistant_model": draft, "do_sample": False}
        wrap_get_candidates(marker)
        wrap_prepare_inputs(model, marker, new_step=False, forward_stage="target_verify")
        after, sample_stage = "target_verify", "accept_sample"
    else:
        wrap_prepare_inputs(model, marker, new_step=True, forward_stage="forward")
        after, sample_stage = "forward", "sample"
        if args.scenario.startswith("greedy_static"):
            kwargs |= {"do_sample": False, "cache_implementation": "static"}
            if args.scenario == "greedy_static_eager":
                kwargs["disable_compile"] = True
        else:
            kwargs |= {"do_sample": True, "temperature": 0.7, "top_k": 50, "top_p": 0.9}
    kwargs["logits_processor"] = LogitsProcessorList([MarkSample(marker, after, sample_stage)])

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"scenario {args.scenario}, device {args.device}",
        flush=True,
    )
    calls = 2 if args.profile_second_call else 1
    for call in range(calls):
        traced = call == calls - 1
        marker.enabled = on_gpu and traced
        bracket = args.profile_second_call or args.profile_generate
        if on_gpu and traced and bracket:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        t0 = time.perf_counter()
        marker.steps = 0
        with torch.inference_mode():
            out = model.generate(prompt, **kwargs)
        marker.end_all()
        if on_gpu:
            torch.cuda.synchronize()
        if on_gpu and traced and bracket:
            torch.cuda.profiler.stop()
        took = time.perf_counter() - t0
        new = out[0, args.prompt :].tolist()
        print(
            f"call {call}: {len(new)} new tokens, {marker.steps} steps, {took:.3f} s; "
            f"first tokens {new[:8]}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
