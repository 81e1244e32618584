"""Trainers: the PPO driver (``ppo``), the offline trainers (``offline``), configs and CLI entry points.

``from verl.trainer import BaseTrainer, BaseAlgorithm`` gives the documents' extension points (loaded on first
use, so importing a ``verl.trainer`` submodule stays cheap).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "BaseTrainer": "verl.trainer.base",
    "BaseAlgorithm": "verl.algorithms.base_algorithm",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'verl.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
