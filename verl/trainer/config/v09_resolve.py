"""Upstream verl v0.9's new config sections resolved onto the keys this project's trainers read.

Called from :meth:`PPOConfig.adapt_defaults` (before validation) with the keys the user set: ``trainer.v1``
(:mod:`verl.trainer.config.v1_modes`), ``reward`` (:mod:`verl.trainer.config.reward_section`), ``distillation``'s
upstream keys (:mod:`verl.trainer.config.distillation_keys`) and ``skip`` (checked here; acted on by
:mod:`verl.trainer.ppo.rollout_skip`). Every refusal or conflict is one line of one :class:`ConfigError`.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from verl.utils.errors import ConfigError

__all__ = ["resolve_v09_sections"]


def _check_skip(cfg: DictConfig, errors: list[str]) -> None:
    """``skip``: ``rollout`` / ``rollout_tq`` act on the synchronous trainer's generation, ``async_rollout`` on the
    rollouter's feed of the asynchronous trainers."""
    skip = cfg.get("skip")
    if not isinstance(skip, DictConfig):
        return
    mode = cfg.async_training.mode if isinstance(cfg.get("async_training"), DictConfig) else None
    if skip.async_rollout.enable and mode is None:
        errors.append(
            "skip.async_rollout.enable=true replays the rollouter's feed of an asynchronous trainer; the synchronous "
            "trainer's role is skip.rollout"
        )
    for role in ("rollout", "rollout_tq"):
        if skip[role].enable and mode is not None:
            errors.append(
                f"skip.{role}.enable=true replays the synchronous trainer's generation; async_training.mode={mode} "
                "generates in the rollouter: use trainer.v1.trainer_mode=sync"
            )
    if skip.rollout.enable and skip.rollout_tq.enable:
        errors.append("skip.rollout and skip.rollout_tq both enabled: they are the same role here; enable one")


def resolve_v09_sections(cfg: DictConfig, user_keys: set[str]) -> dict[str, Any]:
    """Resolve ``trainer.v1``, ``reward``, ``distillation`` and check ``skip`` in place; returns ``{key: value}``
    of what changed.

    Raises:
        ConfigError: one line per refused key or conflicting pair.
    """
    from verl.trainer.config.distillation_keys import resolve_distillation_keys
    from verl.trainer.config.reward_section import resolve_reward_section
    from verl.trainer.config.v1_modes import resolve_v1_modes

    errors: list[str] = []
    changed: dict[str, Any] = {}
    user = set(user_keys)
    for resolve in (resolve_v1_modes, resolve_reward_section, resolve_distillation_keys):
        try:
            changed.update(resolve(cfg, user, errors))
        except (TypeError, ValueError, AttributeError, KeyError):
            continue  # ill-typed values: the schema validation that follows names them
    try:
        _check_skip(cfg, errors)
    except (TypeError, ValueError, AttributeError, KeyError):
        pass
    if errors:
        raise ConfigError(errors)
    return changed
