"""The bypass-mode policy loss of upstream verl v0.9 (``loss_mode=bypass_mode``) and its REINFORCE branch.

In bypass mode (``algorithm.rollout_correction.bypass_mode=true``) the rollout's log-probs stand in for the old
policy's, so there are two policies, ``pi_rollout`` and the one being trained ``pi_theta``, and the correction for
their mismatch is computed inside the loss, per micro-batch, from the *current* log-probs. Upstream source:
``verl/trainer/ppo/core_algos.py`` (``compute_policy_loss_bypass_mode``, ``compute_policy_loss_reinforce``) and
``verl/trainer/ppo/rollout_corr_helper.py`` (``apply_bypass_mode``).
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algorithms.config import RolloutCorrectionConfig
from verl.algorithms.losses import agg_loss
from verl.algorithms.policy_loss import _log_ratio, _pg_metrics, compute_policy_loss_vanilla, loss_scale_factor
from verl.algorithms.registry import get_config_value, register_policy_loss
from verl.algorithms.rollout_correction import compute_rollout_correction
from verl.base_config import omega_conf_to_dataclass

BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")


def compute_policy_loss_reinforce(
    rollout_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """REINFORCE with optional importance weights: ``l = -A * sg(w) * log pi`` (``w = 1`` without weights).

    ``w`` ``[batch, response_len]`` are the (truncated / IcePop) weights ``pi_theta / pi_rollout`` of the rollout
    correction; no ratio, no clip. ``actor/ppo_kl`` is ``mean(log pi_rollout - log pi)`` over valid tokens.
    """
    losses = -advantages * log_prob
    if rollout_is_weights is not None:
        losses = losses * rollout_is_weights.detach()
    pg_loss = agg_loss(losses, response_mask, loss_agg_mode, loss_scale_factor=loss_scale_factor(config))
    zero = torch.zeros((), device=log_prob.device)
    return pg_loss, _pg_metrics(_log_ratio(log_prob, rollout_log_prob), response_mask, zero, zero)


@register_policy_loss("bypass_mode")
def compute_policy_loss_bypass_mode(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    rollout_correction: Any = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Bypass-mode loss: ``old_log_prob`` *is* ``log pi_rollout``; rollout correction against the current policy.

    With ``rollout_correction`` (``algorithm.rollout_correction``; ``None``: ``config.policy_loss.rollout_correction``,
    where upstream puts it): importance weights ``w = pi_theta / pi_rollout`` (``rollout_is``, detached, truncated or
    IcePop by ``rollout_is_threshold``, optionally normalised to mean 1 over the micro-batch) and rejection
    (``rollout_rs``) are computed from ``log_prob``; rejected tokens leave ``response_mask``. Then by ``loss_type``:

    * ``ppo_clip``: the PPO clipped loss of :func:`compute_policy_loss_vanilla` with ratio ``pi_theta / pi_rollout``;
      the weights are not applied (the ratio already is the importance weight; only logged);
    * ``reinforce``: :func:`compute_policy_loss_reinforce`, ``l = -A * w * log pi``.

    ``rollout_is_weights`` from the batch are ignored (there are none in bypass mode). Metrics: the loss's plus the
    ``rollout_corr/*`` ones of the micro-batch (logged under that prefix, as upstream).
    """
    rc = rollout_correction
    if rc is None:
        rc = get_config_value(config, "policy_loss.rollout_correction", None)
    if rc is None:
        raise ValueError(
            "loss_mode=bypass_mode needs the rollout-correction settings (algorithm.rollout_correction with "
            "bypass_mode=true); select it with algorithm.rollout_correction.bypass_mode=true instead"
        )
    rc = omega_conf_to_dataclass(rc, RolloutCorrectionConfig)
    loss_type = rc.loss_type
    if loss_type not in BYPASS_LOSS_TYPES:
        raise ValueError(f"algorithm.rollout_correction.loss_type={loss_type!r}; choose one of {BYPASS_LOSS_TYPES}")
    with torch.no_grad():
        correction = compute_rollout_correction(
            log_prob.detach(),
            old_log_prob,
            response_mask,
            rollout_is=rc.rollout_is,
            rollout_is_threshold=rc.rollout_is_threshold,
            rollout_is_batch_normalize=bool(rc.rollout_is_batch_normalize),
            rollout_rs=rc.rollout_rs,
            rollout_rs_threshold=rc.rollout_rs_threshold,
        )
    mask = correction.response_mask.to(log_prob.dtype)
    if loss_type == "reinforce":
        pg_loss, metrics = compute_policy_loss_reinforce(
            old_log_prob, log_prob, advantages, mask, loss_agg_mode, config, correction.rollout_is_weights
        )
    else:
        pg_loss, metrics = compute_policy_loss_vanilla(
            old_log_prob, log_prob, advantages, mask, loss_agg_mode, config, rollout_is_weights=None
        )
    metrics.update(correction.metrics)
    return pg_loss, metrics
