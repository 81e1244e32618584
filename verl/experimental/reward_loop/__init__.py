"""verl's reward-loop surface (``verl.experimental.reward_loop``): the asynchronous reward managers.

:mod:`verl.experimental.reward_loop.reward_manager` holds the ``naive``, ``dapo`` and ``rate_limited`` managers
(``await manager.run_single(data)`` per sample, or ``manager(data)`` for a batch), built on this verl's reward
functions. verl's ``RewardLoopManager`` / ``RewardLoopWorker`` (Ray workers scoring beside the rollout) and
``RewardModelManager`` (reward-model inference servers) are not provided: the trainer scores each batch with the
reward manager of ``reward_model.reward_manager`` (docs/data_and_rewards.md); importing those names raises an
``ImportError`` that says so.
"""

from __future__ import annotations

from typing import Any

_NOT_PROVIDED = {
    "RewardLoopManager": "upstream's Ray reward-loop workers",
    "RewardLoopWorker": "upstream's Ray reward-loop workers",
    "migrate_legacy_reward_impl": "upstream's reward-loop config migration",
    "RewardModelManager": "upstream's reward-model inference servers",
}


def __getattr__(name: str) -> Any:
    if name in _NOT_PROVIDED:
        from verl.utils.config import RECIPE_MAIN_HINT

        # verl-recipe's DAPO entry point imports migrate_legacy_reward_impl first: say how that recipe runs here
        hint = f"; {RECIPE_MAIN_HINT}" if name == "migrate_legacy_reward_impl" else ""
        raise ImportError(
            f"verl.experimental.reward_loop.{name}: {_NOT_PROVIDED[name]} are not provided here; the trainer scores "
            "each batch with reward_model.reward_manager (naive|batch|dapo|prime|judge), and the reward-loop "
            f"managers of verl.experimental.reward_loop.reward_manager score single samples asynchronously{hint}"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
