"""The high-level Python API re-exported from ``verl`` (``from verl import PPOTrainer, DPOTrainer, ...``).

Submodules load on first use (see ``verl/__init__.py``): ``models`` (ActorModel, Actor, CriticModel, RewardModel),
``rollout`` (RolloutManager, vLLMActor), ``ppo`` (PPOTrainer), ``data`` (DataProvider), ``device_mesh``
(DeviceMesh), ``dataflow`` (the ``actor.sample() >> reward.score() >> ppo.update()`` pipeline, RolloutWorker),
``replay_buffer`` (ReplayBuffer), ``offline``
(SFT/DPO/KTO trainers) and ``evaluation`` (Evaluator).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "ActorModel": "verl.api.models",
    "Actor": "verl.api.models",
    "CriticModel": "verl.api.models",
    "RewardModel": "verl.api.models",
    "RolloutManager": "verl.api.rollout",
    "vLLMActor": "verl.api.rollout",
    "PPOTrainer": "verl.api.ppo",
    "DataProvider": "verl.api.data",
    "DeviceMesh": "verl.api.device_mesh",
    "Pipeline": "verl.api.dataflow",
    "RolloutWorker": "verl.api.dataflow",
    "ReplayBuffer": "verl.api.replay_buffer",
    "SFTTrainer": "verl.api.offline",
    "DPOTrainer": "verl.api.offline",
    "KTOTrainer": "verl.api.offline",
    "Evaluator": "verl.api.evaluation",
    "RewardEvaluator": "verl.api.evaluation",
    "AccuracyEvaluator": "verl.api.evaluation",
    "KLEvaluator": "verl.api.evaluation",
    "DiversityEvaluator": "verl.api.evaluation",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'verl.api' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
