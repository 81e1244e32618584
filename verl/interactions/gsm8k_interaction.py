"""verl's GSM8K interaction (``verl.interactions.gsm8k_interaction.Gsm8kInteraction``): check the model's answer,
tell it whether it is right, and let it try again while it is wrong (up to ``rollout.multi_turn.max_user_turns``).

Interaction kwargs of a sample (``extra_info.interaction_kwargs``): ``name`` (the interaction's name, e.g.
``gsm8k``) and ``ground_truth``. The turn score is 1.0 for a correct answer, else 0.0. Answers are read as GSM8K
answers (``#### 72``, or the last number in ``flexible`` mode: ``config.method``, default ``flexible``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from verl.base_config import omega_conf_to_dataclass
from verl.interactions.base import BaseInteraction, InteractionConfig, InteractionResult
from verl.rewards import gsm8k

__all__ = ["Gsm8kInteraction"]


@dataclass
class Gsm8kInteractionConfig(InteractionConfig):
    """``config`` of the GSM8K interaction: ``method`` of the answer extraction (``strict``: ``#### 42`` only)."""

    method: str = "flexible"


class Gsm8kInteraction(BaseInteraction):
    """Feedback on GSM8K answers; the episode ends at the first correct answer."""

    def __init__(self, config: dict[str, Any] | None) -> None:
        super().__init__(config)
        self.method = str(omega_conf_to_dataclass(self.config, Gsm8kInteractionConfig).method)
        if self.method not in ("strict", "flexible"):
            raise ValueError(f"Gsm8kInteraction: config.method={self.method!r} must be 'strict' or 'flexible'")
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, ground_truth: Any = None, **kwargs: Any) -> str:
        if ground_truth is None:
            raise ValueError("Gsm8kInteraction: interaction_kwargs needs a ground_truth")
        instance_id = instance_id or str(uuid4())
        self._instances[instance_id] = {"ground_truth": str(ground_truth), "response": "", "reward": 0.0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> InteractionResult:
        state = self._instances[instance_id]
        answer = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "assistant"), "")
        state["response"] = answer
        reward = await self.calculate_score(instance_id)
        state["reward"] = reward
        if reward == 1.0:
            return True, "Your response is correct!", reward, {}
        return False, "Your response is incorrect! You need to reflect on your answer and try again.", reward, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instances[instance_id]
        return float(gsm8k.compute_score(state["response"], state["ground_truth"], method=self.method))

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)
