"""Seconds per training step (forward + backward + AdamW) with and without ``actor.use_torch_compile``.

The compiled variant is what the actor worker does with ``actor_rollout_ref.actor.use_torch_compile=true``:
:func:`verl.utils.fsdp_utils.compile_decoder_layers` on the model. A random Qwen2.5-shaped model (the shapes of
bench/decode_speed.py) trains on ``--rows`` x ``--seq-len`` random tokens under autocast in the device's precision;
reported per variant: the median over ``--steps`` steps after ``--warmup`` (process CPU time on CPU, wall time on
GPUs), the first step (compilation included), and the FLOP rate of the timed steps (verl/hardware/flops_counter.py).

    python bench/train_compile.py --smoke
    python bench/train_compile.py --shapes S --rows 16 --seq-len 96 --threads 1
    python bench/train_compile.py --shapes 0.5B --rows 16 --seq-len 320          # on a GPU
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench._common import default_device, markdown_table, save_result  # noqa: E402
from bench.decode_speed import build_model  # noqa: E402


def measure(shape: str, compiled: bool, args: argparse.Namespace) -> dict:
    from verl.hardware import flops_counter
    from verl.hardware.precision import resolve_dtype
    from verl.utils.fsdp_utils import compile_decoder_layers

    device = args.device or default_device()
    dtype = resolve_dtype("auto", torch.device(device))
    model = build_model(shape, device).train()
    if compiled:
        compile_decoder_layers(model)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-6)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.rows, args.seq_len), generator=gen).to(device)
    times = []
    for _ in range(args.warmup + args.steps):
        if device == "cuda":
            torch.cuda.synchronize()
        start, cpu0 = time.perf_counter(), time.process_time()
        with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.process_time() - cpu0 if device == "cpu" else time.perf_counter() - start)
    step = statistics.median(times[args.warmup :])
    flops = flops_counter.training_flops(model.config, [args.seq_len] * args.rows)
    return dict(shape=shape, compiled=compiled, step_s=step, first_step_s=times[0], tflops=flops / step / 1e12,
                dtype=str(dtype), device=device)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["S"])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=96)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="tiny shape, eager only, one step")
    args = parser.parse_args(argv)
    variants = [False, True]
    if args.smoke:
        args.shapes, args.rows, args.seq_len, args.warmup, args.steps, variants = ["tiny"], 2, 8, 0, 1, [False]
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for shape in args.shapes:
        for compiled in variants:
            results.append(measure(shape, compiled, args))
            print(results[-1], flush=True)
    header = ["shape", "use_torch_compile", "dtype", "s/step", "first step s", "TFLOP/s"]
    rows = [[r["shape"], r["compiled"], r["dtype"], r["step_s"], r["first_step_s"], r["tflops"]] for r in results]
    print(markdown_table(header, rows))
    print("saved", save_result("train_compile", {"results": results, "args": vars(args)}, args.smoke, True))


if __name__ == "__main__":
    main()
