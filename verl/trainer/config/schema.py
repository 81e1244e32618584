"""Typed schema of ``ppo_trainer.yaml``: one dataclass per section, with verl's key names.

The YAML file is the source of the defaults; the dataclass defaults mirror its *resolved* values (a test keeps the
two identical, key for key and value for value) so ``PPOConfig()`` is a usable default config in code. Interpolated
keys (``rollout.response_length`` follows ``data.max_response_length``, ...) only follow their source when the config
is built by :func:`verl.trainer.config.loader.load_config`; the dataclass default is the resolved value.

Type conventions read by :mod:`verl.trainer.config.validation`:

* ``Optional[X]``: ``null`` is allowed.
* ``Literal[...]``: a closed set of choices.
* ``list[X]``: a YAML list whose items are ``X``.
* ``dict[str, Any]``: a free-form mapping (``override_config``, ``reward_kwargs``); any keys are accepted.
* a dataclass: a nested section, checked key by key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, Union

# registers ${verl.experiment_name:...}, the default trainer.experiment_name of the packaged YAML files
from verl.trainer.config import experiment_name as _experiment_name  # noqa: F401

if TYPE_CHECKING:
    from omegaconf import DictConfig

WarmupStyle = Literal["constant", "cosine"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
CheckpointContent = Literal["model", "optimizer", "extra", "hf_model"]
# auto: bf16 where the device multiplies bf16 natively, else fp32 (verl/utils/hardware/precision.py decides)
ComputeDType = Literal["auto", "bfloat16", "float16", "float32"]


def _list(*items: Any) -> Any:
    """A dataclass ``default_factory`` returning a fresh list of ``items`` (lists are mutable defaults)."""
    return field(default_factory=lambda: list(items))


def _dict() -> Any:
    """A dataclass ``default_factory`` returning a fresh empty dict."""
    return field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------- data
@dataclass
class DataConfig:
    """``data``: where prompts come from and how they are tokenized and batched."""

    tokenizer: Optional[str] = None
    train_files: Optional[Union[str, list[str]]] = None
    val_files: Optional[Union[str, list[str]]] = None
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 1024
    val_batch_size: Optional[int] = None
    val_max_samples: int = -1
    return_raw_chat: bool = False
    shuffle: bool = True
    seed: int = 42
    filter_overlong_prompts: bool = True
    truncation: Literal["error", "left", "right"] = "error"
    apply_chat_template: bool = True
    dataloader_num_workers: int = 0


# ---------------------------------------------------------------------------------------------- actor/rollout/ref
@dataclass
class ModelConfig:
    """``actor_rollout_ref.model``: the policy model shared by actor, rollout and reference."""

    path: str = "smollm2-135m-instruct"
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    use_remove_padding: Optional[bool] = None  # null: on with flash-attention (varlen) kernels, else off
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Union[str, list[str]] = "all-linear"
    override_config: dict[str, Any] = _dict()
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2


@dataclass
class PolicyLossConfig:
    """``actor.policy_loss``: which policy loss to use and the knobs of the Clip-Cov / KL-Cov variants."""

    loss_mode: str = "vanilla"
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1


@dataclass
class OptimConfig:
    """``actor.optim`` / ``critic.optim``: AdamW and its learning-rate schedule."""

    lr: float = 1.0e-5
    weight_decay: float = 0.0
    betas: list[float] = _list(0.9, 0.999)
    eps: float = 1.0e-8
    lr_warmup_steps: int = 0
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler_type: WarmupStyle = "constant"
    warmup_style: Optional[WarmupStyle] = None  # deprecated name of lr_scheduler_type; when set, it wins
    min_lr_ratio: float = 0.0
    total_training_steps: int = -1


@dataclass
class CheckpointContentsConfig:
    """``actor.checkpoint``: which parts a checkpoint saves and which a resume loads."""

    save_contents: list[CheckpointContent] = _list("model", "optimizer", "extra")
    load_contents: list[CheckpointContent] = _list("model", "optimizer", "extra")


@dataclass
class FSDPConfig:
    """``fsdp_config`` of a trained model (actor, critic): offloading, resharding and the sharding group size.

    ``fsdp_size``: -1 shards over every rank (FSDP); ``k`` shards within groups of ``k`` ranks and replicates
    across the ``world / k`` groups (hybrid sharding, HSDP).
    """

    param_offload: bool = False
    optimizer_offload: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1


@dataclass
class RefFSDPConfig:
    """``ref.fsdp_config``: the reference model is never trained, so it has no optimizer to offload."""

    param_offload: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1


@dataclass
class ActorConfig:
    """``actor_rollout_ref.actor``: PPO updates of the policy (batch sizes, clipping, losses, optimizer)."""

    strategy: str = "fsdp"  # fsdp | fsdp2 (both FSDP2); megatron is rejected by the cross-field checks
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size_per_gpu: int = 32
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    ppo_epochs: int = 1
    use_torch_compile: bool = False  # torch.compile each decoder layer after FSDP sharding
    ulysses_sequence_parallel_size: int = 1
    skip_old_log_prob_on_policy: bool = True
    shuffle: bool = False
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    grad_clip: float = 1.0
    dtype: ComputeDType = "auto"
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointContentsConfig = field(default_factory=CheckpointContentsConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class RefConfig:
    """``actor_rollout_ref.ref``: the frozen reference policy (log-probs for the KL term)."""

    log_prob_micro_batch_size_per_gpu: int = 32
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    ulysses_sequence_parallel_size: int = 1  # YAML: ${actor_rollout_ref.actor.ulysses_sequence_parallel_size}
    fsdp_config: RefFSDPConfig = field(default_factory=RefFSDPConfig)


@dataclass
class ValKwargsConfig:
    """``rollout.val_kwargs``: sampling used during validation (greedy by default)."""

    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1


@dataclass
class MultiTurnConfig:
    """``rollout.multi_turn``: multi-turn (tool-calling) rollouts; only ``enable=false`` is implemented."""

    enable: bool = False


@dataclass
class EngineKwargsConfig:
    """``rollout.engine_kwargs``: extra arguments of each engine's constructor (``vllm``: ``vllm.LLM`` kwargs)."""

    vllm: dict[str, Any] = _dict()


