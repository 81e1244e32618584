"""The roles of :class:`~verl.workers.fsdp_workers.ActorRolloutRefWorker`: which parts (actor, rollout engine,
reference policy) a worker of each role builds.

verl's roles (``actor``, ``rollout``, ``ref``, ``actor_rollout``, ``actor_rollout_ref``) plus ``actor_ref``: an
actor with its reference policy and no rollout engine, the rank of an asynchronous trainer whose rollouts and
validation run on the rollouter (docs/async_training.md).
"""

from __future__ import annotations

__all__ = ["ACTOR_ROLES", "REF_ROLES", "ROLES", "ROLLOUT_ROLES", "actor_role"]

ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref", "actor_ref")
ACTOR_ROLES = ("actor", "actor_rollout", "actor_rollout_ref", "actor_ref")
ROLLOUT_ROLES = ("rollout", "actor_rollout", "actor_rollout_ref")
REF_ROLES = ("ref", "actor_rollout_ref", "actor_ref")


def actor_role(*, rollout: bool, reference: bool) -> str:
    """The role of the actor group's workers: ``actor_rollout[_ref]`` with a rollout engine on the actor's ranks
    (the hybrid engine), ``actor[_ref]`` without one."""
    return ("actor_rollout" if rollout else "actor") + ("_ref" if reference else "")
