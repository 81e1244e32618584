"""Training throughput and MFU of ``update_actor`` (the PPO actor update) on one process.

MFU = achieved FLOP/s / peak FLOP/s, with achieved = ``6 * params * tokens / seconds`` (forward 2N + backward 4N
FLOPs per token, Kaplan et al. 2020 / the PaLM paper's MFU; attention score FLOPs are left out, as is usual for
short sequences) and the peak *measured in this script* on this machine: the best throughput of large square
matmuls in the same dtype and thread count. ``tokens`` counts every input token that runs forward and backward.

    python bench/train_throughput.py                     # SmolLM2-135M, bf16 autocast, a few steps
    python bench/train_throughput.py --dtype float32
    python bench/train_throughput.py --micro-batch 16 --remove-padding
    python bench/train_throughput.py --smoke             # tiny random model, seconds (CI)
    python bench/train_throughput.py --compare-fused     # model.use_fused_kernels false vs true, one run

``--compare-fused`` builds the actor twice (``actor_rollout_ref.model.use_fused_kernels`` false and true), times
the actor side of a GRPO step on each (the old-log-prob pass and the update) in alternation, and prints both step
times and their ratio (fused / plain; below 1 is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass

import torch


@dataclass
class Result:
    model: str
    device: str
    dtype: str
    threads: int
    params: int
    batch: int
    seq_len: int
    micro_batch: int
    remove_padding: bool
    step_seconds: float
    tokens_per_s: float
    achieved_tflops: float
    peak_tflops: float
    mfu: float


def measure_matmul_peak(dtype: torch.dtype, device: torch.device, size: int, seconds: float = 2.0) -> float:
    """Best observed FLOP/s of ``[size, size] @ [size, size]`` (2 * size^3 FLOPs each) in ``dtype`` on ``device``."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    for _ in range(2):  # warm-up (kernel selection, AMX tile configuration)
        a @ b
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, 4 * 2 * size**3 / (time.perf_counter() - t0))
    return best


def _config(model_path: str, args: argparse.Namespace, fused: bool = False):
    from verl.trainer.config.loader import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.use_fused_kernels={str(fused).lower()}",
            f"actor_rollout_ref.model.path={model_path}",
            "actor_rollout_ref.rollout.n=1",
            f"data.train_batch_size={args.batch}",
            f"data.max_response_length={args.response_len}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
            f"actor_rollout_ref.actor.dtype={args.dtype}",
            f"actor_rollout_ref.model.use_remove_padding={str(args.remove_padding).lower()}",
            "actor_rollout_ref.actor.optim.lr=1e-6",
            "algorithm.adv_estimator=gae",
            f"critic.ppo_micro_batch_size_per_gpu={args.micro_batch}",
        ]
    )


def _batch(args: argparse.Namespace, vocab: int):
    """A full (unpadded) batch of random tokens with fixed advantages: every token is trained on."""
    from verl.protocol import DataProto

    gen = torch.Generator().manual_seed(0)
    seq = args.prompt_len + args.response_len
    ids = torch.randint(0, vocab, (args.batch, seq), generator=gen)
    mask = torch.ones_like(ids)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": torch.arange(seq).repeat(args.batch, 1),
            "responses": ids[:, args.prompt_len :],
            "response_mask": mask[:, args.prompt_len :],
            "old_log_probs": torch.full((args.batch, args.response_len), -5.0),
            "advantages": torch.randn(args.batch, args.response_len, generator=gen),
        },
        meta_info={"global_steps": 1},
    )


def run(args: argparse.Namespace) -> Result:
    from verl.single_controller import create_worker_group
    from verl.utils.device import get_device_name, get_torch_device
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    torch.set_num_threads(args.threads)
    device = get_torch_device(get_device_name())
    model_path = args.model
    if args.smoke:
        from verl.models.tiny import make_tiny_model_dir

        model_path = make_tiny_model_dir(tempfile.mkdtemp(prefix="verl_bench_tiny_"))
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    peak = measure_matmul_peak(dtype, device, 256 if args.smoke else args.peak_size, 0.3 if args.smoke else 3.0)

    cfg = _config(model_path, args)
    group = create_worker_group("local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor"})
    group.init_model()
    module = group.workers[0].actor_module
    params = sum(p.numel() for p in module.parameters())
    data = _batch(args, int(module.config.vocab_size))
    tokens = args.batch * (args.prompt_len + args.response_len)

    group.update_actor(data)  # warm-up: allocator, optimizer state, oneDNN kernels
    times = []
    for _ in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        group.update_actor(data)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step = min(times)  # the least disturbed step on a shared machine
    achieved = 6 * params * tokens / step
    return Result(
        model="tiny" if args.smoke else args.model,
        device=str(device),
        dtype=args.dtype,
        threads=torch.get_num_threads(),
        params=params,
        batch=args.batch,
        seq_len=args.prompt_len + args.response_len,
        micro_batch=args.micro_batch,
        remove_padding=args.remove_padding,
        step_seconds=round(step, 4),
        tokens_per_s=round(tokens / step, 1),
        achieved_tflops=round(achieved / 1e12, 4),
        peak_tflops=round(peak / 1e12, 4),
        mfu=round(achieved / peak, 4),
    )


def compare_fused(args: argparse.Namespace) -> dict[str, float]:
    """Actor-side GRPO step time (old-log-prob pass + update) with ``use_fused_kernels`` false and true."""
    from verl.single_controller import create_worker_group
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    torch.set_num_threads(args.threads)
    model_path = args.model
    if args.smoke:
        from verl.models.tiny import make_tiny_model_dir

        model_path = make_tiny_model_dir(tempfile.mkdtemp(prefix="verl_bench_tiny_"))
    groups = {}
    for fused in (False, True):
        cfg = _config(model_path, args, fused)
        groups[fused] = create_worker_group(
            "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor"}
        )
        groups[fused].init_model()
    vocab = int(groups[False].workers[0].actor_module.config.vocab_size)
    data = _batch(args, vocab)

    def step(group) -> float:
        t0 = time.perf_counter()
        group.compute_log_prob(data)
        group.update_actor(data)
        return time.perf_counter() - t0

    for group in groups.values():
        step(group)  # warm-up
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.steps):
        for fused, group in groups.items():
            times[fused].append(step(group))
    plain, fused = min(times[False]), min(times[True])
    return {
        "model": "tiny" if args.smoke else args.model,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        "tokens_per_step": args.batch * (args.prompt_len + args.response_len),
        "plain_step_s": round(plain, 3),
        "fused_step_s": round(fused, 3),
        "fused_over_plain": round(fused / plain, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--batch", type=int, default=8, help="sequences per update (one mini-batch)")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--response-len", type=int, default=192)
    parser.add_argument("--steps", type=int, default=3, help="timed updates after one warm-up")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: cores)")
    parser.add_argument("--peak-size", type=int, default=2048, help="matmul size for the peak measurement")
    parser.add_argument("--remove-padding", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny random model and batch; finishes in seconds")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument("--compare-fused", action="store_true", help="use_fused_kernels false vs true, one run")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.micro_batch, args.prompt_len, args.response_len, args.steps = 4, 2, 8, 8, 1
    if args.compare_fused:
        print(json.dumps(compare_fused(args)))
        return
    result = run(args)
    if args.json:
        print(json.dumps(asdict(result)))
        return
    width = max(len(k) for k in asdict(result))
    for key, value in asdict(result).items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
