"""One-step-off-policy PPO/GRPO: the rollout of batch k+1 runs while batch k trains.

Upstream verl's ``verl/experimental/one_step_off_policy``: the rollout workers generate the next batch with the
weights before the current update, while the trainer updates on the current batch; after the update the new
weights are pushed to the rollout workers. That is the fully asynchronous schedule with a staleness of exactly one
version, one batch per step and a push after every step, so this trainer is
:class:`~verl.trainer.fully_async_policy.fully_async_trainer.FullyAsyncRayPPOTrainer` with that schedule fixed
(``async_training.staleness_threshold``, ``trigger_parameter_sync_step`` and ``require_batches`` are not read;
``partial_rollout`` is refused by the config checks). Every batch after the first is one version stale
(``async/staleness/max`` = 1); the first is generated with the initial weights (0).
"""

from __future__ import annotations

from verl.trainer.fully_async_policy.fully_async_trainer import FullyAsyncRayPPOTrainer

__all__ = ["OneStepOffRayPPOTrainer"]


class OneStepOffRayPPOTrainer(FullyAsyncRayPPOTrainer):
    """Generation of the next batch overlaps the update on the current one (staleness 1, push every step)."""

    def schedule_staleness(self) -> float:
        return 1.0

    def schedule_trigger(self) -> int:
        return 1

    def schedule_require_batches(self) -> int:
        return 1

    def policy_staleness_bound(self) -> tuple[int, str]:
        return 1, "the one-step-off schedule (each batch generated one version before it trains)"
