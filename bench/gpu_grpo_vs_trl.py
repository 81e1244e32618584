"""GRPO seconds per step on one GPU, ours vs TRL's ``GRPOTrainer``, for Qwen2.5-0.5B/1.5B-shaped random models.

The issue-12 table in one command. Each (shape, side) runs in its own process, so the peak GPU memory of a side is
its own and one side running out of memory does not take the other down. Work per step, both sides (the pairing of
bench/_sides.py): B=16 prompts x G=8 responses, prompts of ~64 tokens, exactly 256 generated tokens
(min_new_tokens = max), bf16 autocast over fp32 weights (fp32 on devices without native bf16), one optimizer step
per rollout over all sequences, beta 0, the toy reward. Models: random Qwen2.5-shaped weights (0.5B: 402M, 1.5B:
1.3B parameters with the bundled SmolLM2 tokenizer's 49152-token vocabulary, tied embeddings).

Sides: ``verl`` (the product path of ``main_ppo``, engine ``hf``: the static-cache decode loop, CUDA graphs by
default), ``trl-ckpt-off`` (TRL 1.16 with gradient checkpointing off: the same work as ours), ``trl-ckpt-on``
(TRL's default). Reported per row: median seconds per step after the warm-up; for ours also generation and update
seconds, decode ms per step (generation / response length), ``perf/mfu/actor`` and the peak GPU memory.

    python bench/gpu_grpo_vs_trl.py                       # on a CUDA machine: 0.5B and 1.5B, all three sides
    python bench/gpu_grpo_vs_trl.py --shapes 0.5B --sides verl
    python bench/gpu_grpo_vs_trl.py --smoke               # tiny shape on any device (CI)
    python bench/gpu_grpo_vs_trl.py --sides verl --verl-override actor_rollout_ref.model.use_fused_kernels=true \
        --tag fused                                       # our side with extra config overrides, saved apart
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import BUNDLED_SMOLLM2, markdown_table, save_result  # noqa: E402

MARK = "GPU_GRPO_RESULT "
SIDES = ("verl", "trl-ckpt-off", "trl-ckpt-on")


def make_model_dir(shape: str, root: str) -> str:
    """A random Qwen2.5-shaped model (bench/decode_speed.py's shapes) with the bundled SmolLM2 tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from bench.decode_speed import SHAPES
    from verl.models.loader import load_tokenizer, resolve_model_path

    path = os.path.join(root, f"qwen2.5-{shape}-random")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    tokenizer = load_tokenizer(resolve_model_path(BUNDLED_SMOLLM2))
    spec = dict(SHAPES[shape], vocab_size=len(tokenizer))
    config = Qwen2Config(
        **spec, tie_word_embeddings=True, max_position_embeddings=4096, rope_theta=1e6,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _work(args: dict):
    from bench._common import default_device, make_prompt_texts
    from bench._sides import GRPOWork
    from verl.hardware.precision import precision_for
    from verl.models.loader import load_tokenizer

    path = make_model_dir(args["shape"], args["root"])
    prompts = make_prompt_texts(load_tokenizer(path), count=8 * args["batch"], length=args["prompt_length"])
    return GRPOWork(
        model_path=path,
        prompts=prompts,
        batch_prompts=args["batch"],
        group_size=args["group"],
        response_length=args["response_length"],
        prompt_length=args["prompt_length"] + 16,  # room for the tokenizer's count around the target length
        beta=0.0,
        dtype=precision_for(default_device()).name,
        trl_gradient_checkpointing=args["side"] == "trl-ckpt-on",
        engine="hf",
        extra_overrides=list(args.get("verl_overrides", [])),
    )


def run_side(args: dict) -> dict:
    """Build one side in this process, run warm-up + timed steps; per-step seconds and what the side reports."""
    import torch

    from bench._sides import VerlSide, build_trl_trainer

    cuda = torch.cuda.is_available()
    work = _work(args)
    steps = args["warmup"] + args["steps"]
    times: list[float] = []
    extra: dict[str, list[float]] = {}
    try:
        if args["side"] == "verl":
            side = VerlSide(work)
            for _ in range(steps):
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                metrics = side.step()
                if cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
                for key in ("timing_s/gen", "timing_s/update_actor", "perf/mfu/actor", "response_length/mean"):
                    value = metrics.get(key)
                    if isinstance(value, list):
                        value = statistics.mean(value)
                    if value is not None:
                        extra.setdefault(key, []).append(float(value))
        else:
            from transformers import TrainerCallback

            marks: list[float] = []

            class Clock(TrainerCallback):
                def on_train_begin(self, *a, **k):
                    marks.append(time.perf_counter())

                def on_step_end(self, *a, **k):
                    if cuda:
                        torch.cuda.synchronize()
                    marks.append(time.perf_counter())

            build_trl_trainer(work, [Clock()], max_steps=steps).train()
            times = [b - a for a, b in zip(marks, marks[1:])]
    except torch.OutOfMemoryError:
        return {"args": args, "oom": True}
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else None
    timed = slice(args["warmup"], None)
    return {
        "args": args,
        "oom": False,
        "step_s": times[timed],
        "extra": {k: v[timed] for k, v in extra.items()},
        "peak_gpu_gb": peak,
    }


def _spawn(args: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--side-args", json.dumps(args)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    # a side killed by the CUDA allocator outside Python's reach also counts as out of memory
    return {"args": args, "oom": proc.returncode != 0, "exit_code": proc.returncode}


def summarize(results: list[dict]) -> str:
    """One row per shape: ours (step, generation, update, decode ms/step, MFU, peak memory) and each TRL side."""
    by_shape: dict[str, dict[str, dict]] = {}
    for r in results:
        by_shape.setdefault(r["args"]["shape"], {})[r["args"]["side"]] = r

    def med(values: list[float] | None) -> float:
        return statistics.median(values) if values else float("nan")

    rows = []
    for shape, sides in by_shape.items():
        ours = sides.get("verl", {})
        row: list = [shape]
        if ours and not ours.get("oom"):
            ex = ours["extra"]
            gen = med(ex.get("timing_s/gen"))
            row += [med(ours["step_s"]), gen, med(ex.get("timing_s/update_actor"))]
            row += [gen / ours["args"]["response_length"] * 1e3, med(ex.get("perf/mfu/actor")), ours["peak_gpu_gb"]]
        else:
            row += ["out of memory" if ours else "-"] + ["-"] * 5
        for name in ("trl-ckpt-off", "trl-ckpt-on"):
            trl = sides.get(name)
            if trl is None:
                row += ["-", "-"]
            elif trl.get("oom"):
                row += ["out of memory", "-"]
            else:
                row += [med(trl["step_s"]), trl["peak_gpu_gb"]]
        ratios = [
            row[1] / row[7 + 2 * i]
            for i in range(2)
            if isinstance(row[1], float) and isinstance(row[7 + 2 * i], float) and row[7 + 2 * i] > 0
        ]
        row.append(" / ".join(f"{r:.2f}" for r in ratios) or "-")
        rows.append(row)
    header = ["model", "ours s/step", "generation s", "update s", "decode ms/step", "MFU actor", "ours peak GB"]
    header += ["TRL ckpt off s", "peak GB", "TRL ckpt on s", "peak GB", "ours/TRL (off / on)"]
    return markdown_table(header, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side-args", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", nargs="+", default=["0.5B", "1.5B"])
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "verl_bench_qwen_shapes"))
    parser.add_argument("--smoke", action="store_true", help="tiny shape, B=2, G=2, 8 tokens, ours + TRL off")
    parser.add_argument(
        "--verl-override", action="append", default=[], help="KEY=VALUE added to our side's config (repeatable)"
    )
    parser.add_argument("--tag", default="", help="suffix of the result file name (runs with overrides)")
    args = parser.parse_args(argv)
    if args.side_args:
        result = run_side(json.loads(args.side_args))
        print(MARK + json.dumps(result), flush=True)
        return
    if args.smoke:
        args.shapes, args.sides, args.batch, args.group = ["tiny"], ["verl", "trl-ckpt-off"], 2, 2
        args.prompt_length, args.response_length, args.warmup, args.steps = 8, 8, 0, 1
    results = []
    for shape in args.shapes:
        for side in args.sides:
            side_args = dict(
                shape=shape, side=side, batch=args.batch, group=args.group, prompt_length=args.prompt_length,
                response_length=args.response_length, warmup=args.warmup, steps=args.steps, root=args.root,
                verl_overrides=args.verl_override,
            )  # fmt: skip
            print(f"running {shape} {side}", file=sys.stderr, flush=True)
            results.append(_spawn(side_args))
            table = summarize(results)
            name = "gpu_grpo_vs_trl" + (f"_{args.tag}" if args.tag else "")
            payload = {"results": results, "table": table, "verl_overrides": args.verl_override}
            path = save_result(name, payload, args.smoke, per_machine=True)
    print(table)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
