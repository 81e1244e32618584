"""Upstream verl v0.9's ``reward:`` section and the legacy reward keys, kept in step.

``reward.*`` is the home of reward config (upstream ``verl/trainer/config/reward/reward.yaml``); the legacy keys
(``reward_model.*``, ``custom_reward_function.*``) are still read. Each pair below names the same setting; after
:func:`resolve_reward_section` both hold the value the user gave (in either place), so the trainer and ``--cfg job``
agree. A legacy key the user set prints one deprecation line (all of them in that line); the same setting given in
both places with different values is an error naming both keys.

``reward.reward_model.enable_resource_pool`` puts the reward model on a pool of its own (``trainer.resource_pool_spec
.reward_pool`` of ``nnodes x n_gpus_per_node`` ranks, role ``rm`` mapped to it); ``reward.reward_model.rollout``
(upstream serves the reward model through a rollout engine) maps onto the rm workers (:mod:`.reward_rollout`).
"""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.reward_rollout import resolve_reward_rollout
from verl.trainer.config.v09_schema import RewardCustomFunctionConfig
from verl.trainer.config.v1_modes import user_set
from verl.utils.errors import ConfigWarning

__all__ = ["REWARD_KEY_PAIRS", "resolve_reward_section"]

# (reward.* key, legacy key): the same setting in upstream v0.9's section and in the legacy one
REWARD_KEY_PAIRS: tuple[tuple[str, str], ...] = (
    ("reward.num_workers", "reward_model.num_workers"),
    ("reward.custom_reward_function.path", "custom_reward_function.path"),
    ("reward.custom_reward_function.name", "custom_reward_function.name"),
    ("reward.custom_reward_function.reward_kwargs", "custom_reward_function.reward_kwargs"),
    ("reward.reward_manager.name", "reward_model.reward_manager"),
    ("reward.reward_model.enable", "reward_model.enable"),
    ("reward.reward_model.model_path", "reward_model.model.path"),
    ("reward.reward_model.enable_resource_pool", "reward_model.enable_resource_pool"),
    ("reward.reward_model.n_gpus_per_node", "reward_model.n_gpus_per_node"),
    ("reward.reward_model.nnodes", "reward_model.nnodes"),
    ("reward.sandbox_fusion.url", "reward_model.sandbox_fusion.url"),
    ("reward.sandbox_fusion.max_concurrent", "reward_model.sandbox_fusion.max_concurrent"),
    ("reward.sandbox_fusion.memory_limit_mb", "reward_model.sandbox_fusion.memory_limit_mb"),
    ("reward.reward_kwargs", "reward_model.reward_kwargs"),
)

REWARD_POOL = "reward_pool"


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value


def resolve_reward_section(cfg: DictConfig, user: set[str], errors: list[str]) -> dict[str, Any]:
    """Mirror each ``REWARD_KEY_PAIRS`` pair onto the other side (module docstring); appends conflicts and
    refusals to ``errors``, warns once (``ConfigWarning``) about the legacy keys used. Returns what changed."""
    changed: dict[str, Any] = {}
    if not isinstance(cfg.get("reward"), DictConfig):
        return changed
    _null_function_name(cfg, user, changed)
    legacy_used: list[str] = []
    for new, old in REWARD_KEY_PAIRS:
        new_set, old_set = user_set(new, user), user_set(old, user)
        new_value, old_value = _plain(OmegaConf.select(cfg, new)), _plain(OmegaConf.select(cfg, old))
        if old_set and old_value is None:
            # upstream v0.9 gives every legacy key as null (legacy_reward_impl.yaml): null is "not given"
            old_set = False
            if new_value is not None:
                OmegaConf.update(cfg, old, new_value, merge=False)
                changed[old] = new_value
            continue
        if old_set:
            legacy_used.append(old)
        if new_set and old_set:
            if new_value != old_value:
                errors.append(f"{new}={new_value} and the legacy {old}={old_value} set the same thing; keep {new}")
            continue
        if new_set and new_value != old_value:
            OmegaConf.update(cfg, old, new_value, merge=False)
            changed[old] = new_value
        elif not new_set and old_value != new_value:
            # the legacy key (set by the user, or a default of its own) is what the trainer reads: show it in reward.*
            OmegaConf.update(cfg, new, old_value, merge=False)
            changed[new] = old_value
    if legacy_used:
        warnings.warn(
            f"deprecated: the legacy reward keys {', '.join(legacy_used)} are read, but upstream verl v0.9 moved them "
            "to reward.* (e.g. reward.reward_manager.name, reward.custom_reward_function.path); see docs/config.md",
            ConfigWarning,
            stacklevel=2,
        )
    _reward_pool(cfg, user, errors, changed)
    _reward_manager_source(cfg, errors)
    source = _legacy_reward_rollout(cfg, user, errors, changed)
    resolve_reward_rollout(cfg, user, errors, changed, source)  # reward.reward_model.rollout (reward_rollout.py)
    _legacy_reward_model_keys(cfg, user, errors)
    return changed


def _null_function_name(cfg: DictConfig, user: set[str], changed: dict[str, Any]) -> None:
    """``reward.custom_reward_function.name=null`` is the default name (``compute_score``). Upstream's own e2e script
    (tests/special_e2e/ppo_trainer/run_function_reward.sh) passes ``path=null name=null`` when it tests no custom
    function, and upstream's loader never reads the name without a path; with a path, the default name is the
    function upstream documents."""
    key = "reward.custom_reward_function.name"
    if user_set(key, user) and OmegaConf.select(cfg, key) is None:  # given, as null
        default = RewardCustomFunctionConfig().name
        OmegaConf.update(cfg, key, default, merge=False)
        changed[key] = default


