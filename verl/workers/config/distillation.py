"""The ``distillation`` section of a PPO run: on-policy distillation from a teacher as a dense per-token reward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from verl.base_config import BaseConfig
from verl.workers.config.literals import ComputeDType


@dataclass
class TeacherModelConfig(BaseConfig):
    """``distillation.teacher``: the frozen teacher (its tokenizer must equal the actor's)."""

    path: Optional[str] = None
    tokenizer_path: Optional[str] = None  # null: teacher.path
    trust_remote_code: bool = False


@dataclass
class DistillationConfig(BaseConfig):
    """``distillation``: each response token gets ``-coef * (log pi_actor(y_t) - log pi_teacher(y_t))`` added to its
    reward (the per-token reverse KL on the actor's own samples), and the task reward is scaled by
    ``task_reward_weight``; the teacher runs in its own worker group (role ``teacher``)."""

    enable: bool = False
    teacher: TeacherModelConfig = field(default_factory=TeacherModelConfig)
    coef: float = 1.0
    task_reward_weight: float = 1.0
    micro_batch_size_per_gpu: int = 8
    dtype: ComputeDType = "auto"
