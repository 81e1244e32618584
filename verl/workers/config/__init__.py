"""Typed sections of the workers' config (verl's ``verl.workers.config``): one dataclass per section.

The YAML files hold the defaults; these dataclasses mirror them field for field (a test keeps the two equal), and
the workers receive their section as these dataclasses (:func:`verl.base_config.omega_conf_to_dataclass`).
"""

from verl.workers.config.actor import ActorConfig, CheckpointContentsConfig, PolicyLossConfig, RefConfig
from verl.workers.config.actor_rollout_ref import ActorRolloutRefConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.distillation import DistillationConfig, TeacherModelConfig
from verl.workers.config.engine import FSDPConfig, ModelDType, RefFSDPConfig
from verl.workers.config.literals import CheckpointContent, ComputeDType, LossAggMode, WarmupStyle
from verl.workers.config.model import CriticModelConfig, FusedKernelOptionsConfig, ModelConfig, RewardModelModelConfig
from verl.workers.config.optimizer import OptimConfig
from verl.workers.config.reward_model import (
    JudgeConfig,
    OverlongBufferConfig,
    RemoteRewardConfig,
    RewardModelConfig,
    SandboxFusionConfig,
)
from verl.workers.config.rollout import (
    AgentConfig,
    CheckpointEngineConfig,
    EngineKwargsConfig,
    MultiTurnConfig,
    OpenAIAgentConfig,
    RolloutConfig,
    ValKwargsConfig,
)

__all__ = [
    "DistillationConfig",
    "TeacherModelConfig",
    "ActorConfig",
    "AgentConfig",
    "OpenAIAgentConfig",
    "ActorRolloutRefConfig",
    "CheckpointContent",
    "CheckpointEngineConfig",
    "FusedKernelOptionsConfig",
    "ModelDType",
    "CheckpointContentsConfig",
    "ComputeDType",
    "CriticConfig",
    "CriticModelConfig",
    "EngineKwargsConfig",
    "FSDPConfig",
    "LossAggMode",
    "ModelConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "PolicyLossConfig",
    "RefConfig",
    "RefFSDPConfig",
    "JudgeConfig",
    "RemoteRewardConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "SandboxFusionConfig",
    "ValKwargsConfig",
    "WarmupStyle",
]
