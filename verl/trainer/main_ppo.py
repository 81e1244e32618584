"""``python -m verl.trainer.main_ppo [--config FILE.yaml] [--cfg job] key=value ...``: PPO/GRPO training.

The defaults are ``verl/trainer/config/ppo_trainer.yaml`` (GRPO on the bundled arithmetic task); every key can be
overridden with verl's names, e.g. ``algorithm.adv_estimator=gae data.train_batch_size=32``. See docs/config.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.schema import PPOConfig


def _load_run_ppo() -> Callable[[DictConfig], Any]:
    # Imported only when training: torch, transformers and the workers are not needed to print or check a config.
    from verl.trainer.ppo.runner import run_ppo

    return run_ppo


def __getattr__(name: str) -> Any:
    # verl's names, imported on first use (training code is not needed to print or check a config)
    if name in ("run_ppo", "create_rl_dataset"):
        from verl.trainer.ppo import runner

        return getattr(runner, name)
    if name == "create_rl_sampler":
        from verl.data.sampler import create_rl_sampler

        return create_rl_sampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Run PPO from command-line arguments (``sys.argv[1:]`` when ``argv`` is None); returns the exit code."""
    return run_entrypoint(
        argv,
        prog="python -m verl.trainer.main_ppo",
        description="PPO / GRPO training of an LLM policy (verl key names; defaults in ppo_trainer.yaml).",
        config_name=PPOConfig.config_name,
        schema=PPOConfig,
        load_run_fn=_load_run_ppo,
    )


if __name__ == "__main__":
    sys.exit(main())
