"""Peak memory of one generate + update_actor step: the hybrid engine (the ``hf`` rollout generates with the
actor's own module) versus a separate rollout copy of the weights (a deepcopy synced after each update).

Each variant runs in a fresh subprocess. On CPU the figure is the growth of the process's peak RSS (VmHWM) over the
RSS after imports, so the Python/torch baseline is excluded; on CUDA it is also ``torch.cuda.max_memory_allocated``.
The model's own fp32 size is printed for scale: training needs roughly weights + gradients + 2 AdamW moments
(4 copies) plus activations; a separate rollout adds one more copy on top.

    python bench/hybrid_engine_memory.py                         # SmolLM2-135M
    python bench/hybrid_engine_memory.py --model /path/to/hf_dir
    python bench/hybrid_engine_memory.py --smoke                 # tiny random model
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

import torch

VARIANTS = ("shared", "separate")


@dataclass
class Result:
    variant: str
    device: str
    model_mib: float
    baseline_rss_mib: float
    peak_rss_growth_mib: float
    cuda_peak_mib: float | None
    generated_tokens: int


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/self/status has no {field}")


def _config(model_path: str, args: argparse.Namespace):
    from verl.trainer.config.loader import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={model_path}",
            "actor_rollout_ref.rollout.n=1",
            f"data.train_batch_size={args.batch}",
            f"data.max_response_length={args.response_len}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.batch}",
            "actor_rollout_ref.rollout.min_new_tokens=" + str(args.response_len),  # same work in both variants
            "algorithm.adv_estimator=gae",
            f"critic.ppo_micro_batch_size_per_gpu={args.batch}",
        ]
    )


def run_variant(variant: str, model_path: str, args: argparse.Namespace) -> Result:
    """One generate + update_actor step in this process, with the rollout sharing or copying the actor's weights."""
    from verl.protocol import DataProto
    from verl.single_controller import create_worker_group
    from verl.workers.fsdp_workers import ActorRolloutRefWorker
    from verl.workers.rollout.hf_rollout import HFRollout

    torch.set_num_threads(args.threads)
    baseline = _rss_mib("VmRSS")
    cfg = _config(model_path, args)
    group = create_worker_group(
        "local", ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor_rollout"}
    )
    group.init_model()
    worker = group.workers[0]
    module = worker.actor_module
    model_mib = sum(p.numel() * p.element_size() for p in module.parameters()) / 2**20
    if variant == "separate":
        # What a non-hybrid engine holds: its own full copy, refreshed from the actor after every update.
        worker.rollout = HFRollout(copy.deepcopy(module), worker.config.rollout, tokenizer=worker.tokenizer)
    device = next(module.parameters()).device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(1000, int(module.config.vocab_size) - 3), (args.batch, args.prompt_len), generator=gen)
    prompts = DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(args.prompt_len).repeat(args.batch, 1),
        }
    )
    out = group.generate_sequences(prompts)
    out = out.union(group.compute_log_prob(out).select(batch_keys=["old_log_probs"]))
    out.batch["advantages"] = torch.randn(out.batch["response_mask"].shape, generator=gen) * out.batch["response_mask"]
    group.update_actor(out)
    if variant == "separate":
        worker.rollout.module.load_state_dict(module.state_dict())
    cuda_peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return Result(
        variant=variant,
        device=str(device),
        model_mib=round(model_mib, 1),
        baseline_rss_mib=round(baseline, 1),
        peak_rss_growth_mib=round(_rss_mib("VmHWM") - baseline, 1),
        cuda_peak_mib=None if cuda_peak is None else round(cuda_peak, 1),
        generated_tokens=int(out.batch["response_mask"].sum()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--response-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--smoke", action="store_true", help="tiny random model; finishes in seconds")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # child process mode
    parser.add_argument("--model-path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(asdict(run_variant(args.variant, args.model_path, args))))
        return

    model_path = args.model
    if args.smoke:
        from verl.models.tiny import make_tiny_model_dir

        model_path = make_tiny_model_dir(tempfile.mkdtemp(prefix="verl_bench_tiny_"))
        args.batch, args.prompt_len, args.response_len = 2, 8, 8
    else:
        from verl.models.loader import resolve_model_path

        model_path = resolve_model_path(model_path)  # convert the bundled model once, outside the measurement
    rows = []
    for variant in VARIANTS:
        cmd = [sys.executable, os.path.abspath(__file__), "--variant", variant, "--model-path", model_path]
        cmd += ["--batch", str(args.batch), "--prompt-len", str(args.prompt_len)]
        cmd += ["--response-len", str(args.response_len), "--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"variant {variant} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    header = ["variant", "device", "model_mib", "baseline_rss_mib", "peak_rss_growth_mib", "cuda_peak_mib"]
    print(" | ".join(header) + " | growth / model")
    for row in rows:
        ratio = row["peak_rss_growth_mib"] / row["model_mib"]
        print(" | ".join(str(row[k]) for k in header) + f" | {ratio:.2f}")
    shared, separate = rows
    print(
        f"separate - shared peak RSS: {separate['peak_rss_growth_mib'] - shared['peak_rss_growth_mib']:.1f} MiB "
        f"(one model copy is {shared['model_mib']:.1f} MiB)"
    )


if __name__ == "__main__":
    main()
