"""Milliseconds per decode step: the hf engine's decode loop against transformers ``generate``, same model, same work.

Since the ``hf`` engine has one decode loop (verl/workers/rollout/decode/), architectures without a static-cache
forward decode through the loop on the model's own forward and KV cache (``ModelCacheForward``) where they used to
go through ``model.generate``. This measures that path against ``generate`` itself, and, for Qwen2 and Qwen3, the
static-cache forward too. Per architecture (random weights, ``--rows`` prompts of ``--prompt-length`` tokens, exactly
``--response-length`` sampled tokens: ``min_new_tokens`` = max, temperature 1, no top-k/top-p), each side runs in
turn for ``--rounds`` rounds (the order flipped each round) after one warm-up call each; the figures are the median
per-token CPU time of each side and the median over rounds of the round's ratio ``loop / generate``. Greedy tokens
of the two sides are compared once.

    python bench/decode_vs_generate.py --smoke
    python bench/decode_vs_generate.py                   # qwen2 and qwen3 (both forwards), gpt2, mistral-like
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import markdown_table, save_result  # noqa: E402

ARCHS = ("qwen2", "gpt2", "mistral", "qwen3")
STATIC_CACHE_ARCHS = ("qwen2", "qwen3")  # the architectures the static-cache forward takes


def build_model(arch: str, size: str) -> torch.nn.Module:
    """A random causal LM of ``arch``: ``S`` = hidden 256, 4 layers, vocabulary 49152; ``tiny`` for smoke runs."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    hidden, layers, vocab, ffn = (256, 4, 49152, 1024) if size == "S" else (64, 2, 512, 128)
    torch.manual_seed(0)
    if arch == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=1024, n_embd=hidden, n_layer=layers, n_head=4))
    common = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=ffn, vocab_size=vocab, max_position_embeddings=1024)  # fmt: skip
    if arch == "mistral":  # a sliding window: no static-cache forward
        return MistralForCausalLM(MistralConfig(**common, sliding_window=64))
    if arch == "qwen3":  # per-head q/k norms; head_dim split from the hidden size as in the others
        return Qwen3ForCausalLM(Qwen3Config(**common, head_dim=hidden // 4, tie_word_embeddings=True))
    return Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))


def measure(arch: str, args: argparse.Namespace) -> list[dict]:
    """The sides' per-token times on one architecture (see the module docstring)."""
    from transformers import GenerationConfig

    from verl.workers.rollout.base import SamplingSettings
    from verl.workers.rollout.decode import DecodeLoop

    model = build_model(arch, args.size).eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (args.rows, args.prompt_length), generator=gen)
    mask = torch.ones_like(ids)
    pos = torch.arange(args.prompt_length).expand_as(ids)
    n = args.response_length
    settings = SamplingSettings(
        do_sample=True, temperature=1.0, top_p=1.0, top_k=-1, response_length=n, min_new_tokens=n,
        calculate_log_probs=False,
    )  # fmt: skip
    hf_config = GenerationConfig(
        max_new_tokens=n, min_new_tokens=n, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        eos_token_id=vocab - 1, pad_token_id=0,
    )  # fmt: skip
    loops = {"loop (model cache)": DecodeLoop(model, static_cache=False)}
    if arch in STATIC_CACHE_ARCHS:
        loops["loop (static cache)"] = DecodeLoop(model)

    def call(name: str) -> None:
        if name == "generate":
            model.generate(input_ids=ids, attention_mask=mask, generation_config=hf_config)
        else:
            loops[name].generate(ids, mask, pos, settings, eos_ids=[vocab - 1], pad_id=0)

    sides = ["generate", *loops]
    with torch.no_grad():
        greedy_cfg = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy_cfg)[:, -n:]
        greedy = SamplingSettings(**{**settings.__dict__, "do_sample": False})
        same = {
            name: bool(torch.equal(loop.generate(ids, mask, pos, greedy, eos_ids=[], pad_id=0)[0], expected))
            for name, loop in loops.items()
        }
        for name in sides:
            call(name)  # warm-up
        times: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(args.rounds):
            for name in sides if r % 2 == 0 else reversed(sides):
                start = time.process_time()
                call(name)
                times[name].append((time.process_time() - start) / n * 1e3)
    out = []
    for name, ts in times.items():
        ms = statistics.median(ts)
        # the ratio of each round (both sides back to back) then the median: drift of a shared machine cancels
        ratio = statistics.median(t / g for t, g in zip(ts, times["generate"]))
        out.append(dict(arch=arch, side=name, ms_per_token=ms, ratio_vs_generate=ratio,
                        greedy_tokens_equal_generate=same.get(name, True), rounds=ts))  # fmt: skip
        print(f"{arch} {name}: {ms:.2f} ms/token ({ratio:.3f} x generate, median of rounds)", flush=True)
    return out


def run(args: argparse.Namespace) -> dict:
    return {"results": [row for arch in args.archs for row in measure(arch, args)], "args": vars(args)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=list(ARCHS), choices=ARCHS)
    parser.add_argument("--size", default="S", choices=["S", "tiny"])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny models, 2 rows, 4 tokens, 1 round")
    args = parser.parse_args(argv)
    if args.smoke:
        args.size, args.rows, args.prompt_length, args.response_length, args.rounds = "tiny", 2, 4, 4, 1
    torch.set_num_threads(args.threads)
    payload = run(args)
    header = ["arch", "side", "ms/token (CPU time)", "x generate", "greedy tokens = generate"]
    table = [
        [r["arch"], r["side"], r["ms_per_token"], r["ratio_vs_generate"], r["greedy_tokens_equal_generate"]]
        for r in payload["results"]
    ]
    print(markdown_table(header, table))
    print("saved", save_result("decode_vs_generate", payload, smoke=args.smoke, per_machine=True))


if __name__ == "__main__":
    main()