@dataclass
class RolloutConfig:
    """``actor_rollout_ref.rollout``: the generation engine and its sampling parameters."""

    name: Literal["auto", "hf", "vllm"] = "auto"
    mode: str = "sync"  # sync; async (the rollout server of agent loops) is rejected by the cross-field checks
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    response_length: int = 512  # YAML: ${data.max_response_length}
    prompt_length: int = 512  # YAML: ${data.max_prompt_length}
    min_new_tokens: int = 0
    dtype: ComputeDType = "auto"
    gpu_memory_utilization: float = 0.5
    tensor_model_parallel_size: int = 1
    max_num_seqs: int = 256
    enforce_eager: bool = False  # false: decode with CUDA graphs (vLLM, and the hf engine on CUDA)
    free_cache_engine: bool = True
    calculate_log_probs: bool = False
    log_prob_micro_batch_size_per_gpu: int = 32
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    seed: int = 0
    # vLLM engine options (vllm.LLM / EngineArgs arguments of the same names); the hf engine has no equivalent
    enable_chunked_prefill: bool = True
    max_num_batched_tokens: int = 8192
    max_model_len: Optional[int] = None  # null: prompt_length + response_length
    enable_prefix_caching: bool = True
    disable_log_stats: bool = True
    load_format: str = "auto"  # auto | dummy | safetensors | pt | ...: how vLLM initialises weights before the sync
    layered_summon: bool = False  # sync weights to the engine one sharded layer at a time
    engine_kwargs: EngineKwargsConfig = field(default_factory=EngineKwargsConfig)
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)


@dataclass
class ActorRolloutRefConfig:
    """``actor_rollout_ref``: the section handed to ``ActorRolloutRefWorker``."""

    hybrid_engine: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


# ------------------------------------------------------------------------------------------------------- critic
@dataclass
class CriticModelConfig:
    """``critic.model``: the value model (by default initialised from the policy checkpoint)."""

    path: str = "smollm2-135m-instruct"  # YAML: ${actor_rollout_ref.model.path}
    tokenizer_path: Optional[str] = "smollm2-135m-instruct"  # YAML: ${actor_rollout_ref.model.path}
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = False
    override_config: dict[str, Any] = _dict()
    attn_implementation: str = "auto"  # auto | eager | sdpa | flash_attention_2


@dataclass
class CriticConfig:
    """``critic``: the value function trained for GAE (section handed to ``CriticWorker``)."""

    enable: Optional[bool] = None
    strategy: str = "fsdp"  # fsdp | fsdp2 (both FSDP2)
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: int = 256  # YAML: ${actor_rollout_ref.actor.ppo_mini_batch_size}
    ppo_micro_batch_size_per_gpu: int = 16
    forward_micro_batch_size_per_gpu: int = 32
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    ppo_epochs: int = 1  # YAML: ${actor_rollout_ref.actor.ppo_epochs}
    ulysses_sequence_parallel_size: int = 1
    rollout_n: int = 1  # YAML: ${actor_rollout_ref.rollout.n}
    shuffle: bool = False
    cliprange_value: float = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    grad_clip: float = 1.0
    dtype: ComputeDType = "auto"
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


