"""verl's ``verl.trainer.ppo.utils``: worker roles and the "which roles does this run need" helpers.

verl names each worker group by a :class:`Role`; this project's trainer keys them by string (``actor_rollout``,
``critic``, ``rm``), and :func:`role_key` maps one to the other so a ``role_worker_mapping`` written for verl (keyed
by ``Role``) works with :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
from omegaconf import DictConfig

__all__ = [
    "ResourcePoolManager",
    "Role",
    "compute_response_mask",
    "need_critic",
    "need_reference_policy",
    "need_reward_model",
    "role_key",
]


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
# string-only keys: verl's Role has no teacher or judge member
_KEYS = ("actor_rollout", "critic", "rm", "teacher", "judge")


def role_key(role: Role | str) -> str | None:
    """The worker-group key (``actor_rollout``, ``critic``, ``rm``, ``teacher``, ``judge``) of a verl :class:`Role` or
    of a key; ``None`` for ``Role.RefPolicy`` (hosted by the actor worker). An unknown role raises ValueError listing
    the valid ones."""
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


@dataclass
class ResourcePoolManager:
    """verl's pool layout: ``resource_pool_spec`` maps a pool name to its ranks per node (``{"global_pool": [8]}``),
    ``mapping`` a :class:`Role` to a pool name. Passed to ``RayPPOTrainer(resource_pool_manager=...)`` it replaces
    ``trainer.resource_pool_spec`` / ``trainer.resource_pool_mapping``; the pools are created by the trainer's
    ``init_workers``."""

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Any, str] = field(default_factory=dict)

    def get_n_gpus(self) -> int:
        """Ranks over all pools: the sum of every pool's ranks per node."""
        return sum(sum(sizes) for sizes in self.resource_pool_spec.values())

    def pool_settings(self) -> tuple[dict[str, list[int]], dict[str, str]]:
        """``(resource_pool_spec, resource_pool_mapping)`` in the trainer's form: worker-group keys instead of
        roles (``Role.RefPolicy`` is hosted by the actor; two roles of one group must name the same pool)."""
        spec = {str(pool): list(sizes) for pool, sizes in self.resource_pool_spec.items()}
        mapping: dict[str, str] = {}
        for role, pool in self.mapping.items():
            key = role_key(role)
            if key is None:
                continue
            if pool not in spec:
                raise ValueError(f"ResourcePoolManager: {role} -> pool {pool!r}, which is not one of {sorted(spec)}")
            if key in mapping and mapping[key] != pool:
                raise ValueError(f"ResourcePoolManager: {role} -> {pool!r} but {key!r} is already on {mapping[key]!r}")
            mapping[key] = pool
        return spec, mapping


def check_verl_trainer_args(
    config: Any, ray_worker_group_cls: type | None, processor: Any, device_name: str | None
) -> None:
    """Check the verl ``RayPPOTrainer`` arguments this trainer does not use differently: ``ray_worker_group_cls``
    must be ``RayWorkerGroup`` (groups are built by the trainer) and ``device_name`` the device ``trainer.device``
    selects; ``processor`` (a vision-language model's) is accepted as is. ValueError naming the argument otherwise."""
    del processor  # the datasets and workers load the processor themselves
    if ray_worker_group_cls is not None:
        from verl.single_controller.ray import RayWorkerGroup

        if ray_worker_group_cls is not RayWorkerGroup:
            raise ValueError(
                f"RayPPOTrainer: ray_worker_group_cls={ray_worker_group_cls!r} is not supported; the trainer builds "
                "RayWorkerGroup groups itself (pass RayWorkerGroup or nothing)"
            )
    if device_name is not None:
        from verl.utils.device import get_device_name

        device = config.trainer.device
        chosen = get_device_name(device)
        if device_name != chosen:
            raise ValueError(
                f"RayPPOTrainer: device_name={device_name!r} but trainer.device={device!r} selects {chosen!r}; "
                "set trainer.device instead"
            )


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
