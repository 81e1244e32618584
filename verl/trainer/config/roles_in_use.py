"""Which optional roles a PPO config uses: a trained critic, a reference policy. One definition each, read by the
config checks, the step plan, the memory check and the driver."""

from __future__ import annotations

from omegaconf import DictConfig

__all__ = ["critic_enabled", "need_reference_policy"]


def critic_enabled(cfg: DictConfig) -> bool:
    """Whether a critic is trained: ``critic.enable`` when set, else ``algorithm.adv_estimator == "gae"``."""
    enable = cfg.critic.get("enable")
    if enable is None:
        return str(cfg.algorithm.adv_estimator) == "gae"
    return bool(enable)


def need_reference_policy(cfg: DictConfig) -> bool:
    """Whether the reference policy is needed: a KL term in the reward or in the actor loss, or a policy loss that
    compares with the reference (``online_dpo``)."""
    actor = cfg.actor_rollout_ref.actor
    if bool(cfg.algorithm.use_kl_in_reward) or bool(actor.use_kl_loss):
        return True
    from verl.algorithms.core_algos import POLICY_LOSS_REGISTRY
    from verl.algorithms.registry import needs_reference

    loss = POLICY_LOSS_REGISTRY.get(str(actor.policy_loss.loss_mode))  # an unknown name is reported elsewhere
    return loss is not None and needs_reference(loss)
