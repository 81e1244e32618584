"""GRPO with images on CPU: a tiny random Qwen2-VL learns to tell red images from blue ones.

Every prompt reads ``<image>What colour is the image?``; only the image differs, so the reward
(:mod:`verl.rewards.colour`, about 0.5 for a random policy) rises only if the policy reads the image.
The script writes the tiny model (:mod:`verl.models.tiny_vlm`) and the train/validation parquet files
(:mod:`verl.data.synthetic_vision`) under ``--workdir``, then runs ``python -m verl.trainer.main_ppo``
in-process with the overrides below; any further ``key=value`` arguments are passed on.

    python examples/vision/colour_grpo.py --workdir /tmp/colour_grpo trainer.total_training_steps=30

See docs/vision_language.md.
"""

from __future__ import annotations

import argparse
import os
import sys


def prepare(workdir: str, seed: int = 0) -> dict[str, str]:
    """Write the tiny VLM and the parquet files under ``workdir`` (once); returns their paths."""
    from verl.data.synthetic_vision import write_colour_parquet
    from verl.models.tiny_vlm import make_tiny_vlm

    paths = {
        "model": os.path.join(workdir, "tiny_qwen2_vl"),
        "train": os.path.join(workdir, "train.parquet"),
        "val": os.path.join(workdir, "test.parquet"),
    }
    if not os.path.isfile(os.path.join(paths["model"], "config.json")):
        make_tiny_vlm("qwen2_vl", save_dir=paths["model"], seed=seed)
    if not os.path.isfile(paths["train"]):
        write_colour_parquet(paths["train"], n=64, seed=seed, split="train")
        write_colour_parquet(paths["val"], n=16, seed=seed + 1, split="test")
    return paths


def overrides(paths: dict[str, str], out_dir: str) -> list[str]:
    """The main_ppo overrides of this example (GRPO, 16 prompts x 16 samples a step, one-token answers: the scorer
    reads the first character; 4 updates a step)."""
    return [
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.model.path={paths['model']}",
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['val']}",
        "data.train_batch_size=16",
        "data.max_prompt_length=64",
        "data.max_response_length=1",
        "data.image_key=images",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=16",  # large groups: a less noisy signal, learning less sensitive to the seed
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",  # 4 updates a step
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.model.use_remove_padding=false",
        "trainer.total_training_steps=30",
        "trainer.test_freq=10",
        "trainer.logger=[console,file]",
        "trainer.experiment_name=colour_vlm_grpo",
        f"trainer.default_local_dir={out_dir}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/verl_colour_grpo")
    args, extra = parser.parse_known_args(argv)
    from verl.trainer import main_ppo

    paths = prepare(args.workdir)
    return main_ppo.main(overrides(paths, os.path.join(args.workdir, "run")) + extra)


if __name__ == "__main__":
    sys.exit(main())
