"""Learning curve: GRPO on the bundled arithmetic task with SmolLM2-135M-Instruct, on this machine's CPU.

Runs the product trainer (``RayPPOTrainer.fit``, the code ``main_ppo`` runs) with the demo's defaults, greedy
validation accuracy on ``--val-samples`` held-out problems at step 0 and every ``--eval-every`` steps. Every
evaluation is appended to a JSONL file as soon as it exists (``bench/results/learning.jsonl``: step, wall seconds,
accuracy, mean training reward of the steps since the last evaluation), so a partial run is still a result; a
checkpoint is saved at every evaluation and a new invocation resumes from it (``trainer.resume_mode=auto``) and
keeps appending. The run stops after ``--max-minutes`` of wall time (the last step is followed by a final
evaluation) or ``--max-steps``. ``--plot-only`` redraws ``learning.png`` from the JSONL.

    python bench/learning.py --smoke
    nohup python bench/learning.py --max-minutes 60 > bench/results/learning.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import RESULTS_DIR  # noqa: E402


def _accuracy(metrics: dict[str, float]) -> float | None:
    """Greedy validation accuracy: the arithmetic reward is 1/0, so its mean@1 is the share solved."""
    for key, value in sorted(metrics.items()):
        if key.startswith("val-core/") and key.endswith("/reward/mean@1"):
            return float(value)
    return None


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(jsonl: Path, png: Path) -> Path | None:
    """Accuracy against step and against wall minutes, side by side."""
    rows = [r for r in _read_jsonl(jsonl) if r.get("val_acc") is not None]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = [r["step"] for r in rows]
    minutes = [r["wall_s"] / 60 for r in rows]
    acc = [100 * r["val_acc"] for r in rows]
    for ax, x, label in ((axes[0], steps, "GRPO step"), (axes[1], minutes, "wall minutes (2-core CPU)")):
        ax.plot(x, acc, marker="o")
        ax.set_xlabel(label)
        ax.set_ylabel("greedy val accuracy (%)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"SmolLM2-135M-Instruct, GRPO on arithmetic ({rows[0].get('val_samples', '?')} held-out problems)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def build_overrides(args: argparse.Namespace) -> list[str]:
    overrides = [
        "trainer.logger=[console,file]",
        f"trainer.default_local_dir={args.out_dir}",
        "trainer.resume_mode=auto",
        f"trainer.total_training_steps={args.max_steps}",
        f"trainer.test_freq={args.eval_every}",
        f"trainer.save_freq={args.eval_every}",
        "trainer.max_actor_ckpt_to_keep=1",
        "trainer.val_before_train=true",
        "trainer.export_hf=false",
        "trainer.plot=false",
        f"trainer.torch_threads={args.threads}",
        f"data.val_max_samples={args.val_samples}",
        f"data.train_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.rollout.n={args.group}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.batch * args.group}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
    ]
    if args.smoke:
        from bench._common import make_config_s_dir

        model = make_config_s_dir(os.path.join(args.out_dir, "tiny_model"))
        overrides += [
            f"actor_rollout_ref.model.path={model}",
            "data.max_prompt_length=256",
            "data.max_response_length=4",
            "trainer.total_training_steps=1",
        ]
    return overrides + list(args.override)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny model, one step, 4 validation problems")
    parser.add_argument("--max-minutes", type=float, default=60.0)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--val-samples", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16, help="prompts per step (data.train_batch_size)")
    parser.add_argument("--group", type=int, default=4, help="responses per prompt (rollout.n)")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out-dir", default=os.path.join(tempfile.gettempdir(), "verl_bench_learning"))
    parser.add_argument("--jsonl", default=str(RESULTS_DIR / "learning.jsonl"))
    parser.add_argument("--plot-only", action="store_true")
    parser.add_argument("--override", action="append", default=[], help="extra key=value config override")
    args = parser.parse_args(argv)
    if args.smoke:
        args.val_samples, args.batch, args.group, args.eval_every = 4, 2, 2, 1
        # a fresh directory: a smoke run must never resume (or clobber) a real run's checkpoints
        args.out_dir = tempfile.mkdtemp(prefix="verl_bench_learning_smoke_")
        args.jsonl = str(RESULTS_DIR / "smoke" / "learning.jsonl")
    jsonl = Path(args.jsonl)
    png = jsonl.with_suffix(".png")
    if args.plot_only:
        print(plot(jsonl, png))
        return
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    if args.smoke and jsonl.exists():
        jsonl.unlink()

    from verl.models.loader import load_tokenizer, resolve_model_path
    from verl.trainer.config import load_config
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.runner import apply_runtime_switches, build_datasets, seed_everything

    config = load_config(build_overrides(args))
    seed_everything(int(config.trainer.seed))
    apply_runtime_switches(config.trainer)
    tokenizer = load_tokenizer(resolve_model_path(config.actor_rollout_ref.model.path))
    train_dataset, val_dataset, sampler = build_datasets(config, tokenizer)
    trainer = RayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        reward_fn=load_reward_manager(config, tokenizer, num_examine=0),
        val_reward_fn=load_reward_manager(config, tokenizer, num_examine=0),
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        train_sampler=sampler,
    )
    trainer.init_workers()

    previous = _read_jsonl(jsonl)
    offset = previous[-1]["wall_s"] if previous else 0.0  # wall time of earlier (interrupted) invocations
    start = time.perf_counter()
    budget = args.max_minutes * 60.0
    step_times: list[float] = []
    rewards: list[float] = []
    last = {"t": start}

    def on_step(step: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        if step > 0:
            step_times.append(metrics.get("timing_s/step", now - last["t"]))
            rewards.append(metrics.get("critic/score/mean", float("nan")))
        last["t"] = now
        acc = _accuracy(metrics)
        if acc is not None:
            record = {
                "step": step,
                "wall_s": round(offset + now - start, 1),
                "val_acc": acc,
                "val_samples": args.val_samples,
                "train_score_mean_since_last_eval": (sum(rewards) / len(rewards)) if rewards else None,
                "median_step_s": sorted(step_times)[len(step_times) // 2] if step_times else None,
                "val_s": metrics.get("timing_s/testing"),
            }
            rewards.clear()
            with jsonl.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            plot(jsonl, png)
            print(f"[learning] {json.dumps(record)}", flush=True)
        # stop in time: the next step becomes the last one (it is followed by a final evaluation and checkpoint)
        mean_step = sum(step_times[-5:]) / max(len(step_times[-5:]), 1)
        if step > 0 and now - start + 2 * mean_step + 60 > budget:
            trainer.total_training_steps = min(trainer.total_training_steps, step + 1)

    trainer.step_hooks.append(on_step)
    trainer.fit()
    rows = [r for r in _read_jsonl(jsonl) if r.get("val_acc") is not None]
    if rows:
        gain = 100 * (rows[-1]["val_acc"] - rows[0]["val_acc"])
        print(f"[learning] steps={rows[-1]['step']} wall={rows[-1]['wall_s'] / 60:.1f} min gain={gain:+.1f} points")


if __name__ == "__main__":
    main()
