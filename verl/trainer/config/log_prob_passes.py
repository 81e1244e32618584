"""Which log-prob forwards a PPO step runs, decided from the config alone (no torch), so the driver and the step
plan printed before a run (:mod:`verl.trainer.config.step_plan`) cannot disagree.

* the old-log-prob pass (``compute_log_prob``) is skipped when the update is exactly on-policy and nothing compares
  old with rollout log-probs, or when ``algorithm.rollout_correction.bypass_mode`` makes the rollout's log-probs the
  old policy's;
* rollout correction (``algorithm.rollout_correction``: importance weights, rejection, the token veto) needs the
  pass unless it runs in bypass mode.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from verl.base_config import get_config_value

__all__ = ["bypass_mode", "correction_enabled", "needs_old_log_probs", "runs_old_log_prob_pass", "update_is_on_policy"]

_CORRECTION_KEYS = ("rollout_is", "rollout_rs", "rollout_token_veto_threshold")


def correction_enabled(cfg: Any) -> bool:
    """Whether weights, rejection or the token veto are on (``cfg``: ``algorithm.rollout_correction``)."""
    return cfg is not None and any(get_config_value(cfg, key) is not None for key in _CORRECTION_KEYS)


def bypass_mode(cfg: Any) -> bool:
    """``bypass_mode``: the rollout's log-probs stand in for the old policy's (no ``compute_log_prob`` pass)."""
    return cfg is not None and bool(get_config_value(cfg, "bypass_mode"))


def needs_old_log_probs(cfg: Any) -> bool:
    """Whether the correction compares ``old_log_probs`` with the rollout's, so the old-log-prob pass must run even
    when the update is exactly on-policy."""
    return correction_enabled(cfg) and not bypass_mode(cfg)


def update_is_on_policy(cfg: DictConfig, after_critic_warmup: bool = True) -> bool:
    """Whether the actor update of a step is exactly on-policy, so the old log-probs equal the current ones
    (``actor.skip_old_log_prob_on_policy`` then skips their forward).

    Exactly on-policy: one PPO epoch over one mini-batch (``ppo_mini_batch_size >= train_batch_size``), the actor
    updated this step (``after_critic_warmup``), and nothing else reading that pass: KL in the reward and the
    distillation reward read ``old_log_probs``, the optimal-token baselines its ``sum_pi_squared``.
    """
    actor = cfg.actor_rollout_ref.actor
    return (
        bool(actor.skip_old_log_prob_on_policy)
        and int(actor.ppo_epochs) == 1
        and int(actor.ppo_mini_batch_size) >= int(cfg.data.train_batch_size)
        and not bool(cfg.algorithm.use_kl_in_reward)
        and not bool(cfg.distillation.enable)
        and not bool(actor.calculate_sum_pi_squared)  # the optimal token baselines read that pass's sum_pi_squared
        and after_critic_warmup
    )


def runs_old_log_prob_pass(cfg: DictConfig, after_critic_warmup: bool = True) -> bool:
    """Whether a step runs the actor's ``compute_log_prob`` forward for the old policy's log-probs."""
    correction = cfg.algorithm.rollout_correction
    if bypass_mode(correction):
        return False
    return not update_is_on_policy(cfg, after_critic_warmup) or needs_old_log_probs(correction)
