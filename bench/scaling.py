"""How verl's GRPO step time grows with response length and batch size (config S, G=8, fp32).

Points: response length 64 / 128 / 256 at B=8 prompts, and B = 8 / 16 / 32 prompts at 64 tokens (exact lengths:
min_new_tokens = max). Each point builds the product trainer (``RayPPOTrainer.train_step``), runs ``--warmup``
steps, then reports the median of ``--steps`` steps with its phase split (generation, old log-probs, update).
Linear scaling in tokens would double the time from one row to the next.

    python bench/scaling.py --smoke
    python bench/scaling.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import make_config_s_dir, make_prompt_texts, markdown_table, save_result  # noqa: E402


def measure_point(model_path: str, prompts: list[str], batch: int, response_length: int, warmup: int, steps: int):
    """Median step seconds and median phase seconds of one (batch, response_length) point."""
    from bench._sides import GRPOWork, VerlSide

    work = GRPOWork(
        model_path=model_path,
        prompts=prompts,
        batch_prompts=batch,
        group_size=8,
        response_length=response_length,
        prompt_length=len(prompts[0]),
    )
    side = VerlSide(work)
    times, phases = [], []
    for i in range(warmup + steps):
        start = time.perf_counter()
        metrics = side.step()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
            phases.append({k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("timing_s/")})
    # old_log_prob is 0 when the on-policy shortcut skips that forward (actor.skip_old_log_prob_on_policy)
    med = {k: statistics.median(p.get(k, 0.0) for p in phases) for k in ("gen", "old_log_prob", "update_actor")}
    return {"batch": batch, "response_length": response_length, "step_s": statistics.median(times), **med}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from verl.models.tiny import make_byte_tokenizer

    model_path = make_config_s_dir(os.path.join(tempfile.gettempdir(), "verl_bench_config_s"))
    tokenizer = make_byte_tokenizer()
    if args.smoke:
        points = [(2, 8), (2, 16), (4, 8)]
        prompts = make_prompt_texts(tokenizer, 16, 8)
        args.warmup, args.steps = 0, 1
    else:
        points = [(8, 64), (8, 128), (8, 256), (16, 64), (32, 64)]
        prompts = make_prompt_texts(tokenizer, 128, 32)
    rows = []
    for batch, length in points:
        print(f"point B={batch} response={length}", file=sys.stderr, flush=True)
        rows.append(measure_point(model_path, prompts, batch, length, args.warmup, args.steps))
        save_result("scaling", {"threads": args.threads, "points": rows}, smoke=args.smoke)
    base = rows[0]["step_s"]
    table = markdown_table(
        ["B prompts", "response tokens", "tokens/step", "s/step", "x first row", "gen s", "old_log_prob s", "update s"],
        [
            [r["batch"], r["response_length"], r["batch"] * 8 * r["response_length"], r["step_s"], r["step_s"] / base]
            + [r["gen"], r["old_log_prob"], r["update_actor"]]
            for r in rows
        ],
    )
    save_result("scaling", {"threads": args.threads, "points": rows, "table": table}, smoke=args.smoke)
    print(table)


if __name__ == "__main__":
    main()
