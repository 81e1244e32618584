"""The optimizer section (``actor.optim``, ``critic.optim``): AdamW and its learning-rate schedule.

Upstream verl v0.9 names (``verl/workers/config/optimizer.py``): :data:`OptimizerConfig` is this section;
:class:`FSDPOptimizerConfig` is the same section with upstream's FSDP default ``min_lr_ratio=None`` (no floor);
:class:`McoreOptimizerConfig` (Megatron-Core) is refused at construction, there being no Megatron engine here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from verl.base_config import BaseConfig, list_field
from verl.sections.literals import WarmupStyle

_SCHEDULES = ("constant", "cosine")


@dataclass
class OptimConfig(BaseConfig):
    """``actor.optim`` / ``critic.optim``: AdamW and its learning-rate schedule.

    ``lr_scheduler_type`` (and its deprecated name ``warmup_style``, which wins when set and is copied into
    ``lr_scheduler_type``) must be ``constant`` or ``cosine``; ``num_cycles`` is the cosine's number of periods
    over the training steps (0.5: one half-cosine from ``lr`` down to ``min_lr_ratio * lr``,
    :func:`verl.utils.optim.get_cosine_schedule_with_warmup`); ``min_lr_ratio`` None means 0.
    """

    lr: float = 1.0e-5
    weight_decay: float = 0.0
    betas: list[float] = list_field(0.9, 0.999)
    eps: float = 1.0e-8
    lr_warmup_steps: int = 0
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler_type: WarmupStyle = "constant"
    warmup_style: Optional[WarmupStyle] = None  # deprecated name of lr_scheduler_type; when set, it wins
    min_lr_ratio: Optional[float] = 0.0
    num_cycles: float = 0.5  # cosine periods over the run (0.5: one half-cosine)
    total_training_steps: int = -1
    # the optimizer class: <optimizer_impl>.<optimizer> (upstream v0.9's keys), built with lr, weight_decay, betas
    # and eps (Adam-family names) and then override_optimizer_config's keyword arguments
    optimizer: str = "AdamW"
    optimizer_impl: str = "torch.optim"
    override_optimizer_config: Optional[dict[str, Any]] = None
    zero_indexed_step: bool = True  # false: the schedule's first update is its step 1, not 0 (torchtitan's count)

    def __post_init__(self) -> None:
        for key in ("optimizer", "optimizer_impl"):
            if not str(getattr(self, key)).strip():
                raise ValueError(f"optim.{key} is empty: name the optimizer (AdamW) and its module (torch.optim)")
        if self.warmup_style is not None:
            if self.warmup_style not in _SCHEDULES:
                raise ValueError(
                    f"optim.warmup_style={self.warmup_style!r} (the deprecated name of lr_scheduler_type): expected "
                    f"one of {list(_SCHEDULES)}"
                )
            self.lr_scheduler_type = self.warmup_style
        if self.lr_scheduler_type not in _SCHEDULES:
            raise ValueError(f"optim.lr_scheduler_type={self.lr_scheduler_type!r}: expected one of {list(_SCHEDULES)}")


#: upstream verl's name of the optimizer section's base class (``verl.workers.config.OptimizerConfig``)
OptimizerConfig = OptimConfig


@dataclass
class FSDPOptimizerConfig(OptimConfig):
    """Upstream's FSDP optimizer section: :class:`OptimConfig` with ``min_lr_ratio`` None (no cosine floor) by
    default, as upstream v0.9 declares it."""

    min_lr_ratio: Optional[float] = None


class McoreOptimizerConfig(OptimConfig):
    """Upstream's Megatron-Core optimizer section: refused, there is no Megatron engine here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "McoreOptimizerConfig: the Megatron-Core engine is not available here (FSDP2 only); use "
            "OptimizerConfig / FSDPOptimizerConfig (actor_rollout_ref.actor.strategy=fsdp2)"
        )
