"""Limits of the machine and how close verl gets to them.

1. Peak: measured fp32 and bf16 matmul GFLOP/s (square 2048 and a transformer-shaped [4096 x 576] x [576 x 1536])
   and memory bandwidth (a 256 MiB copy: read + write bytes over time).
2. Training: the actor's real update (``DataParallelPPOActor.update_policy``: forward, PPO loss, backward, clipped
   AdamW step) on B sequences of T tokens; tokens/s and MFU = 6 x params x tokens / time / measured matmul peak of
   the same dtype (Kaplan et al. 2020's 6N FLOPs per trained token; attention FLOPs left out, so MFU is a slight
   underestimate). All parameters are counted once (tied embeddings are a real matmul in the LM head).
3. Rollout: tokens/s of verl's ``hf`` rollout against calling transformers ``generate`` directly on the same model
   (``bench/rollout_overhead.py``); ratio ours/raw of the median times.

    python bench/limits.py --smoke
    python bench/limits.py                      # SmolLM2-135M-Instruct (bf16) and config S (fp32)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import BUNDLED_SMOLLM2, default_device, markdown_table, save_result  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _timeit(fn, repeats: int, warmup: int = 1) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs (device-synchronised)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_gflops(dtype: torch.dtype, m: int, k: int, n: int, device: str, repeats: int) -> float:
    """2*m*k*n / median time of ``[m, k] @ [k, n]``, in GFLOP/s."""
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    return 2 * m * k * n / _timeit(lambda: a @ b, repeats) / 1e9


def copy_bandwidth_gbs(mib: int, device: str, repeats: int) -> float:
    """(read + write) bytes / median time of copying a ``mib`` MiB float32 tensor, in GB/s."""
    src = torch.randn(mib * 1024 * 1024 // 4, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _timeit(lambda: dst.copy_(src), repeats) / 1e9


def measure_peaks(device: str, repeats: int, small: bool) -> dict[str, float]:
    size = 256 if small else 2048
    peaks: dict[str, float] = {}
    for name, dtype in DTYPES.items():
        square = matmul_gflops(dtype, size, size, size, device, repeats)
        shaped = matmul_gflops(dtype, 4096 if not small else 256, 576, 1536 if not small else 256, device, repeats)
        peaks[f"matmul_{name}_square_gflops"] = square
        peaks[f"matmul_{name}_linear_gflops"] = shaped
        peaks[f"matmul_{name}_peak_gflops"] = max(square, shaped)
    peaks["copy_bandwidth_gbs"] = copy_bandwidth_gbs(16 if small else 256, device, repeats)
    return peaks


def _update_batch(vocab: int, batch: int, prompt_len: int, response_len: int, device: str):
    from verl.protocol import DataProto

    gen = torch.Generator().manual_seed(0)
    seq = prompt_len + response_len
    ids = torch.randint(3, vocab - 3, (batch, seq), generator=gen)
    mask = torch.ones_like(ids)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": torch.arange(seq).expand(batch, seq).clone(),
            "responses": ids[:, prompt_len:],
            "response_mask": torch.ones(batch, response_len, dtype=torch.long),
            "old_log_probs": torch.full((batch, response_len), -5.0),
            "advantages": torch.randn(batch, response_len, generator=gen),
        },
        meta_info={"temperature": 1.0, "global_steps": 1},
    ).to(device)


def measure_training(model_path: str, dtype: str, batch: int, prompt_len: int, response_len: int, repeats: int):
    """Median seconds of one ``update_policy`` (one optimizer step over ``batch`` sequences) and its tokens/s."""
    from verl.models.loader import load_causal_lm, resolve_attn_implementation
    from verl.utils.optim import build_optimizer
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    device = default_device()
    # the attention implementation the product picks by default (actor_rollout_ref.model.attn_implementation=auto)
    attn = resolve_attn_implementation("auto", torch.device(device).type)
    model = load_causal_lm(model_path, dtype=torch.float32, attn_implementation=attn).to(device)
    params = sum(p.numel() for p in model.parameters())
    config = {
        "ppo_mini_batch_size": batch,
        "ppo_micro_batch_size_per_gpu": batch,
        "ppo_epochs": 1,
        "clip_ratio": 0.2,
        "loss_agg_mode": "token-mean",
        "grad_clip": 1.0,
        "dtype": dtype,
    }
    optimizer = build_optimizer(model.parameters(), {"lr": 1e-6})
    actor = DataParallelPPOActor(config, model, optimizer)
    data = _update_batch(model.config.vocab_size, batch, prompt_len, response_len, device)
    seconds = _timeit(lambda: actor.update_policy(data), repeats)
    tokens = batch * (prompt_len + response_len)
    return {"params": params, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def measure_rollout(model_path: str, dtype: str, batch: int, prompt_len: int, response_len: int, repeats: int):
    """verl hf rollout vs raw transformers generate (bench/rollout_overhead.py), greedy, exact lengths."""
    from bench.rollout_overhead import bench_hf

    args = argparse.Namespace(
        batch_size=batch,
        prompt_length=prompt_len,
        response_length=response_len,
        repeats=repeats,
        dtype=dtype,
        device=default_device(),
        threads=torch.get_num_threads(),
    )
    results = {r.variant: r for r in bench_hf(args, model_path)}
    ours, raw = results["ours"], results["raw"]
    return {
        "ours_s": ours.median,
        "raw_s": raw.median,
        "ours_tokens_per_s": ours.tokens_per_s,
        "raw_tokens_per_s": raw.tokens_per_s,
        "ours_over_raw_time": ours.median / raw.median,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and the config-S model only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = default_device()

    from bench._common import make_config_s_dir
    from verl.models.loader import resolve_model_path

    peaks = measure_peaks(device, args.repeats, small=args.smoke)
    config_s = make_config_s_dir(os.path.join(__import__("tempfile").gettempdir(), "verl_bench_config_s"))
    if args.smoke:
        models = [("config S", config_s, "float32", 2, 8, 8, 4)]
    else:
        models = [
            ("SmolLM2-135M", resolve_model_path(BUNDLED_SMOLLM2), "bfloat16", 8, 32, 96, 8),
            ("config S", config_s, "float32", 64, 32, 64, 64),
        ]
    training, rollout = [], []
    for label, path, dtype, batch, prompt_len, response_len, gen_batch in models:
        t = measure_training(path, dtype, batch, prompt_len, response_len, args.repeats)
        peak = peaks[f"matmul_{dtype}_peak_gflops"]
        t.update(label=label, dtype=dtype, mfu=6 * t["params"] * t["tokens"] / t["seconds"] / 1e9 / peak)
        training.append(t)
        r = measure_rollout(path, dtype, gen_batch, prompt_len, response_len, args.repeats)
        r.update(label=label, dtype=dtype, batch=gen_batch, response_length=response_len)
        rollout.append(r)

    peak_table = markdown_table(["measure", "value"], [[k, v] for k, v in peaks.items()])
    train_table = markdown_table(
        ["model", "dtype", "params", "tokens/step", "s/step", "tokens/s", "MFU vs measured peak"],
        [
            [t["label"], t["dtype"], t["params"], t["tokens"], t["seconds"], t["tokens_per_s"], t["mfu"]]
            for t in training
        ],
    )
    roll_table = markdown_table(
        ["model", "dtype", "batch", "new tokens", "verl tokens/s", "raw generate tokens/s", "verl/raw time"],
        [
            [r["label"], r["dtype"], r["batch"], r["response_length"], r["ours_tokens_per_s"], r["raw_tokens_per_s"]]
            + [r["ours_over_raw_time"]]
            for r in rollout
        ],
    )
    save_result(
        "limits",
        {"threads": args.threads, "peaks": peaks, "training": training, "rollout": rollout},
        smoke=args.smoke,
    )
    print(f"threads={args.threads} device={device}\n\n{peak_table}\n\n{train_table}\n\n{roll_table}")


if __name__ == "__main__":
    main()
