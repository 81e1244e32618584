"""Upstream verl v0.9's ``verl.trainer.ppo.v1.trainer_colocate_async``: ``trainer.v1.trainer_mode=colocate_async``.

With the default ``trainer.v1.colocate_async.num_warmup_batches=1`` the mode runs the one-step-off-policy trainer
(:class:`verl.trainer.one_step_off_policy.ray_trainer.OneStepOffRayPPOTrainer`): the next batch is generated while
the current one trains. Another warmup count runs the fully asynchronous trainer with that staleness
(:mod:`verl.trainer.config.v1_modes`).
"""

from __future__ import annotations

from verl.trainer.one_step_off_policy.ray_trainer import OneStepOffRayPPOTrainer

__all__ = ["PPOTrainerColocateAsync"]

#: the trainer of ``trainer_mode=colocate_async`` (``num_warmup_batches=1``)
PPOTrainerColocateAsync = OneStepOffRayPPOTrainer
