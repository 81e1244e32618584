"""Typed schema of ``ppo_trainer.yaml``: one dataclass per section, with verl's key names.

The worker sections (actor, rollout, reference, critic, reward model) live with the workers, in
:mod:`verl.workers.config`; this module adds the driver's own sections and the whole ``PPOConfig``.

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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, Union

# registers ${verl.experiment_name:...}, the default trainer.experiment_name of the packaged YAML files
from verl.base_config import BaseConfig, dict_field, list_field, omega_conf_to_dataclass
from verl.trainer.config import experiment_name as _experiment_name  # noqa: F401
from verl.trainer.config.v09_schema import RewardSectionConfig, SkipConfig, V1TrainerConfig
from verl.workers.config import (  # noqa: F401  (the worker sections, importable from here as before)
    ActorConfig,
    ActorRolloutRefConfig,
    AgentConfig,
    CheckpointContent,
    CheckpointContentsConfig,
    ComputeDType,
    CriticConfig,
    CriticModelConfig,
    DistillationConfig,
    EngineKwargsConfig,
    FSDPConfig,
    LossAggMode,
    ModelConfig,
    MultiTurnConfig,
    OptimConfig,
    OverlongBufferConfig,
    PolicyLossConfig,
    RefConfig,
    RefFSDPConfig,
    RemoteRewardConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    RolloutConfig,
    SandboxFusionConfig,
    ValKwargsConfig,
    WarmupStyle,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig


# --------------------------------------------------------------------------------------------------------- data
@dataclass
class CustomDatasetClassConfig(BaseConfig):
    """``data.custom_cls``: a dataset class of your own, loaded from ``path`` (a python file or module), ``name``."""

    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class DataConfig(BaseConfig):
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
    image_key: str = "images"
    video_key: str = "videos"
    video_max_frames: int = 16
    return_multi_modal_inputs: bool = True
    min_pixels: Optional[int] = None
    max_pixels: Optional[int] = None
    custom_cls: CustomDatasetClassConfig = field(default_factory=CustomDatasetClassConfig)
    trust_remote_code: bool = False  # the driver's tokenizer / processor may run the model repository's code
    image_patch_size: Optional[int] = None  # vision-language: must equal the processor's patch size (checked)


# ------------------------------------------------------------------------------------------------------- reward
@dataclass
class CustomRewardFunctionConfig(BaseConfig):
    """``custom_reward_function``: a user ``compute_score`` loaded from a Python file."""

    path: Optional[str] = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dict_field()


# ---------------------------------------------------------------------------------------------------- algorithm
@dataclass
class KLControlConfig(BaseConfig):
    """``algorithm.kl_ctrl``: the KL-in-reward coefficient, fixed or adaptive (Ziegler et al. 2019)."""

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1
    kl_coef_max: Optional[float] = None  # cap of the adaptive coefficient; None: no cap


@dataclass
class FilterGroupsConfig(BaseConfig):
    """``algorithm.filter_groups``: DAPO dynamic sampling (drop groups whose metric is equal for all members)."""

    enable: bool = False
    metric: str = "acc"
    max_num_gen_batches: int = 0


@dataclass
class PFPPOConfig(BaseConfig):
    """``algorithm.pf_ppo``: how ``use_pf_ppo`` resamples the batch (verl/algorithms/pf_ppo.py)."""

    reweight_method: Literal["pow", "max_min", "max_random"] = "pow"
    weight_pow: float = 2.0  # pow: weight = |score| ** weight_pow


@dataclass
class RolloutCorrectionConfig(BaseConfig):
    """``algorithm.rollout_correction``: correct for the rollout engine's probabilities differing from the trainer's
    (verl/algorithms/rollout_correction.py, rollout_rejection.py; upstream verl v0.9's keys and presets, see
    docs/algorithms.md). Off by default; any of ``rollout_is``, ``rollout_rs``, ``rollout_token_veto_threshold``
    or ``bypass_mode`` needs ``actor_rollout_ref.rollout.calculate_log_probs``."""

    rollout_is: Optional[Literal["token", "sequence"]] = None  # importance weights; None: no weights
    # a number: truncation of the weights (TIS); "lower_upper" (e.g. "0.5_5.0"): IcePop, weights outside -> 0
    rollout_is_threshold: Union[float, str] = 2.0
    rollout_is_batch_normalize: bool = False  # divide the weights by their batch mean
    # rejection: token | sequence | geometric (bounds [rollout_rs_threshold_lower, rollout_rs_threshold] on the
    # weight), or upstream v0.9's comma-separated divergence options (token_k1, seq_mean_k1, seq_max_k2, ...)
    rollout_rs: Optional[str] = None
    rollout_rs_threshold: Optional[Union[float, str]] = None  # per option, comma-separated; k1: "lower_upper"
    rollout_rs_threshold_lower: Optional[float] = None  # token|sequence|geometric only; None: 1 / upper
    rollout_token_veto_threshold: Optional[float] = None  # reject a response holding a token weight below this
    bypass_mode: bool = False  # the rollout's log-probs are the old policy (no old-log-prob pass)
    loss_type: Literal["ppo_clip", "reinforce"] = "ppo_clip"  # bypass mode's loss: PPO clip or REINFORCE x weights


@dataclass
class AlgorithmConfig(BaseConfig):
    """``algorithm``: advantage estimation and the KL-in-reward penalty."""

    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str = "gae"  # checked against core_algos.ADV_ESTIMATOR_REGISTRY
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    use_pf_ppo: bool = False  # PF-PPO: resample the batch by reward confidence after GAE
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)


@dataclass
class AsyncTrainingConfig(BaseConfig):
    """``async_training``: one-step-off-policy and fully asynchronous training (docs/async_training.md), upstream
    verl's keys. ``mode`` null trains synchronously; the other keys act with ``mode=fully_async`` (one_step_off fixes
    staleness 1, a push every step, one batch a step)."""

    mode: Optional[Literal["one_step_off", "fully_async"]] = None
    staleness_threshold: float = 0.1  # weight versions the rollouter may run ahead (0: on-policy)
    trigger_parameter_sync_step: int = 1  # training steps between two weight pushes
    require_batches: int = 1  # prompt batches consumed per step
    partial_rollout: bool = False  # continue unfinished responses with the weights pushed meanwhile
    use_rollout_log_probs: bool = False  # the rollout's log-probs are the old policy (bypass mode)


# ------------------------------------------------------------------------------------------------------ trainer
@dataclass
class ReportConfig(BaseConfig):
    """``trainer.report``: the run's ``report.html`` (verl/utils/tracking/report) and the training samples it shows."""

    enable: bool = True
    num_samples: int = 4  # rows of the training batch kept per sampled step in samples.jsonl (0: none)
    sample_steps: Optional[list[int]] = None  # None: step 1, every step that saves a checkpoint, the last step


