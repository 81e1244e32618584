"""The reward section (``reward_model``): the reward model and the reward manager that scores responses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from verl.base_config import BaseConfig, dict_field
from verl.sections.literals import ComputeDType
from verl.sections.model import RewardModelModelConfig


@dataclass
class OverlongBufferConfig(BaseConfig):
    """``reward_model.overlong_buffer``: DAPO's soft length penalty (dapo reward manager only)."""

    enable: bool = False
    len: int = 8
    penalty_factor: float = 1.0
    log: bool = False


@dataclass
class RemoteRewardConfig(BaseConfig):
    """``reward_model.remote``: a reward function served over HTTP (POST json -> ``{"score": float}``)."""

    url: Optional[str] = None
    timeout_s: float = 10.0
    max_retries: int = 3
    max_concurrency: int = 8


@dataclass
class SandboxFusionConfig(BaseConfig):
    """``reward_model.sandbox_fusion``: run the default scorer's code rewards on a Sandbox Fusion server."""

    url: Optional[str] = None  # e.g. http://127.0.0.1:8080/run_code; null: the local sandbox
    max_concurrent: int = 64  # requests in flight per reward process
    memory_limit_mb: int = 1024  # memory limit of one test program


@dataclass
class JudgeConfig(BaseConfig):
    """``reward_model.judge``: an LLM judge as the reward (``reward_model.reward_manager=judge``).

    ``backend``: ``openai`` (``url``: an OpenAI-compatible API base such as ``verl serve`` or a vLLM server),
    ``hf`` (``model`` is a model path loaded in the trainer process and decoded by the ``hf`` engine) or ``worker``
    (``model`` loaded the same way by a ``judge`` worker group: colocated with the actor on ``global_pool``, or on
    the pool ``trainer.resource_pool_mapping.judge`` names; the prompts are split over its ranks).
    """

    backend: Literal["openai", "hf", "worker"] = "openai"
    url: Optional[str] = None  # openai: e.g. http://127.0.0.1:8000/v1
    model: Optional[str] = None  # openai: the request's model name; hf / worker: the judge's model path
    api_key_env: Optional[str] = None  # environment variable with a bearer token for the endpoint
    mode: Literal["pointwise", "pairwise"] = "pointwise"
    template: Optional[str] = None  # null: the ready template of the mode
    score_pattern: Optional[str] = None  # regex with one group around the verdict; null: the mode's default
    max_score: float = 10.0  # pointwise: ratings in [0, max_score] are divided by it
    both_orders: bool = True  # pairwise: judge every pair in both orders (cancels position bias)
    max_new_tokens: int = 256
    temperature: float = 0.0
    max_concurrency: int = 8  # openai: requests in flight; hf / worker: rows per generate call (per rank)
    timeout_s: float = 60.0
    max_retries: int = 2
    on_error: Literal["zero", "skip", "raise"] = "zero"
    weight: float = 1.0  # reward = weight * judge score + rule_weight * rule score
    rule_weight: float = 0.0  # 0: the rule scorer (custom_reward_function / default) is not called
    # judge each agent-loop trajectory as soon as it ends, during the rollout (openai, pointwise, multi_turn only)
    overlap_rollout: bool = False


@dataclass
class RewardModelConfig(BaseConfig):
    """``reward_model``: the reward model and the reward manager that turns responses into token-level scores."""

    enable: bool = False
    # verl's January-2026 keys, the same settings as reward.reward_model.* (verl/trainer/config/reward_section.py):
    # use_reward_loop=true reads `rollout` (the reward model's serving engine, reward_rollout.py); false ignores it
    use_reward_loop: bool = True
    rollout: dict[str, Any] = dict_field()
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 0
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size_per_gpu: int = 16
    dtype: ComputeDType = "auto"
    max_length: Optional[int] = None
    # share of its device the reward model's weights + a scoring micro-batch's activations may take (upstream's reward
    # rollout gpu_memory_utilization; verl/workers/reward_model_budget.py); own pool: also its process's CUDA cap
    gpu_memory_utilization: Optional[float] = None
    reward_manager: str = "naive"  # naive | batch | dapo | any name registered with reward_manager.register
    reward_kwargs: dict[str, Any] = dict_field()  # extra keyword arguments of the reward manager's constructor
    launch_reward_fn_async: bool = False
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    on_error: Literal["fail", "zero"] = "fail"
    timeout_s: float = 30.0
    batch_timeout_s: Optional[float] = None  # deadline of one batch's scoring; null: only the per-sample limit
    num_workers: Optional[int] = None  # reward worker processes; null: min(8, CPUs); 0: in the trainer process
    remote: RemoteRewardConfig = field(default_factory=RemoteRewardConfig)
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
