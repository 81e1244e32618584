"""Upstream verl v0.9's ``verl.trainer.ppo.v1.trainer_sync``: ``trainer.v1.trainer_mode=sync`` runs the
synchronous PPO driver (:class:`verl.trainer.ppo.ray_trainer.RayPPOTrainer`), rollout and training colocated, no
partial rollout."""

from __future__ import annotations

from verl.trainer.ppo.ray_trainer import RayPPOTrainer

__all__ = ["PPOTrainerSync"]

#: the trainer of ``trainer_mode=sync``
PPOTrainerSync = RayPPOTrainer
