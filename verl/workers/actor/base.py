"""The interface of a PPO actor: log-probs of responses and a policy update, on one data-parallel rank."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from verl.protocol import DataProto


class BasePPOActor(ABC):
    """An actor holds a policy module; the worker around it handles sharding, weights sync and checkpoints.

    Args:
        config: the ``actor_rollout_ref.actor`` config section.
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs ``[bs, response_len]`` of ``data.batch['responses']`` (and entropies, if asked)."""

    @abstractmethod
    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """One PPO update over ``data``; returns metric name -> values."""
