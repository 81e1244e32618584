"""The actor and reference sections (``actor_rollout_ref.actor``, ``actor_rollout_ref.ref``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, get_args

from verl.base_config import BaseConfig, list_field
from verl.sections.engine import FSDPConfig, RefFSDPConfig
from verl.sections.literals import CheckpointContent, ComputeDType, LossAggMode
from verl.sections.optimizer import OptimConfig
from verl.sections.profiler import ProfilerConfig

LOSS_AGG_MODES: tuple[str, ...] = get_args(LossAggMode)


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
    # loss_mode=sapo: upstream's SAPO scripts add +policy_loss.tau_pos/tau_neg; set, they win over actor.tau_pos/neg
    tau_pos: Optional[float] = None
    tau_neg: Optional[float] = None
    # loss_mode=flowrl (verl/algorithms/flowrl.py): the reward scale beta and the cap of the sequence importance
    # weight (the recipe's constants), and the log Z head's depth and dropout (the recipe's actor.proj_layer, 3)
    flowrl_beta: float = 15.0
    flowrl_weight_cap: float = 10.0
    flowrl_proj_layers: int = 3
    flowrl_proj_dropout: float = 0.1


@dataclass
class CheckpointContentsConfig(BaseConfig):
    """``actor.checkpoint``: which parts a checkpoint saves and which a resume loads."""

    save_contents: list[CheckpointContent] = list_field("model", "optimizer", "extra")
    load_contents: list[CheckpointContent] = list_field("model", "optimizer", "extra")


@dataclass
class ActorConfig(BaseConfig):
    """``actor_rollout_ref.actor``: PPO updates of the policy (batch sizes, clipping, losses, optimizer).

    Upstream verl v0.9's rules (``verl/workers/config/actor.py``) hold at construction: without
    ``use_dynamic_bsz`` exactly one of ``ppo_micro_batch_size`` (deprecated global size) and
    ``ppo_micro_batch_size_per_gpu`` is set, and ``loss_agg_mode`` is a known mode (``ValueError`` otherwise).
    Only the batch sizes (which the worker turns into per-rank counts) may be assigned after construction; the
    other fields are fixed (``FrozenInstanceError``). :meth:`validate` checks the sizes against a run's GPUs and
    batch. This one class is also upstream's ``FSDPActorConfig`` (the FSDP2 engine is the only one here).
    """

    _mutable_fields = frozenset(
        {"ppo_mini_batch_size", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "ppo_max_token_len_per_gpu"}
    )

    strategy: str = "fsdp"  # fsdp | fsdp2 (both FSDP2); megatron is rejected by the cross-field checks
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size_per_gpu: Optional[int] = 32  # None only with use_dynamic_bsz (or the deprecated global size)
    ppo_micro_batch_size: Optional[int] = None  # deprecated global size: per_gpu = this // (ranks // ulysses size)
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    ppo_epochs: int = 1
    use_torch_compile: Optional[bool] = None  # compile each decoder layer after sharding; null: on CUDA only
    entropy_from_logits_with_chunking: bool = False  # entropy in blocks of entropy_from_logits_chunk_size tokens
    entropy_from_logits_chunk_size: int = 2048  # tokens per block with the switch above (upstream's default)
    entropy_checkpointing: bool = False  # satisfied by design: the entropy backward recomputes softmax per block
    freeze_vision_tower: bool = False  # a vision-language model's vision encoder gets no updates
    ulysses_sequence_parallel_size: int = 1
    skip_old_log_prob_on_policy: bool = True
    shuffle: bool = False
    data_loader_seed: int = 42  # seeds the mini-batch shuffles (with the step and epoch), upstream's key
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: LossAggMode = "token-mean"
    loss_scale_factor: Optional[int] = None  # seq-mean-token-sum-norm divisor; None: the response length
    tau_pos: float = 1.0  # SAPO gate temperature for tokens with A > 0
    tau_neg: float = 1.05  # SAPO gate temperature for tokens with A <= 0
    sppo_eta: float = 1.0  # loss_mode=sppo: eta scaling the centred reward the log-ratio regresses on (verl-recipe)
    dpo_beta: float = 0.1  # loss_mode=online_dpo: DPO's beta (verl-recipe spin's key)
    dpo_loss_type: Literal["sigmoid", "ipo", "hinge"] = "sigmoid"  # loss_mode=online_dpo: DPO, IPO or SLiC's hinge
    dpo_label_smoothing: float = 0.0  # loss_mode=online_dpo, sigmoid: conservative DPO's label noise eps
    gvpo_beta: float = 0.1  # loss_mode=gvpo: R_theta = beta * log(pi / pi_old) of a response (verl-recipe's key)
    calculate_sum_pi_squared: bool = False  # also return sum_v pi(v)^2 per token (optimal_token_baseline needs it)
    entropy_coeff: float = 0.0
    # the update also computes the entropy (actor/entropy); it always does with entropy_coeff != 0, and on a step
    # without an old-log-prob pass (on-policy: its forward is the only one that can report it)
    calculate_entropy: bool = False
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
    rollout_n: int = 1  # YAML: ${actor_rollout_ref.rollout.n} (upstream's second name of rollout.n; set from it)

    def __post_init__(self) -> None:
        if self.entropy_from_logits_chunk_size < 1:
            raise ValueError(
                f"actor.entropy_from_logits_chunk_size={self.entropy_from_logits_chunk_size}: tokens per entropy "
                "block, >= 1"
            )
        check_micro_batch_sizes(
            "actor", self.ppo_micro_batch_size, self.ppo_micro_batch_size_per_gpu, self.use_dynamic_bsz
        )
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"Invalid loss_agg_mode: {self.loss_agg_mode!r}; expected one of {list(LOSS_AGG_MODES)}")

    def validate(self, n_gpus: int, train_batch_size: int, model_config: Optional[Mapping[str, Any]] = None) -> None:
        """Check the batch sizes against a run of ``n_gpus`` GPUs and ``train_batch_size`` prompts per step
        (upstream v0.9's ``ActorConfig.validate`` / ``FSDPActorConfig.validate``): without ``use_dynamic_bsz`` the
        mini-batch fits the step, and a deprecated global micro-batch divides the mini-batch and, times the Ulysses
        size, covers every GPU; Ulysses sequence parallelism asks ``model_config.use_remove_padding``. The trainer
        here runs its own, fuller checks when the config is loaded (``verl/trainer/config/ppo_checks.py``); this
        method is for code that builds the section itself.

        Raises:
            ValueError: naming the size that does not fit.
        """
        sp = int(self.ulysses_sequence_parallel_size)
        if not self.use_dynamic_bsz:
            if train_batch_size < self.ppo_mini_batch_size:
                raise ValueError(
                    f"train_batch_size ({train_batch_size}) must be >= actor.ppo_mini_batch_size "
                    f"({self.ppo_mini_batch_size})"
                )
            micro = self.ppo_micro_batch_size
            if micro is not None:
                if self.ppo_mini_batch_size % micro != 0:
                    raise ValueError(
                        f"ppo_mini_batch_size ({self.ppo_mini_batch_size}) must be divisible by "
                        f"ppo_micro_batch_size ({micro})"
                    )
                if micro * sp < n_gpus:
                    raise ValueError(
                        f"ppo_micro_batch_size ({micro}) * ulysses_sequence_parallel_size ({sp}) must be >= "
                        f"n_gpus ({n_gpus})"
                    )
        if sp > 1 and model_config and not model_config.get("use_remove_padding"):
            raise ValueError(
                "When using sequence parallelism for actor/ref policy, you must enable `use_remove_padding` "
                f"(actor.ulysses_sequence_parallel_size={sp})"
            )


def check_micro_batch_sizes(who: str, global_size: Optional[int], per_gpu: Optional[int], dynamic: bool) -> None:
    """Upstream's rule for a section's micro-batch sizes: without dynamic batching exactly one of the deprecated
    global size (``{who}.ppo_micro_batch_size``) and ``{who}.ppo_micro_batch_size_per_gpu`` is set.

    Raises:
        ValueError: both are set ("You have set both ...") or neither ("Please set at least one of ...").
    """
    if dynamic:
        return
    old, new = f"{who}.ppo_micro_batch_size", f"{who}.ppo_micro_batch_size_per_gpu"
    if global_size is not None and per_gpu is not None:
        raise ValueError(
            f"[{who}] You have set both '{old}' AND '{new}'; remove '{old}' (deprecated): only '{new}' is kept"
        )
    if global_size is None and per_gpu is None:
        raise ValueError(f"[{who}] Please set at least one of '{old}' or '{new}' (or {who}.use_dynamic_bsz=true)")


#: upstream verl v0.9's name of the FSDP actor section; here the one actor section (FSDP2 is the only engine)
FSDPActorConfig = ActorConfig


class McoreActorConfig(ActorConfig):
    """Upstream's Megatron-Core actor section: refused, there is no Megatron engine here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "McoreActorConfig: the Megatron-Core engine is not available here (FSDP2 only); use ActorConfig / "
            "FSDPActorConfig (actor_rollout_ref.actor.strategy=fsdp2)"
        )


@dataclass
class RefConfig(BaseConfig):
    """``actor_rollout_ref.ref``: the frozen reference policy (log-probs for the KL term)."""

    log_prob_micro_batch_size_per_gpu: int = 32
    log_prob_micro_batch_size: Optional[int] = None  # deprecated global size (see actor.ppo_micro_batch_size)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    ulysses_sequence_parallel_size: int = 1  # YAML: ${actor_rollout_ref.actor.ulysses_sequence_parallel_size}
    strategy: str = "fsdp"  # YAML: ${actor_rollout_ref.actor.strategy}; fsdp | fsdp2 (both FSDP2)
    use_torch_compile: Optional[bool] = None  # YAML: ${actor_rollout_ref.actor.use_torch_compile}
    entropy_from_logits_with_chunking: bool = False  # the reference computes no entropy (as upstream's)
    entropy_checkpointing: bool = False  # the reference computes no entropy (as upstream's)
    fsdp_config: RefFSDPConfig = field(default_factory=RefFSDPConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # upstream v0.9 (docs/profiling.md)
