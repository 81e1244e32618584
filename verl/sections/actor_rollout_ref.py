"""The ``actor_rollout_ref`` section, handed to ``ActorRolloutRefWorker`` (verl's hybrid engine)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.base_config import BaseConfig
from verl.sections.actor import ActorConfig, RefConfig
from verl.sections.model import ModelConfig
from verl.sections.rollout import RolloutConfig


@dataclass
class ActorRolloutRefConfig(BaseConfig):
    """``actor_rollout_ref``: the section handed to ``ActorRolloutRefWorker``."""

    hybrid_engine: bool = True
    nccl_timeout: int = 600  # seconds: timeout of the workers' process-group operations (upstream's key)
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
