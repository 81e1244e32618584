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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional

# registers ${verl.experiment_name:...}, the default trainer.experiment_name of the packaged YAML files
from verl.algorithms.config import (  # noqa: F401  (the algorithm section, importable from here as before)
    AlgorithmConfig,
    FilterGroupsConfig,
    KLControlConfig,
    PFPPOConfig,
    RolloutCorrectionConfig,
)
from verl.base_config import BaseConfig, dict_field, list_field, omega_conf_to_dataclass
from verl.data.config import CustomDatasetClassConfig, DataConfig  # noqa: F401  (the data section lives with the data)
from verl.sections.profiler import GlobalProfilerConfig
from verl.trainer.config import experiment_name as _experiment_name  # noqa: F401
from verl.trainer.config.upstream_plus import upstream_ppo_keys
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


# ------------------------------------------------------------------------------------------------------- reward
@dataclass
class CustomRewardFunctionConfig(BaseConfig):
    """``custom_reward_function``: a user ``compute_score`` loaded from a Python file."""

    path: Optional[str] = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dict_field()


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
    # verl's January key: true recomputes the old log-probs with the policy before the update (bypass_mode=false)
    compute_prox_log_prob: Optional[bool] = None
    # upstream v0.9's key: validate on the trainer's ranks, which then hold a rollout engine each (the hybrid
    # engine); false: the trainer's ranks hold no engine and validation runs on the rollouter's replicas
    use_trainer_do_validate: bool = False


@dataclass
class RolloutPoolConfig(BaseConfig):
    """``rollout`` (top level, upstream v0.9's asynchronous trainers): the rollouter's devices and how many prompts it
    generates (verl/trainer/config/async_layout.py): ``nnodes * n_gpus_per_node`` devices in replicas of
    ``actor_rollout_ref.rollout.tensor_model_parallel_size``; ``total_rollout_steps`` (prompts) sets
    ``trainer.total_training_steps`` as upstream counts it."""

    nnodes: int = 1
    n_gpus_per_node: int = 1
    total_rollout_steps: Optional[int] = None  # null: the data's prompts x trainer.total_epochs
    # verl's January layout: the rollouter's passes over the data (= trainer.total_epochs) and its validation
    # period in weight versions (trainer.test_freq = test_freq x async_training.trigger_parameter_sync_step)
    total_epochs: Optional[int] = None
    test_freq: Optional[int] = None


# ------------------------------------------------------------------------------------------------------ trainer
@dataclass
class ReportConfig(BaseConfig):
    """``trainer.report``: the run's ``report.html`` (verl/reporting/report) and the training samples it shows."""

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
    # every this many steps the reference policy takes the actor's weights (verl-recipe spin's key); <= 0: never
    ref_update_freq: int = -1
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
    # on resume, check the step counter and data order continue the interrupted run (verl/trainer/ppo/resume_check.py)
    verify_resume: bool = True
    seed: int = 1
    deterministic: bool = False
    torch_threads: Optional[int] = None
    enable_profiling: bool = False
    profile_steps: list[int] = list_field()
    enable_debug_mode: bool = False
    # Ray's debugger in the workers (RAY_DEBUG=legacy: a breakpoint() waits for `ray debug`); verl-recipe spo's key
    debug: bool = False
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

    entries_added_with_plus = True  # not a field: every key of the section goes to ray.init (runner.ray_init_kwargs)

    address: Optional[str] = None  # null: $RAY_ADDRESS if set, else a new local cluster
    num_cpus: Optional[int] = None  # a new local cluster only
    runtime_env: dict[str, Any] = dict_field()  # merged over the driver's default env vars for the workers


@dataclass
class RayKwargsConfig(BaseConfig):
    """``ray_kwargs``: how the driver starts or joins Ray when the backend is ``ray`` (verl's key)."""

    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    placement_timeout_s: float = 120.0
    # Ray's timeline of the run's tasks (chrome://tracing JSON), written when training ends (verl's key)
    timeline_json_file: Optional[str] = None


