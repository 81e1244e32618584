"""Reward-loop managers (verl's ``verl.experimental.reward_loop.reward_manager``): ``naive``, ``dapo``,
``rate_limited``, each an asynchronous ``run_single`` per sample on top of this verl's reward functions.

verl's ``gdpo`` and ``remote`` (reward calls in Ray actors) managers are not provided: their modules fail on import
with one line saying what to use instead.
"""

from verl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls, register  # noqa: I001
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
from verl.experimental.reward_loop.reward_manager.limited import AsyncTokenBucket, RateLimitedRewardManager
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

__all__ = [
    "AsyncTokenBucket",
    "DAPORewardManager",
    "NaiveRewardManager",
    "RateLimitedRewardManager",
    "RewardManagerBase",
    "get_reward_manager_cls",
    "register",
]
