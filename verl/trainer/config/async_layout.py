"""Upstream verl v0.9's launch layout of the asynchronous trainers, resolved onto this project's.

v0.9's fully asynchronous and one-step-off scripts (``verl/experimental/*/shell/*.sh``) give the rollout a pool of
its own (a top-level ``rollout:`` section: ``nnodes``, ``n_gpus_per_node``; ``actor_rollout_ref.hybrid_engine=False``)
and, fully asynchronously, stream prompts one at a time (``data.train_batch_size=0``, ``data.gen_batch_size=1``)
until ``rollout.total_rollout_steps`` prompts were generated; a training step consumes ``require_batches *
ppo_mini_batch_size`` of them. Here the rollouter is ``rollout.nnodes * rollout.n_gpus_per_node`` replicas, one
device each, beside the trainer's ranks: processes on the driver's machine when the trainer runs in the driver, Ray
actors on ``rollout.nnodes`` nodes when its ranks are Ray actors (:mod:`verl.trainer.fully_async_policy.placement`,
docs/async_training.md), so:

* ``rollout.nnodes > 1`` and a tensor-parallel rollout (``actor_rollout_ref.rollout.tensor_model_parallel_size >
  1``: replicas of that many devices on one node, ``rollout.n_gpus_per_node`` a multiple of it) need the trainer on
  Ray (``trainer.backend`` resolving to ``ray``); each is
  refused in one line otherwise; the ``rollout`` section is refused in synchronous training, where the rollout
  shares the actor's ranks;
* ``actor_rollout_ref.hybrid_engine=false`` is what the asynchronous trainers do (their rollouter has its own copy
  of the policy), so it is accepted with ``async_training.mode`` and refused without;
* the streaming layout becomes the same batch arithmetic: ``data.train_batch_size`` takes
  ``actor.ppo_mini_batch_size`` (so a step still consumes ``require_batches * ppo_mini_batch_size`` prompts) and the
  prompts are requested in batches of that size, not one at a time (a warning says so);
* ``rollout.total_rollout_steps`` (prompts to generate) sets ``trainer.total_training_steps`` the way upstream
  counts them, ``total_rollout_steps // (require_batches * train_batch_size * trigger_parameter_sync_step) *
  trigger_parameter_sync_step``, unless the user set the step count;
* verl's January layout: ``rollout.total_epochs`` is ``trainer.total_epochs``, ``rollout.test_freq`` (weight
  versions) is ``trainer.test_freq`` in steps (times ``trigger_parameter_sync_step``), each unless the trainer's key
  is set, and ``async_training.compute_prox_log_prob=true`` (recompute the old log-probs with the policy before the
  update) turns bypass mode off.
"""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from verl.utils.errors import ConfigWarning

__all__ = ["check_async_layout", "engine_on_actor_ranks", "resolve_async_layout"]

_POOL_KEYS = (
    "rollout.nnodes",
    "rollout.n_gpus_per_node",
    "rollout.total_rollout_steps",
    "rollout.total_epochs",
    "rollout.test_freq",
)
_POOL_DEFAULTS = (1, 1, None, None, None)  # RolloutPoolConfig's: one rollouter, the trainer's data and validation


def _select(pool: Any, key: str) -> Any:
    return pool.get(key.split(".", 1)[1]) if isinstance(pool, DictConfig) else None


def _mode(cfg: DictConfig) -> str | None:
    at = cfg.get("async_training")
    return at.get("mode") if isinstance(at, DictConfig) else None


def engine_on_actor_ranks(cfg: DictConfig) -> bool:
    """Whether the actor's ranks hold a rollout engine: in synchronous training (the hybrid engine), and in the
    asynchronous trainers only with ``async_training.use_trainer_do_validate`` (validation on the trainer's ranks,
    upstream v0.9's key); otherwise their rollouts and validation run on the rollouter."""
    return _mode(cfg) is None or bool(cfg.async_training.get("use_trainer_do_validate"))


def resolve_async_layout(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """Translate the streaming layout and ``rollout.total_rollout_steps`` in place (module docstring); returns what
    changed. Called before validation from :meth:`PPOConfig.adapt_defaults`."""
    changed: dict[str, Any] = {}
    mode = _mode(cfg)
    pool = cfg.get("rollout")
    if mode is None or not isinstance(pool, DictConfig):
        return changed
    data = cfg.data
    if mode == "fully_async" and int(data.train_batch_size) == 0:
        mini = int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
        data.train_batch_size = mini
        changed["data.train_batch_size"] = mini
        if data.get("gen_batch_size") is not None:
            data.gen_batch_size = None
            changed["data.gen_batch_size"] = None
        warnings.warn(
            f"data.train_batch_size=0 (upstream's streaming layout): the rollouter is sent batches of "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini} prompts, a training step consumes "
            f"async_training.require_batches of them (upstream: one prompt at a time, the same count a step)",
            ConfigWarning,
            stacklevel=2,
        )
    at = cfg.async_training
    trigger_steps = max(int(at.get("trigger_parameter_sync_step") or 1), 1) if mode == "fully_async" else 1
    # verl's January layout: the rollouter's own epochs and validation period (in weight versions)
    if pool.get("total_epochs") is not None and "trainer.total_epochs" not in user_keys:
        cfg.trainer.total_epochs = int(pool.total_epochs)
        changed["trainer.total_epochs"] = int(pool.total_epochs)
    if pool.get("test_freq") is not None and "trainer.test_freq" not in user_keys:
        freq = int(pool.test_freq) * trigger_steps if int(pool.test_freq) > 0 else int(pool.test_freq)
        cfg.trainer.test_freq = freq
        changed["trainer.test_freq"] = freq
    if at.get("compute_prox_log_prob") and "algorithm.rollout_correction.bypass_mode" not in user_keys:
        # the old log-probs recomputed by the policy before the update: the non-bypass path (rollout_is weighs it)
        cfg.algorithm.rollout_correction.bypass_mode = False
        at.use_rollout_log_probs = False
        changed["algorithm.rollout_correction.bypass_mode"] = False
    total = pool.get("total_rollout_steps")
    if total is not None and "trainer.total_training_steps" not in user_keys:
        trigger = trigger_steps
        per_step = max(int(at.get("require_batches") or 1), 1) if mode == "fully_async" else 1
        prompts = per_step * max(int(data.train_batch_size), 1) * trigger
        steps = int(total) // prompts * trigger
        cfg.trainer.total_training_steps = steps
        changed["trainer.total_training_steps"] = steps
    return changed


