"""Upstream verl v0.9's V1 trainer modes (``trainer.use_v1``, ``trainer.v1.*``) resolved onto ``async_training``.

Upstream (``verl/trainer/config/ppo_trainer.yaml``, docs/advance/v1_async_trainer.md) runs three modes under
``python -m verl.trainer.main_ppo``; here each is one of this project's trainers (the runner dispatches on
``async_training.mode``, :func:`verl.trainer.ppo.runner.async_trainer_cls`):

============================  ==========================================================================
``trainer_mode``              here
============================  ==========================================================================
``sync``                      the synchronous driver (``async_training.mode`` untouched: null unless set)
``colocate_async``            ``num_warmup_batches=1``: ``one_step_off``; ``w != 1``: ``fully_async`` with
                              ``staleness_threshold=w`` (a push every step)
``separate_async``            ``fully_async``, ``staleness_threshold = num_warmup_batches`` (``min`` with
                              ``max_off_policy_threshold`` under ``wait``), ``partial_rollout=true``, a push
                              after each step of ``parameter_sync_step`` mini-batch updates
============================  ==========================================================================

``max_off_policy_strategy``: ``wait`` caps how far the rollouter runs ahead at ``max_off_policy_threshold`` (it
waits rather than produce a sample that would be too stale); ``drop`` lets it run ``num_warmup_batches`` ahead and
the trainer drops every group whose staleness exceeds the threshold
(:meth:`FullyAsyncRayPPOTrainer.drop_stale_groups`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["move_v1_rollout_pool", "resolve_v1_modes", "v1_async_active"]


def user_set(key: str, user: set[str]) -> bool:
    """Whether the user gave ``key``, a section above it or a key inside it, on the command line or in their YAML."""
    return key in user or any(key.startswith(u + ".") or u.startswith(key + ".") for u in user)


def v1_async_active(cfg: Any) -> bool:
    """Whether the run is one of upstream's V1 asynchronous modes (``trainer.use_v1`` and an async mode)."""
    # a full config has both keys (TrainerConfig); absent (a partial config) reads as "not a V1 async mode"
    use_v1 = OmegaConf.select(cfg, "trainer.use_v1")
    mode = OmegaConf.select(cfg, "trainer.v1.trainer_mode")
    return bool(use_v1) and mode in ("colocate_async", "separate_async")


def move_v1_rollout_pool(cfg: DictConfig, user: set[str], errors: list[str]) -> dict[str, Any]:
    """``separate_async``'s standalone rollout pool, ``actor_rollout_ref.rollout.nnodes x n_gpus_per_node`` upstream
    (``n_gpus_per_node`` unset: ``trainer.n_gpus_per_node``), is the asynchronous trainers' top-level ``rollout.nnodes``
    / ``n_gpus_per_node`` here (async_layout.py checks its size). The two keys move there before the config is
    settled; a top-level value the user gave differently is a conflict naming both keys. Returns what changed."""
    changed: dict[str, Any] = {}
    if not v1_async_active(cfg) or OmegaConf.select(cfg, "trainer.v1.trainer_mode") != "separate_async":
        return changed
    rollout = OmegaConf.select(cfg, "actor_rollout_ref.rollout")
    if not isinstance(rollout, DictConfig) or "nnodes" not in rollout or not rollout.nnodes:
        return changed  # no standalone pool asked for (upstream's 0)
    per_node = rollout.n_gpus_per_node if "n_gpus_per_node" in rollout else cfg.trainer.n_gpus_per_node
    for name, value in (("nnodes", rollout.nnodes), ("n_gpus_per_node", per_node)):
        src, dst = f"actor_rollout_ref.rollout.{name}", f"rollout.{name}"
        current = OmegaConf.select(cfg, dst)
        if user_set(dst, user) and current != value:
            errors.append(f"{src}={value} and {dst}={current} both size the rollout pool of separate_async; keep one")
        elif current != value:
            OmegaConf.update(cfg, dst, value, merge=False)
            changed[dst] = value
        if name in rollout:
            del rollout[name]
    return changed


def _set(cfg: DictConfig, key: str, value: Any, why: str, user: set[str], errors: list[str], changed: dict) -> None:
    """Set ``key`` to ``value`` (what ``why`` asks); a different value the user gave there is a conflict."""
    current = OmegaConf.select(cfg, key)
    if user_set(key, user) and current != value:
        errors.append(f"{key}={current} conflicts with {why} (which sets {key}={value}); set only one of the two")
        return
    if current != value:
        OmegaConf.update(cfg, key, value, merge=False)
        changed[key] = value


