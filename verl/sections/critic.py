"""The critic section (``critic``): the value function trained for GAE."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from verl.base_config import BaseConfig
from verl.sections.engine import FSDPConfig
from verl.sections.literals import ComputeDType, LossAggMode
from verl.sections.model import CriticModelConfig
from verl.sections.optimizer import OptimConfig
from verl.sections.profiler import ProfilerConfig


@dataclass
class CriticConfig(BaseConfig):
    """``critic``: the value function trained for GAE (section handed to ``CriticWorker``)."""

    enable: Optional[bool] = None
    strategy: str = "fsdp"  # fsdp | fsdp2 (both FSDP2)
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: int = 256  # YAML: ${actor_rollout_ref.actor.ppo_mini_batch_size}
    ppo_micro_batch_size_per_gpu: int = 16
    ppo_micro_batch_size: Optional[int] = None  # deprecated global size: per_gpu = this // (ranks // ulysses size)
    forward_micro_batch_size_per_gpu: int = 32
    forward_micro_batch_size: Optional[int] = None  # deprecated global size of the value forward
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    ppo_epochs: int = 1  # YAML: ${actor_rollout_ref.actor.ppo_epochs}
    ulysses_sequence_parallel_size: int = 1
    rollout_n: int = 1  # YAML: ${actor_rollout_ref.rollout.n}
    shuffle: bool = False
    cliprange_value: float = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    loss_scale_factor: Optional[int] = None  # seq-mean-token-sum-norm divisor; None: the response length
    grad_clip: float = 1.0
    dtype: ComputeDType = "auto"
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # upstream v0.9 (docs/profiling.md)
