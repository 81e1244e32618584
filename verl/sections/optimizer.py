"""The optimizer section (``actor.optim``, ``critic.optim``): AdamW and its learning-rate schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl.base_config import BaseConfig, list_field
from verl.sections.literals import WarmupStyle


@dataclass
class OptimConfig(BaseConfig):
    """``actor.optim`` / ``critic.optim``: AdamW and its learning-rate schedule."""

    lr: float = 1.0e-5
    weight_decay: float = 0.0
    betas: list[float] = list_field(0.9, 0.999)
    eps: float = 1.0e-8
    lr_warmup_steps: int = 0
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler_type: WarmupStyle = "constant"
    warmup_style: Optional[WarmupStyle] = None  # deprecated name of lr_scheduler_type; when set, it wins
    min_lr_ratio: float = 0.0
    total_training_steps: int = -1
