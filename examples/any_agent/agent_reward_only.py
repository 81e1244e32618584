"""The rule reward of the any-agent example: 0 for every response, so the reward is the agent's own (the number
its ``run`` returns, ``actor_rollout_ref.rollout.agent.openai.reward=agent``, added by the trainer to this score).
Used as ``custom_reward_function.path`` (verl's per-sample contract)."""

from __future__ import annotations

from typing import Any


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """0.0: the agent's reward is the whole reward."""
    return 0.0
