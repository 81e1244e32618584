"""The interaction interface: a simulated user or environment that answers the model between assistant turns.

After an assistant turn without tool calls, the agent loop hands the conversation to the sample's interaction
(``extra_info.interaction_kwargs.name``), which replies as the user, scores the turn and says whether the episode
is over. The reply is appended as a user message whose tokens get ``response_mask`` 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from verl.base_config import BaseConfig, omega_conf_to_dataclass

__all__ = ["BaseInteraction", "InteractionConfig", "InteractionResult"]


@dataclass
class InteractionConfig(BaseConfig):
    """An interaction entry's ``config`` mapping plus its ``name``; an interaction with keys of its own subclasses
    this (its fields are the one home of their defaults)."""

    name: str = "interaction_agent"  # how samples select it (extra_info.interaction_kwargs.name)


InteractionResult = tuple[bool, str, float, dict[str, Any]]
"""``generate_response``'s value: ``(should_terminate_sequence, response_content, turn_score, additional_data)``."""


class BaseInteraction:
    """Base class of interactions.

    Args:
        config: the entry's ``config`` mapping plus its ``name`` (how samples select it).
    """

    def __init__(self, config: dict[str, Any] | None) -> None:
        self.config: dict[str, Any] = dict(config or {})
        self.name: str = str(omega_conf_to_dataclass(self.config, InteractionConfig).name)

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Start one trajectory's interaction (``kwargs``: the sample's ``interaction_kwargs``); returns its id."""
        return str(uuid4()) if instance_id is None else instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> InteractionResult:
        """Answer the conversation ``messages`` (OpenAI chat messages, the last one the model's)."""
        return False, "Your current result seems acceptable.", 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        """The interaction's score of the trajectory so far."""
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """Free the trajectory's state."""
        return None
