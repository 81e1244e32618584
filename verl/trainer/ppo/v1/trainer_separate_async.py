"""Upstream verl v0.9's ``verl.trainer.ppo.v1.trainer_separate_async``: ``trainer.v1.trainer_mode=separate_async``
runs the fully asynchronous trainer
(:class:`verl.trainer.fully_async_policy.fully_async_trainer.FullyAsyncRayPPOTrainer`): rollouter and trainer on
separate resources, partial rollout on, staleness from ``num_warmup_batches`` (:mod:`verl.trainer.config.v1_modes`).
Upstream's ``HybridEngineMode`` switch is not provided (the separate mode here never shares the trainer's GPUs).
"""

from __future__ import annotations

from verl.trainer.fully_async_policy.fully_async_trainer import FullyAsyncRayPPOTrainer

__all__ = ["PPOTrainerSeparateAsync"]

#: the trainer of ``trainer_mode=separate_async``
PPOTrainerSeparateAsync = FullyAsyncRayPPOTrainer
