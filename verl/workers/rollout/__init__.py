"""Rollout engines behind one interface: ``hf`` (transformers generate on the actor's module) and ``vllm``."""

from verl.workers.rollout.base import BaseRollout, available_rollouts, get_rollout_class, register_rollout
from verl.workers.rollout.hf_rollout import HFRollout
from verl.workers.rollout.vllm_rollout import vLLMRollout

__all__ = ["BaseRollout", "HFRollout", "available_rollouts", "get_rollout_class", "register_rollout", "vLLMRollout"]