@dataclass
class TrainerConfig(BaseConfig):
    """``trainer``: the driver loop (backend, world size, steps, validation, checkpoints, logging)."""

    backend: Literal["auto", "local", "ray"] = "auto"
    project_name: str = "verl"
    # YAML: ${verl.experiment_name:...}, <algorithm>-<model>-<data>[-lora<r>] (experiment_name.py); demo.yaml: demo
    experiment_name: str = "ppo-smollm2-135m-instruct"
    namespace: Optional[str] = None
    logger: list[str] = list_field("console", "file", "tensorboard")
    log_dir: Optional[str] = None
    nnodes: int = 1
    n_gpus_per_node: int = 1
    # extra resource pools (name -> ranks per node) and role -> pool; unmapped roles share "global_pool"
    resource_pool_spec: dict[str, list[int]] = dict_field()
    resource_pool_mapping: dict[str, str] = dict_field()
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
    # steps in a row whose scores are all equal because the reward failed before DegenerateRewardError; 0: never
    max_degenerate_reward_steps: int = 3
    # agent runs with tools: warn after this many steps in a row without a tool call; 0: never
    warn_no_tool_call_steps: int = 5
    # every consumed sample's policy_version within the staleness bound (0 when synchronous): else StalenessError
    check_policy_version: bool = True
    # rollout_corr/{kl,k3_kl,log_prob_abs_diff_mean,log_prob_abs_diff_max} each step where the rollout returns
    # log-probs, also when the old-log-prob pass is skipped (measured on the actor's pre-update forward)
    log_prob_gap: bool = True
    # warn when rollout_corr/k3_kl passes this (then again each time it doubles); 0: never
    log_prob_gap_warn_kl: float = 0.01
    # refuse a run whose largest micro-batch's logits cannot fit the free RAM (CPU runs; verl/utils/memory_check.py)
    check_memory: bool = True
    seed: int = 1
    deterministic: bool = False
    torch_threads: Optional[int] = None
    enable_profiling: bool = False
    profile_steps: list[int] = list_field()
    enable_debug_mode: bool = False
    third_party_log_level: Optional[Literal["DEBUG", "INFO", "WARNING", "ERROR"]] = None
    allow_unsafe_operations: bool = False
    use_legacy_worker_impl: Literal["auto", "enable", "disable"] = "auto"
    # upstream v0.9's V1 trainer modes, resolved onto async_training by v1_modes.py
    use_v1: bool = True
    v1: V1TrainerConfig = field(default_factory=V1TrainerConfig)


