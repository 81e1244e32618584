"""Policy losses of upstream verl v0.9 that replace PPO's ratio clip by another trust region or penalty.

Registered under upstream's names (``actor_rollout_ref.actor.policy_loss.loss_mode=...``): ``dppo_tv``,
``dppo_kl``, ``dro`` and ``sapo``. Same signature as every policy loss (see :mod:`verl.algorithms.policy_loss`):
``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights) -> (pg_loss,
metrics)`` with ``[batch, response_len]`` tensors; ``config`` is the actor config (``None``: ``ActorConfig``'s
defaults). Upstream source: ``verl/trainer/ppo/core_algos.py`` (``compute_policy_loss_dppo_tv``,
``compute_policy_loss_dppo_kl``, ``compute_policy_loss_dro``, ``compute_policy_loss_sapo``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from verl.algorithms.losses import agg_loss
from verl.algorithms.policy_loss import (
    _apply_is_weights,
    _clip_params,
    _log_ratio,
    _masked_fraction,
    _pg_metrics,
    actor_config,
    loss_scale_factor,
)
from verl.algorithms.registry import register_policy_loss
from verl.sections.actor import ActorConfig


def _dppo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: ActorConfig | Mapping[str, Any] | None,
    rollout_is_weights: torch.Tensor | None,
    inside: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Shared DPPO body: ``l = -A * sg(min(r, clip_ratio_c)) * log pi * sg(inside)``.

    ``inside`` ``[batch, response_len]`` (bool) says which tokens lie inside the divergence trust region; the
    truncated ratio ``min(r, clip_ratio_c)`` (truncated importance sampling instead of the dual clip) has no gradient,
    so a kept token's gradient is ``-A * min(r, c) * grad log pi``. Metrics: ``actor/pg_clipfrac`` = share of tokens
    outside the region, ``actor/pg_clipfrac_lower`` = share of kept tokens whose ratio was truncated.
    """
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    c = float(actor_config(config).clip_ratio_c)
    keep = inside.detach().to(log_prob.dtype)
    losses = -advantages * torch.clamp(ratio, max=c).detach() * log_prob * keep
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    return pg_loss, _pg_metrics(
        log_ratio,
        response_mask,
        _masked_fraction(~inside, response_mask),
        _masked_fraction((ratio > c) & inside, response_mask),
    )


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """DPPO-Binary-TV (Divergence PPO, arXiv:2602.04879; upstream ``verl/trainer/ppo/core_algos.py``).

    The trust region is on the total-variation distance between the old and new Bernoulli "this token / any other
    token", i.e. on the probability change ``d = pi - pi_old`` (probabilities, not ratios): a token with ``A > 0`` is
    kept while ``d <= clip_ratio_high``, one with ``A <= 0`` while ``d >= -clip_ratio_low``. Kept tokens get
    ``l = -A * sg(min(r, clip_ratio_c)) * log pi``; the others no gradient. ``clip_ratio``/``clip_ratio_low``/
    ``clip_ratio_high`` are TV thresholds here (upstream's example uses 0.15), ``clip_ratio_c`` the truncation of
    the importance ratio (upstream's example: 10000, i.e. none).
    """
    params = _clip_params(config)
    delta = torch.exp(log_prob) - torch.exp(old_log_prob)
    inside = torch.where(advantages > 0, delta <= params.high, delta >= -params.low)
    return _dppo_loss(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights, inside
    )


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """DPPO-Binary-KL (arXiv:2602.04879; upstream ``verl/trainer/ppo/core_algos.py``).

    The trust region is the KL divergence between the old and new binary distributions of the sampled token,
    ``D = p_old log(p_old / p) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8))``. A token with ``A > 0`` is
    kept while ``D <= clip_ratio_high`` or ``p <= p_old`` (the update has not pushed it up yet); one with ``A <= 0``
    while ``D <= clip_ratio_low`` or ``p >= p_old``. Kept tokens get ``l = -A * sg(min(r, clip_ratio_c)) * log pi``.
    """
    params = _clip_params(config)
    p, p_old = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = p_old * (old_log_prob - log_prob) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
    inside = torch.where(
        advantages > 0, (binary_kl <= params.high) | (p <= p_old), (binary_kl <= params.low) | (p >= p_old)
    )
    return _dppo_loss(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights, inside
    )


@register_policy_loss("dro")
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Direct Reward Optimization with a quadratic log-ratio penalty (Richemond et al. 2024, "Offline
    Regularised RL for LLM Alignment", arXiv:2405.19107; upstream ``compute_policy_loss_dro``).

    ``l = -(A * log pi - beta/2 * (log pi - log pi_old)^2)`` with ``beta = actor.policy_loss.dro_beta`` (required,
    > 0): a policy gradient pulled back towards the behaviour policy by a squared log-ratio instead of a clip.
    """
    beta = actor_config(config).policy_loss.dro_beta
    if beta is None or not float(beta) > 0:
        raise ValueError(
            f"actor_rollout_ref.actor.policy_loss.dro_beta={beta}: loss_mode=dro needs a positive beta (e.g. 0.1)"
        )
    log_ratio = log_prob - old_log_prob
    losses = -(advantages * log_prob - 0.5 * float(beta) * log_ratio.square())
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    zero = torch.zeros((), device=log_prob.device)
    return pg_loss, _pg_metrics(_log_ratio(log_prob, old_log_prob), response_mask, zero, zero)


def sapo_temperatures(actor: Any) -> tuple[float, float]:
    """``(tau_pos, tau_neg)`` of SAPO's gate for an actor section (typed or a ``DictConfig``):
    ``policy_loss.tau_pos`` / ``tau_neg`` where set, else the actor's ``tau_pos`` / ``tau_neg``."""
    loss = actor.policy_loss
    tau_pos = actor.tau_pos if loss.tau_pos is None else loss.tau_pos
    tau_neg = actor.tau_neg if loss.tau_neg is None else loss.tau_neg
    return float(tau_pos), float(tau_neg)


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Soft Adaptive Policy Optimization (SAPO, arXiv:2511.20347; upstream ``compute_policy_loss_sapo``).

    A smooth gate replaces the hard clip: ``g(r) = (4 / tau) * sigmoid(tau * (r - 1))`` (slope 1 at ``r = 1``,
    flattening away from it), ``l = -g(r) * A`` with ``tau = actor.tau_pos`` where ``A > 0`` and ``actor.tau_neg``
    otherwise (``actor.policy_loss.tau_pos``/``tau_neg``, added with ``+`` as upstream's SAPO scripts do, take
    precedence). As upstream, aggregated with ``seq-mean-token-mean`` whatever ``loss_agg_mode`` says.
    """
    # upstream's SAPO scripts add +policy_loss.tau_pos/tau_neg (which upstream's loss does not read); here they
    # take precedence over actor.tau_pos/tau_neg, so what the script writes is what runs
    cfg = actor_config(config)
    tau_pos, tau_neg = sapo_temperatures(cfg)
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"actor.tau_pos / actor.tau_neg must be > 0 for loss_mode=sapo, got {tau_pos}, {tau_neg}")
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gates = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    losses = -gates * advantages
    pg_loss = agg_loss(_apply_is_weights(losses, rollout_is_weights), response_mask, "seq-mean-token-mean")
    zero = torch.zeros((), device=log_prob.device)
    return pg_loss, _pg_metrics(log_ratio, response_mask, zero, zero)