# ------------------------------------------------------------------------------------------------------- reward
@dataclass
class RewardModelModelConfig:
    """``reward_model.model``: a model-based scorer (sequence classifier) when ``reward_model.enable``."""

    path: Optional[str] = None
    input_tokenizer: Optional[str] = None


@dataclass
class OverlongBufferConfig:
    """``reward_model.overlong_buffer``: DAPO's soft length penalty (dapo reward manager only)."""

    enable: bool = False
    len: int = 8
    penalty_factor: float = 1.0
    log: bool = False


@dataclass
class RemoteRewardConfig:
    """``reward_model.remote``: a reward function served over HTTP (POST json -> ``{"score": float}``)."""

    url: Optional[str] = None
    timeout_s: float = 10.0
    max_retries: int = 3
    max_concurrency: int = 8


@dataclass
class SandboxFusionConfig:
    """``reward_model.sandbox_fusion``: run the default scorer's code rewards on a Sandbox Fusion server."""

    url: Optional[str] = None  # e.g. http://127.0.0.1:8080/run_code; null: the local sandbox
    max_concurrent: int = 64  # requests in flight per reward process
    memory_limit_mb: int = 1024  # memory limit of one test program


@dataclass
class RewardModelConfig:
    """``reward_model``: the reward model and the reward manager that turns responses into token-level scores."""

    enable: bool = False
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size_per_gpu: int = 16
    dtype: ComputeDType = "auto"
    max_length: Optional[int] = None
    reward_manager: str = "naive"  # naive | batch | dapo | any name registered with reward_manager.register
    reward_kwargs: dict[str, Any] = _dict()  # extra keyword arguments of the reward manager's constructor
    launch_reward_fn_async: bool = False
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    on_error: Literal["fail", "zero"] = "fail"
    timeout_s: float = 30.0
    batch_timeout_s: Optional[float] = None  # deadline of one batch's scoring; null: only the per-sample limit
    num_workers: Optional[int] = None  # reward worker processes; null: min(8, CPUs); 0: in the trainer process
    remote: RemoteRewardConfig = field(default_factory=RemoteRewardConfig)
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)


@dataclass
class CustomRewardFunctionConfig:
    """``custom_reward_function``: a user ``compute_score`` loaded from a Python file."""

    path: Optional[str] = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = _dict()


# ---------------------------------------------------------------------------------------------------- algorithm
@dataclass
class KLControlConfig:
    """``algorithm.kl_ctrl``: the KL-in-reward coefficient, fixed or adaptive (Ziegler et al. 2019)."""

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1
    kl_coef_max: Optional[float] = None  # cap of the adaptive coefficient; None: no cap


@dataclass
class FilterGroupsConfig:
    """``algorithm.filter_groups``: DAPO dynamic sampling (drop groups whose metric is equal for all members)."""

    enable: bool = False
    metric: str = "acc"
    max_num_gen_batches: int = 0


@dataclass
class AlgorithmConfig:
    """``algorithm``: advantage estimation and the KL-in-reward penalty."""

    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str = "gae"  # checked against core_algos.ADV_ESTIMATOR_REGISTRY
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)


# ------------------------------------------------------------------------------------------------------ trainer
@dataclass
class ReportConfig:
    """``trainer.report``: the run's ``report.html`` (verl/utils/tracking/report) and the training samples it shows."""

    enable: bool = True
    num_samples: int = 4  # rows of the training batch kept per sampled step in samples.jsonl (0: none)
    sample_steps: Optional[list[int]] = None  # None: step 1, every step that saves a checkpoint, the last step