# ------------------------------------------------------------------------------------------------------ top level
@dataclass
class PPOConfig(BaseConfig):
    """The whole ``ppo_trainer.yaml``: what ``python -m verl.trainer.main_ppo`` runs."""

    # The YAML file with the defaults of this schema, inside the ``verl.trainer.config`` package.
    config_name: ClassVar[str] = "ppo_trainer"
    # The embedded demo's quick settings, layered under the user's when no data.train_files is given (loader.py).
    demo_config_name: ClassVar[str] = "demo"
    # the keys of upstream v0.9's PPO config: `+key` on a key only this project's defaults hold is a set
    upstream_keys: ClassVar[Any] = staticmethod(upstream_ppo_keys)
    # Other spellings of a section, moved to the canonical key by the loader (verl keeps the critic's FSDP
    # settings under critic.model).
    key_aliases: ClassVar[dict[str, str]] = {
        "critic.model.fsdp_config": "critic.fsdp_config",
        "critic.fsdp": "critic.fsdp_config",  # upstream v0.9's name of the critic's engine section
        # DAPO's overlong penalty as its reward manager's constructor argument (v0.9 recipes; verl's older keys)
        "reward.reward_kwargs.overlong_buffer_cfg": "reward_model.overlong_buffer",
        "reward_model.reward_kwargs.overlong_buffer_cfg": "reward_model.overlong_buffer",
        # upstream v0.9's optimizer section names the clipping norm clip_grad; the worker's key is grad_clip
        "actor_rollout_ref.actor.optim.clip_grad": "actor_rollout_ref.actor.grad_clip",
        "critic.optim.clip_grad": "critic.grad_clip",
        # verl-recipe spin's trainer reads its DPO settings under algorithm (added with +): the loss's actor keys
        **{
            f"algorithm.{key}": f"actor_rollout_ref.actor.{key}"
            for key in ("dpo_beta", "dpo_loss_type", "dpo_label_smoothing")
        },
        # upstream v0.9's engine section names the strategy too (fsdp | fsdp2): one setting, the worker's key
        "actor_rollout_ref.actor.fsdp_config.strategy": "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.ref.fsdp_config.strategy": "actor_rollout_ref.ref.strategy",
        "critic.fsdp_config.strategy": "critic.strategy",
        # and whether the engine compiles the model: the workers' key (each decoder layer compiled after sharding)
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile": "actor_rollout_ref.actor.use_torch_compile",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile": "actor_rollout_ref.ref.use_torch_compile",
        # upstream v0.9 also spells the actor's entropy keys under its engine section (fsdp_config)
        **{
            f"actor_rollout_ref.{role}.fsdp_config.{key}": f"actor_rollout_ref.{role}.{key}"
            for role in ("actor", "ref")
            for key in ("entropy_from_logits_with_chunking", "entropy_checkpointing")
        },
        # and the compute dtype: the worker's key (auto | bfloat16 | float16 | float32)
        "actor_rollout_ref.actor.fsdp_config.dtype": "actor_rollout_ref.actor.dtype",
        "critic.fsdp_config.dtype": "critic.dtype",
        # verl's January top-level reward_manager section: v0.9's reward.reward_manager
        "reward_manager": "reward.reward_manager",
        # verl-recipe spo's trainer reads its settings under trainer.spo: the algorithm section's
        "trainer.spo": "algorithm.spo",
    }

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardSectionConfig = field(default_factory=RewardSectionConfig)  # v0.9 (reward_section.py)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    rollout: RolloutPoolConfig = field(default_factory=RolloutPoolConfig)  # v0.9: the async trainers' rollouter
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    # upstream v0.9's engine choice (config group model_engine/): every FSDP name selects our FSDP2 workers
    model_engine: Literal["dp", "fsdp", "fsdp2"] = "dp"
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    skip: SkipConfig = field(default_factory=SkipConfig)  # v0.9 (verl/trainer/ppo/rollout_skip.py)
    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)  # v0.9 (docs/profiling.md)
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
        from verl.trainer.config.algorithm_checks import fit_generation_batch, fit_rollout_log_probs
        from verl.trainer.config.ppo_checks import fit_micro_batch_defaults, fit_mini_batch_defaults
        from verl.trainer.config.spo_checks import resolve_spo
        from verl.trainer.config.upstream_keys import adapt_upstream_keys
        from verl.trainer.config.v09_inert_keys import settle_inert_keys
        from verl.trainer.config.v1_modes import move_v1_rollout_pool
        from verl.trainer.config.validation import ConfigError

        errors: list[str] = []
        moved = move_v1_rollout_pool(cfg, user_keys, errors)  # separate_async's pool: the top-level rollout section
        settle_inert_keys(cfg, cls, errors)  # v0.9 keys with no setting here: dropped at upstream's default
        if errors:
            raise ConfigError(errors)
        changed = {**moved, **adapt_upstream_keys(cfg, user_keys)}
        from verl.trainer.config.async_layout import resolve_async_layout

        changed.update(resolve_async_layout(cfg, user_keys))  # v0.9's async scripts: streaming batch, rollout pool
        changed.update(resolve_spo(cfg, user_keys))  # SPO: one switch, the prompts' text kept
        changed.update(fit_generation_batch(cfg, user_keys))  # upstream trains a whole unfiltered generation batch
        changed.update(fit_mini_batch_defaults(cfg, user_keys))
        changed.update(fit_micro_batch_defaults(cfg, user_keys))
        changed.update(fit_rollout_log_probs(cfg, user_keys))  # a rollout correction reads them
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
