"""Which rollout engine makes a GRPO step faster on this machine: ``hf`` or vLLM, side by side.

Each side is a fresh process running the product path of ``main_ppo`` (``bench/_sides.py:VerlSide``:
``RayPPOTrainer.train_step`` on the local backend) with ``actor_rollout_ref.rollout.name`` set to ``hf`` or
``vllm`` and everything else equal: the same model, prompts, group size, exactly ``L`` new tokens a response
(``min_new_tokens = max_new_tokens``), sampling at temperature 1, ``dtype`` as the demo resolves it (``auto``: bf16
where the CPU multiplies it natively, else fp32). The vLLM side's step includes what only it pays: the weight push
into the engine after each update. The sides alternate round by round (order flipped each round) so machine drift
falls on both; each process times ``--steps`` steps after ``--warmup`` and reports their median, the median
generation time, and its peak resident memory. The figure is ``hf / vllm`` of the medians over rounds.

    python bench/rollout_engines.py                              # bundled SmolLM2-135M, shapes 8x4x16 and 8x8x128
    python bench/rollout_engines.py --shapes 8x4x16 --rounds 1   # one shape, one round
    ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 python bench/rollout_engines.py   # approximate an AVX2-only CPU
    python bench/rollout_engines.py --smoke                      # config-S random model, 1 round, 1 step (CI)

Results: ``bench/results/rollout_engines_<cpu kind>.json``. ``--worker`` is the per-process side (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import machine_slug, save_result  # noqa: E402

ENGINES = ("hf", "vllm")


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"BxGxL"`` -> (prompts per step, responses per prompt, new tokens per response)."""
    try:
        b, g, length = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected BxGxL, e.g. 8x4x16") from None
    if min(b, g, length) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r}: every part must be >= 1")
    return b, g, length


def _worker(args: argparse.Namespace) -> None:
    """One side: build the trainer with ``--engine``, time the steps, print one JSON line."""
    import torch

    from bench._common import BUNDLED_SMOLLM2, make_config_s_dir, make_prompt_texts
    from bench._sides import GRPOWork, VerlSide
    from verl.models.loader import load_tokenizer, resolve_model_path

    torch.set_num_threads(args.threads)
    model = make_config_s_dir() if args.model == "config-s" else resolve_model_path(BUNDLED_SMOLLM2)
    b, g, length = args.shape
    prompts = make_prompt_texts(load_tokenizer(model), 4 * b, args.prompt_length, seed=0)
    work = GRPOWork(
        model_path=model,
        prompts=prompts,
        batch_prompts=b,
        group_size=g,
        response_length=length,
        prompt_length=args.prompt_length,
        dtype="auto",
        engine=args.engine,
        # the update is the same work on both sides; micro-batches keep its activations within a laptop's memory
        extra_overrides=[
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        ],
    )
    start = time.perf_counter()
    side = VerlSide(work)
    build_s = time.perf_counter() - start
    steps, gens, phases = [], [], {}
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        metrics = side.step()
        if i >= args.warmup:
            steps.append(time.perf_counter() - start)
            gens.append(float(metrics.get("timing_s/gen", float("nan"))))
            for key, value in metrics.items():
                if key.startswith("timing_s/"):
                    phases.setdefault(key.removeprefix("timing_s/"), []).append(float(value))
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
    print(
        json.dumps(
            {
                "engine": args.engine,
                "build_s": build_s,
                "step_s": steps,
                "gen_s": gens,
                "median_step_s": statistics.median(steps),
                "median_gen_s": statistics.median(gens),
                "median_phase_s": {name: statistics.median(values) for name, values in phases.items()},
                "peak_rss_gib": peak_gib,
            }
        )
    )


