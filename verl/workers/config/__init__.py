"""Typed sections of the workers' config (verl's ``verl.workers.config``): one dataclass per section.

The YAML files hold the defaults; these dataclasses mirror them field for field (a test keeps the two equal), and
the workers receive their section as these dataclasses (:func:`verl.base_config.omega_conf_to_dataclass`).

The modules live on the ground floor, in :mod:`verl.sections`, because floors below the workers read them too (the
policy losses, the optimizer helpers, the LLM judge); this package re-exports every class, and verl's
``verl.workers.config.<module>`` paths (``verl.workers.config.actor``, ...) name the same modules.
"""

from verl.sections.actor import ActorConfig, CheckpointContentsConfig, PolicyLossConfig, RefConfig
from verl.sections.actor_rollout_ref import ActorRolloutRefConfig
from verl.sections.critic import CriticConfig
from verl.sections.distillation import DistillationConfig, TeacherModelConfig
from verl.sections.engine import FSDPConfig, ModelDType, RefFSDPConfig
from verl.sections.literals import CheckpointContent, ComputeDType, LossAggMode, WarmupStyle
from verl.sections.model import CriticModelConfig, FusedKernelOptionsConfig, ModelConfig, RewardModelModelConfig
from verl.sections.optimizer import OptimConfig
from verl.sections.reward_model import (
    JudgeConfig,
    OverlongBufferConfig,
    RemoteRewardConfig,
    RewardModelConfig,
    SandboxFusionConfig,
)
from verl.sections.rollout import (
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
