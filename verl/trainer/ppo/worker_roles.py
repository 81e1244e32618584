"""Which worker roles a PPO run has, with their classes and constructor arguments, and where they are placed.

The one place roles are decided (:meth:`verl.trainer.ppo.ray_trainer.RayPPOTrainer.worker_roles` calls it): the actor
(with its rollout engine unless the rollouts come from elsewhere, the asynchronous trainers' rollouter, and the
reference policy when a KL needs one), the critic when the estimator trains one, the reward
model when enabled, the teacher (``distillation.enable``) and the judge (``reward_model.judge.backend=worker``).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.workers import roles

__all__ = ["pool_settings", "worker_roles"]


def worker_roles(
    config: DictConfig,
    role_worker_mapping: dict[str, type],
    role_kwargs: dict[str, dict[str, Any]],
    *,
    reference: bool,
    critic: bool,
    reward_model: bool,
    teacher: bool,
    judge: bool,
    rollout: bool = True,
) -> dict[str, tuple[type, dict[str, Any]]]:
    """Role -> (worker class, constructor arguments) of a run with ``config`` and the roles it uses (the trainer
    derives the flags from the config: a reference policy when a KL needs one, a critic for GAE, ...). ``rollout``
    false gives the actor's ranks no rollout engine (roles ``actor`` / ``actor_ref``).

    ``role_worker_mapping`` (verl's name: role -> class) replaces the built-in class of a role; ``role_kwargs``
    (role -> arguments, e.g. the Python API's model objects) is merged over the arguments derived from the config.
    """
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker, RewardModelWorker
    from verl.workers.judge_worker import JudgeWorker
    from verl.workers.teacher import TeacherWorker

    classes: dict[str, type] = {
        "actor_rollout": ActorRolloutRefWorker,
        "critic": CriticWorker,
        "rm": RewardModelWorker,
        "teacher": TeacherWorker,
        "judge": JudgeWorker,
    }
    classes.update(role_worker_mapping)
    actor_role = roles.actor_role(rollout=rollout, reference=reference)
    kwargs: dict[str, dict[str, Any]] = {"actor_rollout": {"config": config.actor_rollout_ref, "role": actor_role}}
    if critic:
        kwargs["critic"] = {"config": config.critic}
    if reward_model:
        kwargs["rm"] = {"config": config.reward_model}
    if teacher:
        model = config.actor_rollout_ref.model
        kwargs["teacher"] = {
            "config": config.distillation,
            "student_tokenizer": str(model.get("tokenizer_path") or model.path),
        }
    if judge:
        kwargs["judge"] = {"config": config.reward_model.judge}
    return {role: (classes[role], {**args, **role_kwargs.get(role, {})}) for role, args in kwargs.items()}


def pool_settings(trainer_config: DictConfig, resource_pool_manager: Any = None) -> dict[str, Any]:
    """``resource_pool_spec`` / ``resource_pool_mapping`` of the worker groups: from verl's ``ResourcePoolManager``
    when one was given, else from ``trainer.resource_pool_spec`` / ``trainer.resource_pool_mapping``."""
    if resource_pool_manager is not None:
        spec, mapping = resource_pool_manager.pool_settings()
        return {"resource_pool_spec": spec, "resource_pool_mapping": mapping}
    return {
        "resource_pool_spec": OmegaConf.to_container(trainer_config.resource_pool_spec or DictConfig({})),
        "resource_pool_mapping": OmegaConf.to_container(trainer_config.resource_pool_mapping or DictConfig({})),
    }
