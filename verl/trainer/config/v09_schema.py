"""Typed sections of upstream verl v0.9's new top-level config: ``trainer.v1``, ``reward`` and ``skip``.

Upstream v0.9 (``verl/trainer/config/ppo_trainer.yaml``, ``reward/reward.yaml``; docs/advance/v1_async_trainer.md,
docs/advance/skip_manager.rst) added these sections; here each key maps onto this project's trainers:

* ``trainer.use_v1`` / ``trainer.v1.*``: the trainer mode, resolved into ``async_training.*`` by
  :mod:`verl.trainer.config.v1_modes` (``sync`` -> the synchronous driver, ``colocate_async`` -> one-step-off /
  fully-async with the lead of ``num_warmup_batches``, ``separate_async`` -> fully asynchronous).
* ``reward.*``: the home of reward config; the legacy ``reward_model.*`` / ``custom_reward_function.*`` keys with a
  ``reward.*`` counterpart are still read (one deprecation line); :mod:`verl.trainer.config.reward_section`.
* ``skip.*``: dump a step's rollouts to disk and replay them instead of generating
  (:mod:`verl.trainer.ppo.rollout_skip`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from verl.base_config import BaseConfig, dict_field, list_field


# ------------------------------------------------------------------------------------------------- trainer.v1
@dataclass
class ColocateAsyncConfig(BaseConfig):
    """``trainer.v1.colocate_async``: rollouts of the next batches generated while the current one trains."""

    num_warmup_batches: int = 1  # batches generated ahead of training (1: one-step-off)


@dataclass
class HybridRolloutSwitchConfig(BaseConfig):
    """``trainer.v1.separate_async.hybrid_rollout``: upstream lends idle trainer GPUs to rollout. Only
    ``enable_switch=false`` is accepted here (the rollout pool is fixed); the other keys act only with the switch, as
    upstream documents."""

    enable_switch: bool = False
    switch_threshold_ratio: float = 0.4
    adaptive_switch_threshold: bool = True
    switch_threshold_step_up: float = 0.05
    switch_threshold_step_down: float = 0.03
    switch_threshold_release_steps: int = 2
    switch_cost_window_size: int = 3


@dataclass
class SeparateAsyncConfig(BaseConfig):
    """``trainer.v1.separate_async``: a rollouter of its own generating continuously; weights pushed after each
    step of ``parameter_sync_step`` mini-batch updates (``data.train_batch_size = parameter_sync_step *
    ppo_mini_batch_size``)."""

    num_warmup_batches: int = 1  # batches the rollouter generates ahead of training
    parameter_sync_step: int = 4  # mini-batch updates between two weight pushes (one training step)
    hybrid_rollout: HybridRolloutSwitchConfig = field(default_factory=HybridRolloutSwitchConfig)


@dataclass
class CustomSamplerConfig(BaseConfig):
    """``trainer.v1.sampler.custom_sampler``: upstream's replay-buffer sampler class (not provided here)."""

    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class V1SamplerConfig(BaseConfig):
    """``trainer.v1.sampler``: how stale a trained sample may be, and what happens to one that is too stale."""

    max_off_policy_threshold: int = 8  # weight versions from generation start to training
    max_off_policy_strategy: Literal["drop", "wait"] = "drop"
    sync_refill_failed_groups: bool = False
    custom_sampler: CustomSamplerConfig = field(default_factory=CustomSamplerConfig)
    sampler_kwargs: dict[str, Any] = dict_field()


@dataclass
class V1TrainerConfig(BaseConfig):
    """``trainer.v1``: upstream v0.9's trainer modes (docs/async_training.md, "verl v0.9 trainer modes")."""

    trainer_mode: Literal["sync", "colocate_async", "separate_async"] = "sync"
    sync: dict[str, Any] = dict_field()
    colocate_async: ColocateAsyncConfig = field(default_factory=ColocateAsyncConfig)
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    sampler: V1SamplerConfig = field(default_factory=V1SamplerConfig)


# ------------------------------------------------------------------------------------------------------ reward
@dataclass
class RewardCustomFunctionConfig(BaseConfig):
    """``reward.custom_reward_function``: a user ``compute_score`` (legacy: ``custom_reward_function.*``)."""

    path: Optional[str] = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = dict_field()


@dataclass
class RewardManagerModuleConfig(BaseConfig):
    """``reward.reward_manager.module``: the file and class of a reward manager of your own (``source=importlib``)."""

    path: Optional[str] = None
    name: str = "custom_reward_manager"


@dataclass
class RewardManagerSectionConfig(BaseConfig):
    """``reward.reward_manager``: a registered manager by ``name`` (legacy ``reward_model.reward_manager``), or a
    class loaded from ``module`` with ``source=importlib``."""

    source: Literal["register", "importlib"] = "register"
    name: str = "naive"
    module: RewardManagerModuleConfig = field(default_factory=RewardManagerModuleConfig)


@dataclass
class RewardModelSectionConfig(BaseConfig):
    """``reward.reward_model``: the model-based reward (legacy ``reward_model.enable`` / ``reward_model.model.path``);
    ``enable_resource_pool`` puts it on a pool of its own of ``nnodes x n_gpus_per_node`` ranks."""

    enable: bool = False
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 0
    model_path: Optional[str] = None
    rollout: dict[str, Any] = dict_field()  # upstream's serving engine of the reward model (reward_rollout.py)


@dataclass
class RewardSandboxFusionConfig(BaseConfig):
    """``reward.sandbox_fusion`` (legacy ``reward_model.sandbox_fusion``)."""

    url: Optional[str] = None
    max_concurrent: int = 64
    memory_limit_mb: int = 1024


@dataclass
class RewardSectionConfig(BaseConfig):
    """``reward``: upstream v0.9's home of reward config; each key is mirrored onto the key the trainer reads."""

    num_workers: Optional[int] = None  # reward worker processes (null: min(8, CPUs); 0: in the trainer)
    custom_reward_function: RewardCustomFunctionConfig = field(default_factory=RewardCustomFunctionConfig)
    reward_manager: RewardManagerSectionConfig = field(default_factory=RewardManagerSectionConfig)
    reward_model: RewardModelSectionConfig = field(default_factory=RewardModelSectionConfig)
    sandbox_fusion: RewardSandboxFusionConfig = field(default_factory=RewardSandboxFusionConfig)
    reward_kwargs: dict[str, Any] = dict_field()  # = reward_model.reward_kwargs (the manager's constructor args)


# -------------------------------------------------------------------------------------------------------- skip
@dataclass
class RolloutSkipConfig(BaseConfig):
    """``skip.<role>``: on the listed steps, replay the rollouts dumped under ``dump_dir`` instead of generating
    (``action=cache``: that step's dump; ``repeat``: the nearest dumped step), dumping them where none exists."""

    enable: bool = False
    dump_dir: str = "~/.verl/rollout_dump"
    steps: list[int] = list_field()
    action: Literal["cache", "repeat"] = "cache"


@dataclass
class SkipConfig(BaseConfig):
    """``skip``: upstream's SkipManager roles. ``rollout`` and ``rollout_tq`` (the V1 trainer's role) act on the
    synchronous trainer's generation step; ``async_rollout`` on the asynchronous trainers' feed of prompt batches."""

    rollout: RolloutSkipConfig = field(default_factory=RolloutSkipConfig)
    rollout_tq: RolloutSkipConfig = field(default_factory=RolloutSkipConfig)
    async_rollout: RolloutSkipConfig = field(default_factory=RolloutSkipConfig)