def _run_side(engine: str, shape: tuple[int, int, int], args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--engine", engine, "--model", args.model]
    cmd += ["--shape", "x".join(map(str, shape)), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    cmd += ["--threads", str(args.threads), "--prompt-length", str(args.prompt_length)]
    cmd += ["--micro-batch", str(args.micro_batch)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=str(ROOT))
    if out.returncode != 0:
        raise SystemExit(f"the {engine} side failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(shape: tuple[int, int, int], args: argparse.Namespace) -> dict:
    """Alternate the two engines for ``args.rounds`` rounds on one shape; the per-round results and the ratios."""
    rounds: dict[str, list[dict]] = {engine: [] for engine in ENGINES}
    for r in range(args.rounds):
        for engine in ENGINES if r % 2 == 0 else reversed(ENGINES):
            rounds[engine].append(_run_side(engine, shape, args))
            last = rounds[engine][-1]
            phases = ", ".join(f"{k} {v:.2f}" for k, v in last["median_phase_s"].items() if k != "step")
            print(
                f"{'x'.join(map(str, shape))} round {r + 1} {engine}: {last['median_step_s']:.2f} s/step "
                f"({phases}), peak {last['peak_rss_gib']:.2f} GiB",
                flush=True,
            )

    def median_of(engine: str, key: str) -> float:
        return statistics.median(side[key] for side in rounds[engine])

    step_ratios = [h["median_step_s"] / v["median_step_s"] for h, v in zip(rounds["hf"], rounds["vllm"])]
    gen_ratios = [h["median_gen_s"] / v["median_gen_s"] for h, v in zip(rounds["hf"], rounds["vllm"])]
    return {
        "shape": {"prompts": shape[0], "group": shape[1], "response_tokens": shape[2]},
        "rounds": rounds,
        "median_step_s": {engine: median_of(engine, "median_step_s") for engine in ENGINES},
        "median_gen_s": {engine: median_of(engine, "median_gen_s") for engine in ENGINES},
        "peak_rss_gib": {engine: max(side["peak_rss_gib"] for side in rounds[engine]) for engine in ENGINES},
        "step_ratio_hf_over_vllm": statistics.median(step_ratios),
        "gen_ratio_hf_over_vllm": statistics.median(gen_ratios),
    }


def markdown_table(results: list[dict], kind: str) -> str:
    """One row per shape: median step and generation seconds of each engine, the ratios, peak memory."""
    lines = [
        "| CPU kind | B x G x L | hf s/step (gen) | vLLM s/step (gen) | hf / vLLM step | hf / vLLM gen "
        "| peak hf / vLLM |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        s = r["shape"]
        step, gen, peak = r["median_step_s"], r["median_gen_s"], r["peak_rss_gib"]
        lines.append(
            f"| {kind} | {s['prompts']} x {s['group']} x {s['response_tokens']} | {step['hf']:.2f} ({gen['hf']:.2f}) "
            f"| {step['vllm']:.2f} ({gen['vllm']:.2f}) | {r['step_ratio_hf_over_vllm']:.2f} "
            f"| {r['gen_ratio_hf_over_vllm']:.2f} | {peak['hf']:.1f} / {peak['vllm']:.1f} GiB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["smollm2", "config-s"], default="smollm2")
    p.add_argument("--shapes", type=parse_shape, nargs="+", default=[(8, 4, 16), (8, 8, 128)], help="BxGxL ...")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch CPU threads of each side")
    p.add_argument("--prompt-length", type=int, default=32)
    p.add_argument("--micro-batch", type=int, default=16, help="sequences per forward/backward of the update")
    p.add_argument("--smoke", action="store_true", help="config-S random model, 8x2x8, 1 round, 1 step")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--shape", type=parse_shape, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    if args.smoke:
        args.model, args.shapes, args.rounds, args.steps, args.warmup = "config-s", [(8, 2, 8)], 1, 1, 0
    kind = machine_slug()
    results = [compare(shape, args) for shape in args.shapes]
    table = markdown_table(results, kind)
    print(table)
    payload = {
        "env": {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA") if k in os.environ},
        "model": args.model,
        "results": results,
        "table": table,
    }
    print(f"saved {save_result('rollout_engines', payload, smoke=args.smoke, per_machine=True)}")


if __name__ == "__main__":
    main()
