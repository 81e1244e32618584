"""The critic section (``critic``): the value function trained for GAE."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from verl.base_config import BaseConfig
from verl.sections.actor import LOSS_AGG_MODES, check_micro_batch_sizes
from verl.sections.engine import FSDPConfig
from verl.sections.literals import ComputeDType, LossAggMode
from verl.sections.model import CriticModelConfig
from verl.sections.optimizer import OptimConfig
from verl.sections.profiler import ProfilerConfig


@dataclass
class CriticConfig(BaseConfig):
    """``critic``: the value function trained for GAE (section handed to ``CriticWorker``).

    Upstream verl v0.9's rules (``verl/workers/config/critic.py``) hold at construction: without
    ``use_dynamic_bsz`` exactly one of ``ppo_micro_batch_size`` (deprecated global size) and
    ``ppo_micro_batch_size_per_gpu`` is set, and the deprecated global size divides ``ppo_mini_batch_size``
    (``ValueError`` otherwise). Only the batch sizes may be assigned after construction. This one class is also
    upstream's ``FSDPCriticConfig`` (the FSDP2 engine is the only one here).
    """

    _mutable_fields = frozenset(
        {
            "ppo_mini_batch_size",
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "forward_micro_batch_size",
            "forward_micro_batch_size_per_gpu",
            "ppo_max_token_len_per_gpu",
        }
    )

    enable: Optional[bool] = None
    strategy: str = "fsdp"  # fsdp | fsdp2 (both FSDP2)
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: int = 256  # YAML: ${actor_rollout_ref.actor.ppo_mini_batch_size}
    ppo_micro_batch_size_per_gpu: Optional[int] = 16  # None only with use_dynamic_bsz (or the deprecated global size)
    ppo_micro_batch_size: Optional[int] = None  # deprecated global size: per_gpu = this // (ranks // ulysses size)
    forward_micro_batch_size_per_gpu: int = 32
    forward_micro_batch_size: Optional[int] = None  # deprecated global size of the value forward
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    ppo_epochs: int = 1  # YAML: ${actor_rollout_ref.actor.ppo_epochs}
    ulysses_sequence_parallel_size: int = 1
    rollout_n: int = 1  # YAML: ${actor_rollout_ref.rollout.n}
    shuffle: bool = False
    data_loader_seed: int = 42  # seeds the mini-batch shuffles (with the step and epoch), upstream's key
    cliprange_value: float = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    loss_scale_factor: Optional[int] = None  # seq-mean-token-sum-norm divisor; None: the response length
    grad_clip: float = 1.0
    dtype: ComputeDType = "auto"
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # upstream v0.9 (docs/profiling.md)

    def __post_init__(self) -> None:
        check_micro_batch_sizes(
            "critic", self.ppo_micro_batch_size, self.ppo_micro_batch_size_per_gpu, self.use_dynamic_bsz
        )
        micro = self.ppo_micro_batch_size
        if not self.use_dynamic_bsz and micro is not None and self.ppo_mini_batch_size % micro != 0:
            raise ValueError(
                f"[critic] ppo_mini_batch_size ({self.ppo_mini_batch_size}) must be divisible by "
                f"ppo_micro_batch_size ({micro})"
            )
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"Invalid loss_agg_mode: {self.loss_agg_mode!r}; expected one of {list(LOSS_AGG_MODES)}")

    def validate(self, n_gpus: int, train_batch_size: int) -> None:
        """Check the batch sizes against a run of ``n_gpus`` GPUs and ``train_batch_size`` prompts per step
        (upstream v0.9's ``CriticConfig.validate`` / ``FSDPCriticConfig.validate``): without ``use_dynamic_bsz`` the
        mini-batch fits the step and a deprecated global micro-batch, times the Ulysses size, covers every GPU. The
        trainer runs its own, fuller checks when the config is loaded (``verl/trainer/config/ppo_checks.py``).

        Raises:
            ValueError: naming the size that does not fit.
        """
        if self.use_dynamic_bsz:
            return
        if train_batch_size < self.ppo_mini_batch_size:
            raise ValueError(
                f"train_batch_size ({train_batch_size}) must be >= critic.ppo_mini_batch_size "
                f"({self.ppo_mini_batch_size})"
            )
        sp = int(self.ulysses_sequence_parallel_size)
        micro = self.ppo_micro_batch_size
        if micro is not None and micro * sp < n_gpus:
            raise ValueError(
                f"critic.ppo_micro_batch_size ({micro}) * ulysses_sequence_parallel_size ({sp}) must be >= "
                f"n_gpus ({n_gpus})"
            )


#: upstream verl v0.9's name of the FSDP critic section; here the one critic section (FSDP2 is the only engine)
FSDPCriticConfig = CriticConfig


class McoreCriticConfig(CriticConfig):
    """Upstream's Megatron-Core critic section: refused, there is no Megatron engine here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "McoreCriticConfig: the Megatron-Core engine is not available here (FSDP2 only); use CriticConfig / "
            "FSDPCriticConfig (critic.strategy=fsdp2)"
        )