# ------------------------------------------------------------------------------------------------------ ray
@dataclass
class RayInitConfig(BaseConfig):
    """``ray_kwargs.ray_init``: keyword arguments of ``ray.init()`` (others can be added with ``+key=value``)."""

    address: Optional[str] = None  # null: $RAY_ADDRESS if set, else a new local cluster
    num_cpus: Optional[int] = None  # a new local cluster only
    runtime_env: dict[str, Any] = dict_field()  # merged over the driver's default env vars for the workers


@dataclass
class RayKwargsConfig(BaseConfig):
    """``ray_kwargs``: how the driver starts or joins Ray when the backend is ``ray`` (verl's key)."""

    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    placement_timeout_s: float = 120.0


# ------------------------------------------------------------------------------------------------------ top level
@dataclass
class PPOConfig(BaseConfig):
    """The whole ``ppo_trainer.yaml``: what ``python -m verl.trainer.main_ppo`` runs."""

    # The YAML file with the defaults of this schema, inside the ``verl.trainer.config`` package.
    config_name: ClassVar[str] = "ppo_trainer"
    # The embedded demo's quick settings, layered under the user's when no data.train_files is given (loader.py).
    demo_config_name: ClassVar[str] = "demo"
    # Other spellings of a section, moved to the canonical key by the loader (verl keeps the critic's FSDP
    # settings under critic.model).
    key_aliases: ClassVar[dict[str, str]] = {
        "critic.model.fsdp_config": "critic.fsdp_config",
        "critic.fsdp": "critic.fsdp_config",  # upstream v0.9's name of the critic's engine section
        # upstream v0.9 also spells the actor's entropy keys under its engine section (fsdp_config)
        **{
            f"actor_rollout_ref.{role}.fsdp_config.{key}": f"actor_rollout_ref.{role}.{key}"
            for role in ("actor", "ref")
            for key in ("entropy_from_logits_with_chunking", "entropy_checkpointing")
        },
    }

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardSectionConfig = field(default_factory=RewardSectionConfig)  # v0.9 (reward_section.py)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    # upstream v0.9's engine choice (config group model_engine/): every FSDP name selects our FSDP2 workers
    model_engine: Literal["dp", "fsdp", "fsdp2"] = "dp"
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    skip: SkipConfig = field(default_factory=SkipConfig)  # v0.9 (verl/trainer/ppo/rollout_skip.py)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)

    @classmethod
    def cross_field_checks(cls, cfg: DictConfig) -> tuple[list[str], list[str]]:
        """Checks that span several keys (batch-size arithmetic, ...): returns ``(errors, warnings)``."""
        from verl.trainer.config.ppo_checks import check_ppo_config

        return check_ppo_config(cfg)

    @classmethod
    def step_plan_text(cls, cfg: DictConfig) -> str:
        """What one step of this config consumes (prompts, sequences, tokens, micro-batches, optimizer steps) and
        which keys produce each figure: printed at start and with ``--cfg job``
        (:mod:`verl.trainer.config.step_plan`)."""
        from verl.trainer.config.step_plan import format_plan, step_plan

        return format_plan(step_plan(cfg))

    @classmethod
    def adapt_defaults(cls, cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
        """Fit the defaults the user did not set (``user_keys``) to the values they did, before validation, so an
        unset default never causes an error (mini-batches above the step's batch, micro-batch sizes above the per-rank
        mini-batch)."""
        from verl.trainer.config.ppo_checks import fit_micro_batch_defaults, fit_mini_batch_defaults
        from verl.trainer.config.upstream_keys import adapt_upstream_keys

        changed = adapt_upstream_keys(cfg, user_keys)
        changed.update(fit_mini_batch_defaults(cfg, user_keys))
        changed.update(fit_micro_batch_defaults(cfg, user_keys))
        # upstream v0.9's sections (trainer.v1, reward, distillation's new keys) onto the keys the trainers read
        from verl.trainer.config.v09_resolve import resolve_v09_sections

        changed.update(resolve_v09_sections(cfg, user_keys))
        return changed


# the name this module gave it before the sections were typed everywhere
to_dataclass = omega_conf_to_dataclass


def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of a dataclass (annotations are strings under ``from __future__``)."""
    import typing

    return typing.get_type_hints(cls)