def _legacy_reward_rollout(cfg: DictConfig, user: set[str], errors: list[str], changed: dict[str, Any]) -> str:
    """verl's January keys ``reward_model.use_reward_loop`` / ``reward_model.rollout``: with the reward loop on (its
    default) the legacy ``rollout`` is the same section as ``reward.reward_model.rollout`` (copied there; both set
    differently is an error); off, upstream's legacy reward-model worker never reads it, and neither does this.
    Returns the key prefix the user wrote the section under, for the refusal lines."""
    legacy, new = "reward_model.rollout", "reward.reward_model.rollout"
    # null entries are upstream v0.9's "not given" (legacy_reward_impl.yaml gives every legacy key as null)
    old_value = {k: v for k, v in (_plain(cfg.reward_model.rollout) or {}).items() if v is not None}
    if not old_value:
        return new
    if not cfg.reward_model.use_reward_loop:
        warnings.warn(
            f"{legacy} is set but reward_model.use_reward_loop=false: the reward model is scored by its worker "
            f"group as configured under reward_model.* and the rollout keys are not read (as in verl)",
            ConfigWarning,
            stacklevel=3,
        )
        return new
    new_value = _plain(cfg.reward.reward_model.rollout) or {}
    if new_value and new_value != old_value:
        errors.append(f"{new}={new_value} and the legacy {legacy}={old_value} set the same thing; keep {new}")
        return new
    if not new_value:
        OmegaConf.update(cfg, new, old_value, merge=False)
        changed[new] = old_value
    return legacy


# reward_model.model.fsdp_config keys that shard a model: the reward model is whole on every rank here
_UNSHARDED = ("wrap_policy", "reshard_after_forward", "fsdp_size", "forward_prefetch")


def _plain_default(value: Any) -> Any:
    """A dataclass default as the plain value a YAML gives (a section as its dict)."""
    import dataclasses

    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def _legacy_reward_model_keys(cfg: DictConfig, user: set[str], errors: list[str]) -> None:
    """One line per ``reward_model.model.fsdp_config`` sharding key the user set to another value than upstream's
    default: the reward model is not sharded (each rank holds it whole for a forward pass); ``param_offload`` is
    honoured by the rm worker."""
    from verl.sections.model import RewardModelFSDPConfig

    defaults = RewardModelFSDPConfig()  # upstream's defaults: they ask for nothing (a copy of its config has them)
    for key in _UNSHARDED:
        value = _plain(OmegaConf.select(cfg, f"reward_model.model.fsdp_config.{key}"))
        if user_set(f"reward_model.model.fsdp_config.{key}", user) and value != _plain_default(getattr(defaults, key)):
            errors.append(
                f"reward_model.model.fsdp_config.{key}: the reward model is not sharded here (every rank holds the "
                "whole model for its forward pass), so FSDP sharding settings do not apply; drop it "
                "(param_offload is honoured)"
            )


def _reward_pool(cfg: DictConfig, user: set[str], errors: list[str], changed: dict[str, Any]) -> None:
    """``reward.reward_model.enable_resource_pool``: a pool ``reward_pool`` of ``[n_gpus_per_node] * nnodes`` ranks
    for the ``rm`` role (``trainer.resource_pool_spec`` / ``resource_pool_mapping``)."""
    rm = cfg.reward.reward_model
    if not rm.enable_resource_pool:
        return
    nodes, per_node = int(rm.nnodes), int(rm.n_gpus_per_node)
    if nodes < 1 or per_node < 1:
        errors.append(
            f"reward.reward_model.enable_resource_pool=true needs nnodes >= 1 and n_gpus_per_node >= 1 (got "
            f"nnodes={nodes}, n_gpus_per_node={per_node})"
        )
        return
    mapping = cfg.trainer.resource_pool_mapping
    if "rm" in mapping and mapping["rm"] != REWARD_POOL:
        errors.append(
            f"reward.reward_model.enable_resource_pool=true conflicts with trainer.resource_pool_mapping.rm="
            f"{mapping['rm']}; set only one of the two"
        )
        return
    OmegaConf.update(cfg, f"trainer.resource_pool_spec.{REWARD_POOL}", [per_node] * nodes, merge=False)
    OmegaConf.update(cfg, "trainer.resource_pool_mapping.rm", REWARD_POOL, merge=False)
    changed[f"trainer.resource_pool_spec.{REWARD_POOL}"] = [per_node] * nodes
    changed["trainer.resource_pool_mapping.rm"] = REWARD_POOL


def _reward_manager_source(cfg: DictConfig, errors: list[str]) -> None:
    """``reward.reward_manager.source=importlib`` needs ``module.path`` (a Python file); the class it names is
    registered under ``reward_manager.name`` when the reward manager is built (verl/trainer/ppo/reward.py)."""
    manager = cfg.reward.reward_manager
    if manager.source == "importlib" and not manager.module.path:
        errors.append(
            "reward.reward_manager.module.path: reward.reward_manager.source=importlib needs the Python file of the "
            "reward manager class (module.name)"
        )
