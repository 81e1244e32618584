"""verl: reinforcement-learning post-training of LLMs on the HybridFlow design.

Heavy submodules load on first use, so ``import verl`` stays fast; ``from verl import PPOTrainer`` works as in the
user documents.
"""

from __future__ import annotations

import importlib
from typing import Any

from verl import absent_modules as _absent_modules
from verl.utils import _moved
from verl.version import __version__

_absent_modules.install()  # upstream paths of features not provided here fail with a message saying so
_moved.install()  # verl's paths of modules that live elsewhere here name the same module objects

# public name -> module that defines it (loaded lazily by __getattr__)
_LAZY_ATTRS: dict[str, str] = {
    "DataProto": "verl.protocol",
    "ActorModel": "verl.api.models",
    "Actor": "verl.api.models",
    "CriticModel": "verl.api.models",
    "RewardModel": "verl.api.models",
    "RolloutManager": "verl.api.rollout",
    "vLLMActor": "verl.api.rollout",
    "PPOTrainer": "verl.api.ppo",
    "DPOTrainer": "verl.api.offline",
    "KTOTrainer": "verl.api.offline",
    "SFTTrainer": "verl.api.offline",
    "DataProvider": "verl.api.data",
    "DeviceMesh": "verl.api.device_mesh",
    "Evaluator": "verl.api.evaluation",
    "RolloutWorker": "verl.api.dataflow",
    "ReplayBuffer": "verl.api.replay_buffer",
    "BaseTrainer": "verl.trainer.base",
    "BaseAlgorithm": "verl.algorithms.base_algorithm",
}

__all__ = ["__version__", *_LAZY_ATTRS]


def __getattr__(name: str) -> Any:
    module = _LAZY_ATTRS.get(name)
    if module is None:
        raise AttributeError(f"module 'verl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
