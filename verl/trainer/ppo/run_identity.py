"""What a checkpoint of a PPO-family run is a checkpoint of: recorded in every completion marker and compared before
every resume (:mod:`verl.checkpoint.identity`), so a run never resumes another model's checkpoint."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.checkpoint.identity import make_identity, model_fingerprint_from_path
from verl.models.loader import resolve_model_path
from verl.trainer.config import critic_enabled


def ppo_run_identity(config: DictConfig) -> dict[str, Any]:
    """What a checkpoint of this PPO-family run is a checkpoint of (``identity.make_identity``):
    the advantage estimator, the LoRA rank, the actor's (and, when trained, the critic's) model fingerprint
    from its ``config.json`` (with ``override_config``) and safetensors headers, and :func:`ppo_resume_settings`.
    Reads no weights."""

    def fingerprint(section: Any) -> dict[str, Any]:
        override = section.get("override_config") or {}
        override = OmegaConf.to_container(override, resolve=True) if not isinstance(override, dict) else override
        return model_fingerprint_from_path(resolve_model_path(str(section.path)), override)

    model = config.actor_rollout_ref.model
    models = {"actor": fingerprint(model)}
    if critic_enabled(config):
        models["critic"] = fingerprint(config.critic.model)
    lora_rank = int(model.lora_rank or 0)
    return make_identity("ppo", config.algorithm.adv_estimator, models, lora_rank, ppo_resume_settings(config))


def ppo_resume_settings(config: DictConfig) -> dict[str, Any]:
    """The settings a resumed PPO-family run must share with its checkpoint (``identity.make_identity``'s
    ``settings``): the data order (``data.train_batch_size``, ``data.shuffle``, ``data.seed``) and the mode
    (``async_training.mode``, agent loops: :func:`~verl.trainer.config.experiment_name.run_mode`)."""
    from verl.trainer.config.experiment_name import run_mode

    data = config.data
    async_mode = OmegaConf.select(config, "async_training.mode", default=None)
    multi_turn = OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.enable")  # absent: single-turn
    return {
        "data.train_batch_size": int(data.train_batch_size),
        "data.shuffle": bool(data.shuffle),
        "data.seed": None if data.seed is None else int(data.seed),
        "mode": run_mode(async_mode, multi_turn) or "sync",
    }