@dataclass
class TrainerConfig:
    """``trainer``: the driver loop (backend, world size, steps, validation, checkpoints, logging)."""

    backend: Literal["auto", "local", "ray"] = "auto"
    project_name: str = "verl"
    # YAML: ${verl.experiment_name:...}, <algorithm>-<model>-<data>[-lora<r>] (experiment_name.py); demo.yaml: demo
    experiment_name: str = "ppo-smollm2-135m-instruct"
    namespace: Optional[str] = None
    logger: list[str] = _list("console", "file", "tensorboard")
    log_dir: Optional[str] = None
    nnodes: int = 1
    n_gpus_per_node: int = 1
    # extra resource pools (name -> ranks per node) and role -> pool; unmapped roles share "global_pool"
    resource_pool_spec: dict[str, list[int]] = _dict()
    resource_pool_mapping: dict[str, str] = _dict()
    device: Literal["auto", "cpu", "cuda"] = "auto"
    total_epochs: int = 30
    total_training_steps: Optional[int] = None
    critic_warmup: int = 0
    test_freq: int = -1
    val_before_train: bool = True
    val_only: bool = False
    log_val_generations: int = 0
    save_freq: int = -1
    max_actor_ckpt_to_keep: Optional[int] = 2
    max_critic_ckpt_to_keep: Optional[int] = 2
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    resume_from_path: Optional[str] = None
    overwrite_checkpoints: bool = False  # resume_mode=disable in a directory with checkpoints: delete them
    # YAML: outputs/${trainer.project_name}/${trainer.experiment_name}
    default_local_dir: str = "outputs/verl/ppo-smollm2-135m-instruct"
    rollout_data_dir: Optional[str] = None
    validation_data_dir: Optional[str] = None
    balance_batch: bool = True
    export_hf: bool = True
    plot: bool = True
    report: ReportConfig = field(default_factory=ReportConfig)
    seed: int = 1
    deterministic: bool = False
    torch_threads: Optional[int] = None
    enable_profiling: bool = False
    profile_steps: list[int] = _list()
    enable_debug_mode: bool = False
    third_party_log_level: Optional[Literal["DEBUG", "INFO", "WARNING", "ERROR"]] = None
    allow_unsafe_operations: bool = False
    use_legacy_worker_impl: Literal["auto", "enable", "disable"] = "auto"


# ------------------------------------------------------------------------------------------------------ ray
@dataclass
class RayInitConfig:
    """``ray_kwargs.ray_init``: keyword arguments of ``ray.init()`` (others can be added with ``+key=value``)."""

    address: Optional[str] = None  # null: $RAY_ADDRESS if set, else a new local cluster
    num_cpus: Optional[int] = None  # a new local cluster only
    runtime_env: dict[str, Any] = _dict()  # merged over the driver's default env vars for the workers


@dataclass
class RayKwargsConfig:
    """``ray_kwargs``: how the driver starts or joins Ray when the backend is ``ray`` (verl's key)."""

    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    placement_timeout_s: float = 120.0


# ------------------------------------------------------------------------------------------------------ top level
@dataclass
class PPOConfig:
    """The whole ``ppo_trainer.yaml``: what ``python -m verl.trainer.main_ppo`` runs."""

    # The YAML file with the defaults of this schema, inside the ``verl.trainer.config`` package.
    config_name: ClassVar[str] = "ppo_trainer"
    # The embedded demo's quick settings, layered under the user's when no data.train_files is given (loader.py).
    demo_config_name: ClassVar[str] = "demo"
    # Other spellings of a section, moved to the canonical key by the loader (verl keeps the critic's FSDP
    # settings under critic.model).
    key_aliases: ClassVar[dict[str, str]] = {"critic.model.fsdp_config": "critic.fsdp_config"}

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """Checks that span several keys (batch-size arithmetic, ...): returns ``(errors, warnings)``."""
        from verl.trainer.config.ppo_checks import check_ppo_config

        return check_ppo_config(cfg)

    @classmethod
    def adapt_defaults(cls, cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
        """Fit the defaults the user did not set (``user_keys``) to the values they did, before validation, so an
        unset default never causes an error (mini-batches above the step's batch, micro-batch sizes above the per-rank
        mini-batch)."""
        from verl.trainer.config.ppo_checks import fit_micro_batch_defaults, fit_mini_batch_defaults

        changed = fit_mini_batch_defaults(cfg, user_keys)
        changed.update(fit_micro_batch_defaults(cfg, user_keys))
        return changed


def to_dataclass(cfg: Any, cls: type) -> Any:
    """Build a ``cls`` instance from a validated mapping (a ``DictConfig`` section or a plain dict).

    Nested sections become their dataclasses, lists and free-form dicts become plain Python containers; keys that
    are not fields of ``cls`` (added with ``+key=value``) are left out. Run :func:`validate_config` first: this only
    converts, it does not check types.
    """
    from omegaconf import DictConfig, OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    hints = _type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):
            value = to_dataclass(value, tp)
        kwargs[f.name] = value
    return cls(**kwargs)


def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of a dataclass (annotations are strings under ``from __future__``)."""
    import typing

    return typing.get_type_hints(cls)
