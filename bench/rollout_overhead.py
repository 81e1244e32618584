"""Overhead of verl's rollout interface over calling each engine directly.

For each engine, the same prompts are generated (greedy, exactly ``--response-length`` new tokens per row, so
every variant does the same work) through

- ``ours``: ``HFRollout.generate_sequences`` / ``vLLMRollout.generate_sequences`` (DataProto in and out, padding,
  masks, positions), and
- ``raw``: transformers ``model.generate`` / vLLM ``LLM.generate`` called directly on the same model / engine,

alternating the two variants run by run (order flipped each round) to spread machine noise evenly. Prints a
markdown table with the median wall time, tokens/s and the overhead ratio ``median(ours) / median(raw)``.

    python bench/rollout_overhead.py --smoke              # tiny random model, seconds
    python bench/rollout_overhead.py --engines hf,vllm    # the bundled SmolLM2-135M-Instruct
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from omegaconf import DictConfig, OmegaConf

from verl.hardware.precision import resolve_dtype
from verl.protocol import DataProto


@dataclass
class Result:
    engine: str
    variant: str
    times: list[float]
    tokens: int

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.median


def _rollout_config(args: argparse.Namespace, name: str) -> DictConfig:
    return OmegaConf.create(
        dict(
            name=name,
            temperature=1.0,
            top_p=1.0,
            top_k=-1,
            do_sample=False,
            prompt_length=args.prompt_length,
            response_length=args.response_length,
            # every row generates exactly response_length tokens, in ours and raw alike
            min_new_tokens=args.response_length,
            dtype=args.dtype,
            max_num_seqs=max(args.batch_size, 1),
            calculate_log_probs=False,
            enforce_eager=True,
            free_cache_engine=False,
            seed=0,
            val_kwargs=dict(do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, n=1),
        )
    )


def _prompts(args: argparse.Namespace, vocab_size: int, eos: int, pad: int) -> DataProto:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, min(vocab_size, 250), (args.batch_size, args.prompt_length), generator=gen)
    mask = torch.ones_like(ids)
    pos = torch.arange(args.prompt_length).expand_as(ids).clone()
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos},
        meta_info={"eos_token_id": eos, "pad_token_id": pad},
    )


def _alternate(variants: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """Run each variant once to warm up, then ``repeats`` timed rounds, flipping the order every round."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)
    return times


def bench_hf(args: argparse.Namespace, model_path: str) -> list[Result]:
    from transformers import GenerationConfig

    from verl.models.loader import load_causal_lm, load_tokenizer
    from verl.workers.rollout.hf_rollout import HFRollout

    tokenizer = load_tokenizer(model_path)
    model = load_causal_lm(model_path).to(args.device)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    data = _prompts(args, model.config.vocab_size, eos, pad).to(args.device)
    rollout = HFRollout(model, _rollout_config(args, "hf"), tokenizer=tokenizer)
    dtype = resolve_dtype(args.dtype, args.device)
    ids, mask = data.batch["input_ids"], data.batch["attention_mask"]
    gen_config = GenerationConfig(
        max_new_tokens=args.response_length,
        min_new_tokens=args.response_length,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=pad,
        use_cache=True,
    )

    def ours() -> None:
        rollout.generate_sequences(data)

    def raw() -> None:
        model.eval()
        with torch.no_grad(), torch.autocast(ids.device.type, dtype=dtype, enabled=dtype != torch.float32):
            model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_config)

    times = _alternate({"ours": ours, "raw": raw}, args.repeats)
    tokens = args.batch_size * args.response_length
    return [Result("hf", name, t, tokens) for name, t in times.items()]


def bench_vllm(args: argparse.Namespace, model_path: str) -> list[Result]:
    from verl.models.loader import load_tokenizer
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    tokenizer = load_tokenizer(model_path)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rollout = vLLMRollout(model_path, _rollout_config(args, "vllm"), tokenizer=tokenizer)
    print(f"vLLM engine start: {rollout.engine_start_s:.1f} s", file=sys.stderr)
    data = _prompts(args, len(tokenizer), eos, pad)
    requests = [{"prompt_token_ids": row.tolist()} for row in data.batch["input_ids"]]
    params = rollout._vllm.SamplingParams(
        n=1,
        temperature=0.0,
        max_tokens=args.response_length,
        min_tokens=args.response_length,
        stop_token_ids=[eos],
        ignore_eos=True,
        detokenize=False,
    )

    def ours() -> None:
        rollout.generate_sequences(data)

    def raw() -> None:
        rollout.llm.generate(requests, params, use_tqdm=False)

    times = _alternate({"ours": ours, "raw": raw}, args.repeats)
    tokens = args.batch_size * args.response_length
    return [Result("vllm", name, t, tokens) for name, t in times.items()]


def markdown_table(results: list[Result]) -> str:
    """One row per (engine, variant): median and best seconds, tokens/s (median), and the ours/raw ratios."""
    raw = {r.engine: r for r in results if r.variant == "raw"}
    lines = [
        "| engine | variant | runs | median s | best s | tokens/s | overhead median (ours/raw) | overhead best |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        base = raw.get(r.engine)
        median_ratio = f"{r.median / base.median:.3f}" if base else "-"
        best_ratio = f"{r.best / base.best:.3f}" if base else "-"
        lines.append(
            f"| {r.engine} | {r.variant} | {len(r.times)} | {r.median:.3f} | {r.best:.3f} | {r.tokens_per_s:.1f} | "
            f"{median_ratio} | {best_ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model path, cached hub id or bundled name")
    parser.add_argument("--smoke", action="store_true", help="tiny random model, short run")
    parser.add_argument("--engines", default="hf,vllm", help="comma-separated: hf, vllm")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    model_path = args.model
    if args.smoke:
        from verl.models.tiny import TinyModelSpec, make_tiny_model_dir

        # head_dim 64: vLLM's CPU attention kernels do not support the default tiny head_dim of 16
        spec = TinyModelSpec(hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
        model_path = make_tiny_model_dir(tempfile.mkdtemp(prefix="verl_bench_tiny_"), spec=spec)
        args.batch_size, args.prompt_length, args.response_length, args.repeats = 4, 8, 8, 3

    results: list[Result] = []
    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
        if engine == "hf":
            results += bench_hf(args, model_path)
        elif engine == "vllm":
            try:
                results += bench_vllm(args, model_path)
            except ImportError as err:
                print(f"skipping vllm: {err}", file=sys.stderr)
        else:
            parser.error(f"unknown engine {engine!r}; expected hf or vllm")
    print(
        f"\nmodel={args.model if not args.smoke else 'tiny (smoke)'} batch={args.batch_size} "
        f"prompt={args.prompt_length} response={args.response_length} dtype={args.dtype} device={args.device} "
        f"threads={args.threads}\n"
    )
    print(markdown_table(results))


if __name__ == "__main__":
    main()
