"""verl's ``verl.trainer.ppo.utils``: worker roles and the "which roles does this run need" helpers.

verl names each worker group by a :class:`Role`; this project's trainer keys them by string (``actor_rollout``,
``critic``, ``rm``), and :func:`role_key` maps one to the other so a ``role_worker_mapping`` written for verl (keyed
by ``Role``) works with :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch
from omegaconf import DictConfig

__all__ = ["Role", "compute_response_mask", "need_critic", "need_reference_policy", "need_reward_model", "role_key"]


class Role(Enum):
    """The worker roles of a PPO run (verl's members and values)."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6

    def __str__(self) -> str:
        return self.name


# verl role -> this trainer's worker-group key. The reference policy is hosted by the actor worker here
# (ActorRolloutRefWorker with role="actor_rollout_ref"), so Role.RefPolicy needs no group of its own.
_ROLE_KEYS: dict[Role, str | None] = {
    Role.Actor: "actor_rollout",
    Role.Rollout: "actor_rollout",
    Role.ActorRollout: "actor_rollout",
    Role.ActorRolloutRef: "actor_rollout",
    Role.Critic: "critic",
    Role.RewardModel: "rm",
    Role.RefPolicy: None,
}
_KEYS = ("actor_rollout", "critic", "rm")


def role_key(role: Role | str) -> str | None:
    """The worker-group key (``actor_rollout``, ``critic``, ``rm``) of a verl :class:`Role` or of a key; ``None`` for
    ``Role.RefPolicy`` (hosted by the actor worker). An unknown role raises ValueError listing the valid ones."""
    if isinstance(role, Role):
        return _ROLE_KEYS[role]
    if role in _KEYS:
        return role
    raise ValueError(f"unknown worker role {role!r}; use a verl Role ({[r.name for r in Role]}) or one of {_KEYS}")


def normalize_role_worker_mapping(mapping: dict[Any, type] | None) -> dict[str, type]:
    """``{Role.ActorRollout: cls, Role.Critic: cls2, ...}`` or ``{"actor_rollout": cls, ...}`` as string keys.

    Two roles mapping to the same group must name the same class (ValueError naming both otherwise)."""
    out: dict[str, type] = {}
    for role, cls in (mapping or {}).items():
        key = role_key(role)
        if key is None:
            continue
        if key in out and out[key] is not cls:
            raise ValueError(
                f"role_worker_mapping: {role} maps to worker group {key!r}, which already has {out[key].__name__}; "
                f"got {getattr(cls, '__name__', cls)}"
            )
        out[key] = cls
    return out


def need_reference_policy(role_worker_mapping: dict[Any, Any]) -> bool:
    """Whether the mapping has a reference policy role (verl's test: ``Role.RefPolicy in role_worker_mapping``)."""
    return Role.RefPolicy in role_worker_mapping or Role.ActorRolloutRef in role_worker_mapping


def need_reward_model(role_worker_mapping: dict[Any, Any]) -> bool:
    """Whether the mapping has a reward-model role."""
    return Role.RewardModel in role_worker_mapping or "rm" in role_worker_mapping


def need_critic(config: DictConfig) -> bool:
    """Whether a critic is trained: ``critic.enable`` when set, else ``algorithm.adv_estimator == "gae"``."""
    from verl.trainer.config.ppo_checks import critic_enabled

    return critic_enabled(config)


def compute_response_mask(data: Any) -> torch.Tensor:
    """The response part of ``attention_mask``: ``attention_mask[:, -response_length:]`` with ``response_length``
    the width of ``data.batch["responses"]``; shape ``[bs, response_length]``."""
    responses = data.batch["responses"]
    return data.batch["attention_mask"][:, -responses.size(1) :]
