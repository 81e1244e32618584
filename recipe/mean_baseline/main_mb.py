"""``python -m recipe.mean_baseline.main_mb key=value ...``: train with the recipe's pieces.

The recipe's defaults (estimator, loss, reward manager, dataset class) come first; command-line overrides win.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import recipe.mean_baseline  # noqa: F401  (registers the estimator, the loss and the reward manager)
from recipe.mean_baseline.mb_ray_trainer import MeanBaselineRayTrainer

RECIPE_DEFAULTS = [
    "algorithm.adv_estimator=recipe_median_baseline",
    "actor_rollout_ref.actor.policy_loss.loss_mode=recipe_truncated_is",
    "reward_model.reward_manager=recipe_difficulty",
    f"data.custom_cls.path={os.path.join(os.path.dirname(os.path.abspath(__file__)), 'dataset.py')}",
    "data.custom_cls.name=DifficultyTaggedDataset",
]


def build_config(overrides: list[str]) -> Any:
    """The job config: ``ppo_trainer.yaml``, then the recipe's defaults, then ``overrides``."""
    from verl.trainer.config import load_config

    return load_config(RECIPE_DEFAULTS + list(overrides))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the recipe; returns :func:`verl.trainer.main_ppo.run_ppo`'s result."""
    from verl.trainer.main_ppo import run_ppo

    config = build_config(sys.argv[1:] if argv is None else argv)
    return run_ppo(config, trainer_cls=MeanBaselineRayTrainer)


if __name__ == "__main__":
    main()
