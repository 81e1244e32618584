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

    def __post_init__(self) -> None:
        # actor.rollout_n is upstream's second name of rollout.n (upstream's workers fill it in from the rollout
        # section); within one actor_rollout_ref the two are one setting (the config checks refuse a different value)
        object.__setattr__(self.actor, "rollout_n", int(self.rollout.n))
