"""Typed sections of the workers' config (verl's ``verl.workers.config``): one dataclass per section.

The YAML files hold the defaults; these dataclasses mirror them field for field (a test keeps the two equal), and
the workers receive their section as these dataclasses (:func:`verl.base_config.omega_conf_to_dataclass`).

Upstream verl v0.9's engine-era class names are here too: ``FSDPActorConfig``, ``FSDPCriticConfig`` and
``HFModelConfig`` name the actor, critic and model sections (FSDP2 is the only engine), ``OptimizerConfig`` the
optimizer section and ``FSDPOptimizerConfig`` its FSDP variant; the Megatron-Core classes (``McoreActorConfig``,
``McoreCriticConfig``, ``McoreOptimizerConfig``) refuse construction with a line saying so.

The modules live on the ground floor, in :mod:`verl.sections`, because floors below the workers read them too (the
policy losses, the optimizer helpers, the LLM judge); this package re-exports every class, and verl's
``verl.workers.config.<module>`` paths (``verl.workers.config.actor``, ...) name the same modules.
"""

from verl.sections.actor import (
    ActorConfig,
    CheckpointContentsConfig,
    FSDPActorConfig,
    McoreActorConfig,
    PolicyLossConfig,
    RefConfig,
)
from verl.sections.actor_rollout_ref import ActorRolloutRefConfig
from verl.sections.critic import CriticConfig, FSDPCriticConfig, McoreCriticConfig
from verl.sections.distillation import DistillationConfig, TeacherModelConfig
from verl.sections.engine import FSDPConfig, ModelDType, RefFSDPConfig
from verl.sections.literals import CheckpointContent, ComputeDType, LossAggMode, WarmupStyle
from verl.sections.model import (
    CriticModelConfig,
    FusedKernelOptionsConfig,
    HFModelConfig,
    ModelConfig,
    RewardModelModelConfig,
)
from verl.sections.optimizer import FSDPOptimizerConfig, McoreOptimizerConfig, OptimConfig, OptimizerConfig
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
    # upstream v0.9's engine-era names: FSDP* / HFModelConfig / OptimizerConfig name the sections above, Mcore*
    # (Megatron-Core) refuse construction
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPOptimizerConfig",
    "HFModelConfig",
    "McoreActorConfig",
    "McoreCriticConfig",
    "McoreOptimizerConfig",
    "OptimizerConfig",
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
