"""The actor and reference sections (``actor_rollout_ref.actor``, ``actor_rollout_ref.ref``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from verl.base_config import BaseConfig, list_field
from verl.sections.engine import FSDPConfig, RefFSDPConfig
from verl.sections.literals import CheckpointContent, ComputeDType, LossAggMode
from verl.sections.optimizer import OptimConfig
from verl.sections.profiler import ProfilerConfig


@dataclass
class PolicyLossConfig(BaseConfig):
    """``actor.policy_loss``: which policy loss to use and the knobs of the Clip-Cov / KL-Cov / DRO variants."""

    loss_mode: str = "vanilla"
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    dro_beta: Optional[float] = None  # DRO's quadratic log-ratio penalty; required (> 0) with loss_mode=dro


@dataclass
class CheckpointContentsConfig(BaseConfig):
    """``actor.checkpoint``: which parts a checkpoint saves and which a resume loads."""

    save_contents: list[CheckpointContent] = list_field("model", "optimizer", "extra")
    load_contents: list[CheckpointContent] = list_field("model", "optimizer", "extra")


@dataclass
class ActorConfig(BaseConfig):
    """``actor_rollout_ref.actor``: PPO updates of the policy (batch sizes, clipping, losses, optimizer)."""

    strategy: str = "fsdp"  # fsdp | fsdp2 (both FSDP2); megatron is rejected by the cross-field checks
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size_per_gpu: int = 32
    ppo_micro_batch_size: Optional[int] = None  # deprecated global size: per_gpu = this // (ranks // ulysses size)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    ppo_epochs: int = 1
    use_torch_compile: bool = False  # torch.compile each decoder layer after FSDP sharding
    entropy_from_logits_with_chunking: bool = False  # entropy in blocks of 2048 tokens (upstream's chunk size)
    entropy_checkpointing: bool = False  # satisfied by design: the entropy backward recomputes softmax per block
    freeze_vision_tower: bool = False  # a vision-language model's vision encoder gets no updates
    ulysses_sequence_parallel_size: int = 1
    skip_old_log_prob_on_policy: bool = True
    shuffle: bool = False
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: LossAggMode = "token-mean"
    loss_scale_factor: Optional[int] = None  # seq-mean-token-sum-norm divisor; None: the response length
    tau_pos: float = 1.0  # SAPO gate temperature for tokens with A > 0
    tau_neg: float = 1.05  # SAPO gate temperature for tokens with A <= 0
    calculate_sum_pi_squared: bool = False  # also return sum_v pi(v)^2 per token (optimal_token_baseline needs it)
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    use_prefix_grouper: bool = False  # one forward of a prompt group's shared prompt (workers/actor/prefix_grouping.py)
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    grad_clip: float = 1.0
    dtype: ComputeDType = "auto"
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointContentsConfig = field(default_factory=CheckpointContentsConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # upstream v0.9 (docs/profiling.md)


@dataclass
class RefConfig(BaseConfig):
    """``actor_rollout_ref.ref``: the frozen reference policy (log-probs for the KL term)."""

    log_prob_micro_batch_size_per_gpu: int = 32
    log_prob_micro_batch_size: Optional[int] = None  # deprecated global size (see actor.ppo_micro_batch_size)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    ulysses_sequence_parallel_size: int = 1  # YAML: ${actor_rollout_ref.actor.ulysses_sequence_parallel_size}
    strategy: str = "fsdp"  # YAML: ${actor_rollout_ref.actor.strategy}; fsdp | fsdp2 (both FSDP2)
    use_torch_compile: bool = False  # YAML: ${actor_rollout_ref.actor.use_torch_compile}
    entropy_from_logits_with_chunking: bool = False  # the reference computes no entropy (as upstream's)
    entropy_checkpointing: bool = False  # the reference computes no entropy (as upstream's)
    fsdp_config: RefFSDPConfig = field(default_factory=RefFSDPConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # upstream v0.9 (docs/profiling.md)