def _refusals(v1: DictConfig, errors: list[str]) -> None:
    """The V1 keys that have no counterpart here, each refused in one line."""
    p = "trainer.v1"
    sampler = v1.sampler
    if int(sampler.max_off_policy_threshold) < 1:
        errors.append(f"{p}.sampler.max_off_policy_threshold={sampler.max_off_policy_threshold} must be >= 1")
    if sampler.sync_refill_failed_groups:
        errors.append(
            f"{p}.sampler.sync_refill_failed_groups=true: there are no failed groups to refill here (a rollout that "
            "fails stops the step with its error); drop the key"
        )
    if sampler.custom_sampler.path is not None or sampler.custom_sampler.name is not None:
        errors.append(
            f"{p}.sampler.custom_sampler: upstream's replay-buffer sampler classes (TransferQueue) are not provided "
            "here; use algorithm.filter_groups for dynamic sampling"
        )
    if len(sampler.sampler_kwargs) > 0:
        errors.append(f"{p}.sampler.sampler_kwargs: only read by a custom sampler, which is not provided; drop it")
    if v1.separate_async.hybrid_rollout.enable_switch:
        errors.append(
            f"{p}.separate_async.hybrid_rollout.enable_switch=true: lending idle trainer GPUs to rollout is not "
            "implemented here (the rollout pool is fixed: size it with rollout.n_gpus_per_node): leave it false"
        )
    if len(v1.sync) > 0:
        errors.append(f"{p}.sync: upstream's sync mode has no keys; got {sorted(v1.sync.keys())}")


def resolve_v1_modes(cfg: DictConfig, user: set[str], errors: list[str]) -> dict[str, Any]:
    """Write the ``async_training`` keys of ``trainer.v1.trainer_mode`` (module docstring) into ``cfg``; append
    one line per refusal or conflict to ``errors``. Returns ``{key: new value}`` of what changed."""
    changed: dict[str, Any] = {}
    trainer = cfg.get("trainer")
    if trainer is None or not isinstance(trainer.get("v1"), DictConfig):
        return changed
    v1 = trainer.v1
    mode = v1.trainer_mode
    if not trainer.use_v1:
        if mode != "sync":
            errors.append(
                f"trainer.v1.trainer_mode={mode} needs trainer.use_v1=true (use_v1=false is upstream's legacy "
                "trainer: the synchronous driver here)"
            )
        return changed
    try:
        _refusals(v1, errors)
    except (TypeError, ValueError, AttributeError):
        return changed  # ill-typed values: the schema validation names them
    at = cfg.get("async_training")
    if at is None:
        return changed
    if mode == "sync":
        if user_set("trainer.v1.trainer_mode", user) and at.mode is not None and user_set("async_training.mode", user):
            errors.append(
                f"trainer.v1.trainer_mode=sync conflicts with async_training.mode={at.mode}; set only one of the two "
                "(trainer_mode=colocate_async / separate_async are the asynchronous trainers)"
            )
        return changed
    why = f"trainer.v1.trainer_mode={mode}"
    sampler = v1.sampler
    threshold = int(sampler.max_off_policy_threshold)
    if mode == "colocate_async":
        lead = int(v1.colocate_async.num_warmup_batches)
        if lead < 0:
            errors.append(f"trainer.v1.colocate_async.num_warmup_batches={lead} must be >= 0")
            return changed
        if sampler.max_off_policy_strategy == "wait":
            lead = min(lead, threshold)
        if lead == 1:
            _set(cfg, "async_training.mode", "one_step_off", why, user, errors, changed)
            return changed
        _set(cfg, "async_training.mode", "fully_async", why, user, errors, changed)
        _set(cfg, "async_training.staleness_threshold", float(lead), why, user, errors, changed)
        _set(cfg, "async_training.trigger_parameter_sync_step", 1, why, user, errors, changed)
        _set(cfg, "async_training.require_batches", 1, why, user, errors, changed)
        return changed
    sep = v1.separate_async
    lead = int(sep.num_warmup_batches)
    if lead < 0:
        errors.append(f"trainer.v1.separate_async.num_warmup_batches={lead} must be >= 0")
        return changed
    if sampler.max_off_policy_strategy == "wait":
        lead = min(lead, threshold)
    _set(cfg, "async_training.mode", "fully_async", why, user, errors, changed)
    _set(cfg, "async_training.staleness_threshold", float(lead), why, user, errors, changed)
    _set(cfg, "async_training.trigger_parameter_sync_step", 1, why, user, errors, changed)
    _set(cfg, "async_training.require_batches", 1, why, user, errors, changed)
    if not user_set("async_training.partial_rollout", user):
        _set(cfg, "async_training.partial_rollout", True, why, user, errors, changed)
    _parameter_sync_step(cfg, user, errors, changed)
    return changed


def _parameter_sync_step(cfg: DictConfig, user: set[str], errors: list[str], changed: dict[str, Any]) -> None:
    """Upstream's invariant ``data.train_batch_size = parameter_sync_step * ppo_mini_batch_size`` (one weight push
    per step of ``parameter_sync_step`` mini-batch updates): an unset ``parameter_sync_step`` follows the batch
    sizes; a set one that breaks it is an error naming the three keys."""
    key = "trainer.v1.separate_async.parameter_sync_step"
    batch = int(cfg.data.train_batch_size)
    mini = int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
    step = int(OmegaConf.select(cfg, key))
    if mini > 0 and batch == step * mini:
        return
    if not user_set(key, user) and mini > 0 and batch % mini == 0:
        OmegaConf.update(cfg, key, batch // mini, merge=False)
        changed[key] = batch // mini
        return
    errors.append(
        f"{key}={step}: upstream's separate_async pushes weights after each step of parameter_sync_step mini-batch "
        f"updates, so data.train_batch_size ({batch}) must equal {key} x actor_rollout_ref.actor.ppo_mini_batch_size "
        f"({mini})"
    )
