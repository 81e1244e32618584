"""Peak memory and time of the static-cache prefill, in row chunks against one forward for the whole batch.

The ``hf`` engine's static-cache forward (verl/workers/rollout/decode/static_cache.py) prefills at most
``PREFILL_TOKENS`` prompt tokens per forward: a larger batch runs in row chunks, so its attention mask
``[rows, 1, L, L]`` and its activations stay bounded for long prompts. This runs the prefill of ``--rows`` random
prompts of ``--prompt-length`` tokens on a random Qwen2.5-shaped model (``bench/decode_speed.py``'s shapes), once per
``--prefill-tokens`` budget (0: one forward, the behaviour before the chunks), each in a fresh subprocess on CPU,
and reports the peak memory above the model and the KV cache (CPU: growth of the peak RSS; CUDA:
``max_memory_allocated``), the time, and the largest difference of the last-position logits from the first budget's.

    python bench/prefill_memory.py --smoke
    python bench/prefill_memory.py --shape S --rows 32 --prompt-length 2048 --prefill-tokens 32768 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import (  # noqa: E402
    default_device,
    markdown_table,
    peak_rss_baseline_mib,
    peak_rss_mib,
    save_result,
)
from bench.decode_speed import SHAPES, build_model  # noqa: E402
from verl.workers.rollout.decode.static_cache import PREFILL_TOKENS  # noqa: E402


def run_case(shape: str, rows: int, length: int, budget: int, device: str, out: str | None) -> dict:
    """One prefill in this process (a fresh subprocess on CPU, so the peak-RSS mark is this case's)."""
    from verl.hardware.precision import resolve_dtype
    from verl.workers.rollout.decode import StaticCacheForward

    dtype = resolve_dtype("auto", torch.device(device))
    model = build_model(shape, device)
    forward = StaticCacheForward(model)
    forward.prefill_tokens = budget or rows * length  # 0: the whole batch in one forward
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, length), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[: rows // 2, : length // 4] = 0  # left padding on half the rows: the mask is not plain causal
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
        cache = forward.alloc_cache(rows, length, forward.cache_dtype(ids), device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = peak_rss_baseline_mib()
    start = time.perf_counter()
    with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
        logits = forward.prefill(cache, ids, mask, pos)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = peak_rss_mib() - base
    seconds = time.perf_counter() - start
    if out:
        torch.save(logits.float().cpu(), out)
    return dict(shape=shape, rows=rows, prompt_length=length, prefill_tokens=budget, peak_mib=peak,
                seconds=seconds, dtype=str(dtype), device=device)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="S", choices=sorted(SHAPES))
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt-length", type=int, default=2048)
    parser.add_argument(
        "--prefill-tokens", nargs="+", type=int, default=[PREFILL_TOKENS, 0],
        help="prompt tokens per prefill forward, one row each (0: the whole batch in one forward)",
    )  # fmt: skip
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="tiny shape, 8 rows of 64 tokens, budgets 128 and 0")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--logits-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.shape, args.rows, args.prompt_length, args.prefill_tokens = "tiny", 8, 64, [128, 0]
    device = args.device or default_device()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker is not None:
        print(json.dumps(run_case(args.shape, args.rows, args.prompt_length, args.worker, device, args.logits_out)))
        return
    results, first_logits = [], None
    scratch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "smoke")
    os.makedirs(scratch, exist_ok=True)
    for budget in args.prefill_tokens:
        out = os.path.join(scratch, f"prefill_logits_{os.getpid()}_{budget}.pt")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(budget), "--logits-out", out,
               "--shape", args.shape, "--rows", str(args.rows), "--prompt-length", str(args.prompt_length),
               "--device", device]  # fmt: skip
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"prefill with --prefill-tokens {budget} failed:\n{proc.stderr[-2000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        logits = torch.load(out)
        os.remove(out)
        first_logits = logits if first_logits is None else first_logits
        row["max_abs_diff_from_first"] = float((logits - first_logits).abs().max())
        results.append(row)
        print(f"prefill_tokens={budget}: peak {row['peak_mib']:.0f} MiB, {row['seconds']:.2f} s", flush=True)
    header = ["shape", "rows", "prompt", "prefill tokens", "dtype", "peak MiB", "seconds", "max |diff| logits"]
    keys = ["shape", "rows", "prompt_length", "prefill_tokens", "dtype", "peak_mib", "seconds",
            "max_abs_diff_from_first"]  # fmt: skip
    print(markdown_table(header, [[r[k] for k in keys] for r in results]))
    print("saved", save_result("prefill_memory", {"results": results, "args": vars(args)}, smoke=args.smoke,
                               per_machine=True))  # fmt: skip


if __name__ == "__main__":
    main()
