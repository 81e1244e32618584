"""Reward managers: turn a rollout batch into token-level scores. Registered: ``naive``, ``batch``, ``dapo``,
``gdpo``, ``judge``, ``prime``; ``rate_limited`` (verl.experimental.reward_loop's) registers itself here when its
module is imported, as ``verl.trainer.ppo.reward.load_reward_manager`` does."""

from verl.workers.reward_manager.abstract import (
    AbstractRewardManager,
    RewardComputationError,
    RewardTimeoutError,
)
from verl.workers.reward_manager.batch import BatchRewardManager
from verl.workers.reward_manager.dapo import DAPORewardManager
from verl.workers.reward_manager.gdpo import GDPORewardManager
from verl.workers.reward_manager.judge import JudgeRewardManager
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.prime import PrimeRewardManager
from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY, get_reward_manager_cls, register

__all__ = [
    "AbstractRewardManager",
    "BatchRewardManager",
    "DAPORewardManager",
    "GDPORewardManager",
    "JudgeRewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "REWARD_MANAGER_REGISTRY",
    "RewardComputationError",
    "RewardTimeoutError",
    "get_reward_manager_cls",
    "register",
]
