"""Is a change slower? The GRPO step time of this checkout against another checkout of the project, side by side.

Each side is a fresh process running the same work (``bench/_sides.py:VerlSide``, the product path
``RayPPOTrainer.train_step`` on the local backend) with ``verl`` imported from its own checkout; the sides alternate
round by round (order flipped each round) so machine drift falls on both. Each process times ``--steps`` steps after
``--warmup`` and reports their median; the figure is the ratio of the medians over rounds, ``this / other``.

    git worktree add /tmp/base <base-commit>
    python bench/step_time_vs_checkout.py --other /tmp/base                  # bundled SmolLM2-135M, fp32
    python bench/step_time_vs_checkout.py --other /tmp/base --model config-s # tiny random Llama, seconds

``--worker`` is the per-process side (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

THIS_ROOT = Path(__file__).resolve().parent.parent


def _worker(args: argparse.Namespace) -> None:
    """One side: build the trainer from whatever ``verl`` is importable, time the steps, print one JSON line."""
    import importlib

    import torch

    import verl
    from bench._common import BUNDLED_SMOLLM2, make_config_s_dir, make_prompt_texts
    from bench._sides import GRPOWork, VerlSide

    # the model loader's home moved twice: verl.models (issue 32), verl.utils.models (issue 22), verl.utils before
    for home in ("verl.models.loader", "verl.utils.models.loader", "verl.utils.model_loader"):
        try:
            loader = importlib.import_module(home)
            break
        except ModuleNotFoundError:
            continue
    load_tokenizer, resolve_model_path = loader.load_tokenizer, loader.resolve_model_path

    torch.set_num_threads(args.threads)
    model = make_config_s_dir() if args.model == "config-s" else resolve_model_path(BUNDLED_SMOLLM2)
    prompts = make_prompt_texts(load_tokenizer(model), 64, 24, seed=0)
    work = GRPOWork(
        model_path=model,
        prompts=prompts,
        batch_prompts=args.batch,
        group_size=args.group,
        response_length=args.response_length,
        prompt_length=32,
        dtype="float32",
    )
    side = VerlSide(work)
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        side.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"verl": str(Path(verl.__file__).parent), "median_s": statistics.median(times), "steps": times}))


def _run_side(root: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--model", args.model]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    cmd += ["--batch", str(args.batch), "--group", str(args.group), "--response-length", str(args.response_length)]
    # the side's own checkout first: its verl (and bench helpers) are the ones imported
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=str(root))
    if out.returncode != 0:
        raise SystemExit(f"side {root} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["verl"]).resolve() != (root / "verl").resolve():
        raise SystemExit(f"side {root} imported verl from {result['verl']}: install it non-editable elsewhere")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--other", help="the other checkout (a directory holding verl/)")
    p.add_argument("--model", choices=["smollm2", "config-s"], default="smollm2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=4, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=4, help="responses per prompt (G)")
    p.add_argument("--response-length", type=int, default=32)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return
    if not args.other:
        p.error("--other DIR is required")
    sides = {"this": THIS_ROOT, "other": Path(args.other).resolve()}
    medians: dict[str, list[float]] = {"this": [], "other": []}
    for r in range(args.rounds):
        order = ["this", "other"] if r % 2 == 0 else ["other", "this"]
        for name in order:
            medians[name].append(_run_side(sides[name], args)["median_s"])
            print(f"round {r + 1} {name}: {medians[name][-1]:.3f} s/step", flush=True)
    ratios = [a / b for a, b in zip(medians["this"], medians["other"])]
    print(
        "| model | B x G x tokens | this s/step | other s/step | this/other (median of rounds) |\n"
        "| --- | --- | --- | --- | --- |\n"
        f"| {args.model} | {args.batch} x {args.group} x {args.response_length} | "
        f"{statistics.median(medians['this']):.3f} | {statistics.median(medians['other']):.3f} | "
        f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) |"
    )


if __name__ == "__main__":
    main()