def check_async_layout(cfg: DictConfig, errors: list[str], warns: list[str] | None = None) -> None:
    """One line for a rollout pool this project cannot place (module docstring), for the ``rollout`` section or
    ``hybrid_engine=false`` in synchronous training, and for a negative ``total_rollout_steps``; a warning in
    ``warns`` when validation on the rollouter would see weights older than the step's."""
    mode = _mode(cfg)
    pool = cfg.get("rollout")
    hybrid = bool(cfg.actor_rollout_ref.hybrid_engine)
    if mode is None:
        if not hybrid:
            errors.append(
                "actor_rollout_ref.hybrid_engine=false (rollout on workers of its own) is what the asynchronous "
                "trainers do (async_training.mode=one_step_off | fully_async); synchronous training shares one "
                "worker per rank between actor, rollout and reference: set actor_rollout_ref.hybrid_engine=true"
            )
        set_here = [key for key, default in zip(_POOL_KEYS, _POOL_DEFAULTS) if _select(pool, key) != default]
        if isinstance(pool, DictConfig) and set_here:
            errors.append(
                f"{', '.join(set_here)}: the top-level rollout section sizes the asynchronous trainers' rollouter "
                "(async_training.mode); in synchronous training the rollout shares the actor's ranks: drop it"
            )
        return
    _check_validation_weights(cfg, mode, warns if warns is not None else [])
    if not isinstance(pool, DictConfig):
        return
    from verl.trainer.config.parallel_checks import resolve_backend

    if int(pool.nnodes) != 1 and resolve_backend(cfg.trainer) != "ray":
        errors.append(
            f"rollout.nnodes={pool.nnodes}: a rollout pool across machines runs as Ray actors beside a trainer on "
            f"Ray, and this trainer's one rank runs in the driver (trainer.backend resolves to local): set "
            "trainer.backend=ray, or rollout.nnodes=1 (docs/async_training.md)"
        )
    tp = int(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
    if tp != 1:
        _check_tensor_parallel_replicas(cfg, pool, tp, mode, errors)
    if cfg.async_training.get("compute_prox_log_prob") and bool(cfg.algorithm.rollout_correction.bypass_mode):
        errors.append(
            "async_training.compute_prox_log_prob=true recomputes the old log-probs, which "
            "algorithm.rollout_correction.bypass_mode=true skips: set one of them"
        )
    total = pool.get("total_rollout_steps")
    if total is not None and int(total) < 1:
        errors.append(f"rollout.total_rollout_steps={total} must be >= 1 (or null: the data's prompts x epochs)")


def _check_validation_weights(cfg: DictConfig, mode: str, warns: list[str]) -> None:
    """Validation on the rollouter validates the last weights pushed: with a ``trainer.test_freq`` that is not a
    multiple of ``trigger_parameter_sync_step`` some validations see weights a few steps old."""
    trigger = int(cfg.async_training.trigger_parameter_sync_step) if mode == "fully_async" else 1
    freq = int(cfg.trainer.test_freq)
    if engine_on_actor_ranks(cfg) or trigger <= 1 or freq <= 0 or freq % trigger == 0:
        return
    warns.append(
        f"trainer.test_freq={freq} is not a multiple of async_training.trigger_parameter_sync_step={trigger}: "
        "validation runs on the rollouter with the last weights pushed, so some passes validate weights up to "
        f"{trigger - 1} steps old (the last step's are pushed first); use a multiple, or "
        "async_training.use_trainer_do_validate=true to validate on the trainer's ranks"
    )


def _check_tensor_parallel_replicas(cfg: DictConfig, pool: DictConfig, tp: int, mode: str, errors: list[str]) -> None:
    """A tensor-parallel rollout replica is a Ray worker group of ``tp`` ranks on one node, each rank a receiver of
    every push: it needs the trainer on Ray and whole replicas per node."""
    from verl.trainer.config.parallel_checks import resolve_backend

    key = f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"
    if resolve_backend(cfg.trainer) != "ray":
        errors.append(
            f"{key}: a tensor-parallel rollout replica of async_training.mode={mode} is a Ray worker group, and this "
            "trainer's one rank runs in the driver (trainer.backend resolves to local): set trainer.backend=ray, "
            "or the size to 1"
        )
    if int(pool.n_gpus_per_node) % tp:
        errors.append(
            f"{key}: each replica's ranks are on one node, so rollout.n_gpus_per_node={pool.n_gpus_per_node} must "
            "be a multiple of it"
        )
