"""The interface of a PPO critic: token values of responses and a value update, on one data-parallel rank."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from verl.protocol import DataProto


class BasePPOCritic(ABC):
    """A critic holds a value model; the worker around it handles sharding and checkpoints.

    Args:
        config: the ``critic`` config section.
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values ``[bs, response_len]`` of the responses in ``data``."""

    @abstractmethod
    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """One value update over ``data``; returns metric name -> values."""
