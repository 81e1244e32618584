"""GRPO step time and tokens/s on 1, 2 and 4 data-parallel ranks (same global batch), plus what an 8-GPU node does.

Each point is the product trainer (``RayPPOTrainer.train_step``) with ``trainer.n_gpus_per_node=N``: 1 rank on the
local backend, N > 1 ranks as N Ray actor processes forming one gloo (CPU) / NCCL (GPU) group with FSDP2. The
global batch (B prompts x G responses) is the same at every N, so each rank gets 1/N of the rows; the report is the
median step over ``--steps`` steps after ``--warmup``, with the generated tokens per second (B x G x response
tokens / step time) and the speed-up over 1 rank.

On a CPU machine with C cores, ranks beyond C oversubscribe (each rank runs 1 torch thread): the speed-up then
measures contention, not scaling. The second table is arithmetic, not a measurement: the FSDP2 communication per
step of a model of P parameters on an 8-GPU node, against its compute, from the formulas in docs/scaling.md.

    python bench/scaling_ranks.py --smoke
    python bench/scaling_ranks.py --ranks 1 2 4
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


def measure_ranks(
    model_path: str, prompts: list[str], ranks: int, batch: int, group: int, length: int, warmup: int, steps: int
) -> dict[str, float]:
    """Median step seconds, phase seconds and generated tokens/s of GRPO on ``ranks`` data-parallel ranks."""
    from bench._sides import GRPOWork, VerlSide

    seqs_per_rank = batch * group // ranks
    extra = [
        f"trainer.n_gpus_per_node={ranks}",
        f"trainer.backend={'local' if ranks == 1 else 'ray'}",
        f"actor_rollout_ref.rollout.max_num_seqs={seqs_per_rank}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={seqs_per_rank}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={seqs_per_rank}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={seqs_per_rank}",
    ]
    work = GRPOWork(
        model_path=model_path,
        prompts=prompts,
        batch_prompts=batch,
        group_size=group,
        response_length=length,
        prompt_length=len(prompts[0]),
        extra_overrides=extra,
    )
    side = VerlSide(work)
    times, phases = [], []
    try:
        for i in range(warmup + steps):
            start = time.perf_counter()
            metrics = side.step()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times.append(elapsed)
                phases.append({k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("timing_s/")})
    finally:
        for wg in {id(g): g for g in side.trainer.worker_groups.values()}.values():
            wg.shutdown()
    step_s = statistics.median(times)
    med = {k: statistics.median(p.get(k, 0.0) for p in phases) for k in ("gen", "old_log_prob", "update_actor")}
    return {"ranks": ranks, "step_s": step_s, "gen_tokens_per_s": batch * group * length / step_s, **med}


def fsdp_node_arithmetic(params: float, tokens: int, gpus: int = 8, tflops: float = 400.0, busbw_gbs: float = 350.0):
    """One FSDP2 training step of ``params`` parameters on ``tokens`` tokens over ``gpus`` GPUs of one node.

    Compute: ``6 * P * tokens`` FLOPs (forward + backward) split over the GPUs at ``tflops`` sustained each.
    Communication per rank: all-gather of bf16 parameters in forward and again in backward, reduce-scatter of fp32
    gradients: ``(2 * 2 + 4) * P * (gpus - 1) / gpus`` bytes at ``busbw_gbs`` GB/s (NVLink bus bandwidth).
    """
    compute_s = 6 * params * tokens / gpus / (tflops * 1e12)
    comm_bytes = (2 * 2 + 4) * params * (gpus - 1) / gpus
    comm_s = comm_bytes / (busbw_gbs * 1e9)
    return {"params": params, "tokens": tokens, "compute_s": compute_s, "comm_s": comm_s, "comm_gb": comm_bytes / 1e9}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, 1 step per point (a test, not a figure)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batch", type=int, default=4, help="prompts per step (B)")
    parser.add_argument("--group", type=int, default=4, help="responses per prompt (G)")
    parser.add_argument("--length", type=int, default=32, help="response tokens (exactly)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    os.environ["VERL_DEVICE"] = os.environ.get("VERL_DEVICE", "cpu")
    import ray

    from verl.models.tiny import make_byte_tokenizer

    env = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "VERL_DEVICE": os.environ["VERL_DEVICE"]}
    ray.init(num_cpus=max(args.ranks), include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    model_path = make_config_s_dir(os.path.join(tempfile.gettempdir(), "verl_bench_config_s"))
    tokenizer = make_byte_tokenizer()
    if args.smoke:
        args.batch, args.group, args.length, args.warmup, args.steps = 2, 2, 4, 0, 1
    prompts = make_prompt_texts(tokenizer, 4 * args.batch, 16)
    rows = []
    for n in args.ranks:
        if args.batch * args.group % n:
            raise SystemExit(f"--ranks {n} does not divide the global batch {args.batch} x {args.group}")
        print(f"ranks={n}", file=sys.stderr, flush=True)
        rows.append(measure_ranks(model_path, prompts, n, args.batch, args.group, args.length, args.warmup, args.steps))
    ray.shutdown()
    base = rows[0]["step_s"]
    table = markdown_table(
        ["ranks", "s/step", "generated tokens/s", "speed-up", "gen s", "old_log_prob s", "update s"],
        [
            [r["ranks"], r["step_s"], r["gen_tokens_per_s"], base / r["step_s"], r["gen"]]
            + [r["old_log_prob"], r["update_actor"]]
            for r in rows
        ],
    )
    node = [fsdp_node_arithmetic(p, 256 * 1024) for p in (0.5e9, 7e9)]
    node_table = markdown_table(
        ["params", "tokens/step", "compute s (8 GPUs)", "FSDP2 comm GB/rank", "comm s"],
        [[f"{a['params'] / 1e9:g}B", a["tokens"], a["compute_s"], a["comm_gb"], a["comm_s"]] for a in node],
    )
    payload = {
        "cores": os.cpu_count(),
        "batch": args.batch,
        "group": args.group,
        "length": args.length,
        "points": rows,
        "table": table,
        "node_arithmetic": node,
        "node_table": node_table,
    }
    save_result("scaling_ranks", payload, smoke=args.smoke)
    print(table)
    print()
    print(node_table)


if __name__ == "__main__":
    main()
