"""Policy losses, selected by ``actor_rollout_ref.actor.policy_loss.loss_mode``.

Every loss has the signature ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
config=None, rollout_is_weights=None) -> (pg_loss, metrics)``: the tensors are ``[batch, response_len]``,
``config`` is the actor config (``ActorConfig``; a DictConfig or dict is completed from its defaults, ``None``: all
defaults), ``rollout_is_weights`` (optional, ``[batch, response_len]``) multiplies the per-token loss
(importance weights correcting for a rollout engine whose probabilities differ from the trainer's). ``metrics``
holds detached scalars under verl's names (``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``, ...).

The probability ratio is always ``exp(clamp(log_prob - old_log_prob, -20, 20))`` so it cannot overflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from verl.algorithms.losses import agg_loss
from verl.algorithms.registry import register_policy_loss
from verl.base_config import omega_conf_to_dataclass
from verl.sections.actor import ActorConfig
from verl.utils import torch_functional as verl_F

LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class _ClipParams:
    low: float
    high: float
    dual_c: float


def actor_config(config: ActorConfig | Mapping[str, Any] | None) -> ActorConfig:
    """The actor section a loss receives, typed: ``config`` itself when it is an ``ActorConfig``; ``None``, a dict or
    a ``DictConfig`` (a user's partial section) completed from :class:`ActorConfig`'s defaults, their one home."""
    return omega_conf_to_dataclass(config, ActorConfig)


def _clip_params(config: ActorConfig | Mapping[str, Any] | None) -> _ClipParams:
    """``clip_ratio_low``/``clip_ratio_high`` (each ``None`` -> ``clip_ratio``) and ``clip_ratio_c`` of the actor."""
    cfg = actor_config(config)
    base = cfg.clip_ratio
    low = base if cfg.clip_ratio_low is None else float(cfg.clip_ratio_low)
    high = base if cfg.clip_ratio_high is None else float(cfg.clip_ratio_high)
    dual_c = cfg.clip_ratio_c
    if low < 0 or high < 0:
        raise ValueError(f"actor.clip_ratio_low / clip_ratio_high must be >= 0, got low={low}, high={high}")
    return _ClipParams(low=low, high=high, dual_c=dual_c)


def loss_scale_factor(config: ActorConfig | Mapping[str, Any] | None) -> float | None:
    """``actor.loss_scale_factor``: the constant divisor of ``seq-mean-token-sum-norm`` (``None``: response length)."""
    value = actor_config(config).loss_scale_factor
    return None if value is None else float(value)


def _log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    return torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)


def _check_is_weights_shape(rollout_is_weights: torch.Tensor, expected: torch.Size) -> None:
    """Refuse importance weights that do not line up with the per-token losses ``[batch, response_len]``."""
    if rollout_is_weights.shape != expected:
        raise ValueError(f"rollout_is_weights has shape {tuple(rollout_is_weights.shape)}, expected {tuple(expected)}")


def _apply_is_weights(losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    if rollout_is_weights is None:
        return losses
    _check_is_weights_shape(rollout_is_weights, losses.shape)
    return losses * rollout_is_weights.detach()


def _masked_fraction(flags: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Share of valid tokens where the boolean ``flags`` ``[batch, response_len]`` hold (a scalar)."""
    return verl_F.masked_mean(flags.float(), response_mask)


def _clip_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO surrogate losses per token, ``(-A r, -A clip(r, 1 - low, 1 + high))``, each ``[batch, response_len]``.

    Their elementwise maximum is the clipped objective (Schulman et al. 2017); where the second is larger, the clip
    is active and the token's gradient through ``r`` is cut.
    """
    return -advantages * ratio, -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)


def _pg_metrics(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, clipfrac: torch.Tensor, clipfrac_lower: torch.Tensor
) -> dict[str, Any]:
    """verl's metrics shared by every policy loss, detached scalars.

    ``actor/ppo_kl`` is the k1 estimate ``mean(-(log pi - log pi_old))`` over valid tokens of ``log_ratio``
    ``[batch, response_len]``; the two clip fractions are whatever the loss counts as clipped.
    """
    return {
        "actor/pg_clipfrac": clipfrac.detach(),
        "actor/ppo_kl": verl_F.masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": clipfrac_lower.detach(),
    }


def _ppo_clip(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    low: float,
    high: float,
    dual_c: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token dual-clip PPO loss and its clip fractions.

    ``l = max(-A r, -A clip(r, 1-low, 1+high))``; for ``A < 0`` additionally ``l = min(l, -A c)`` (dual clip,
    Ye et al. 2020, arXiv:1912.09729), so a huge ratio on a negative advantage cannot blow the loss up.
    Returns ``(losses [batch, response_len], clipfrac, clipfrac_lower)``.
    """
    if dual_c <= 1.0:
        raise ValueError(f"actor.clip_ratio_c must be > 1.0 (dual-clip bound), got {dual_c}")
    loss_unclipped, loss_clipped = _clip_surrogate(ratio, advantages, low, high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    clipfrac = _masked_fraction(torch.gt(loss_clipped, loss_unclipped), response_mask)
    loss_dual = -advantages * dual_c
    negative = advantages < 0
    clipfrac_lower = _masked_fraction(torch.gt(loss_ppo, loss_dual) & negative, response_mask)
    losses = torch.where(negative, torch.minimum(loss_ppo, loss_dual), loss_ppo)
    return losses, clipfrac, clipfrac_lower


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347) with decoupled clip and dual clip.

    ``r = pi/pi_old``; ``l = max(-A r, -A clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high))`` (a larger
    ``clip_ratio_high`` is DAPO's clip-higher, Yu et al. 2025), and for ``A < 0`` ``l = min(l, -A clip_ratio_c)``
    (dual-clip, Ye et al. 2020). ``pg_loss = agg(l)``.
    """
    params = _clip_params(config)
    log_ratio = _log_ratio(log_prob, old_log_prob)
    losses, clipfrac, clipfrac_lower = _ppo_clip(
        torch.exp(log_ratio), advantages, response_mask, params.low, params.high, params.dual_c
    )
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    return pg_loss, _pg_metrics(log_ratio, response_mask, clipfrac, clipfrac_lower)


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """verl's older entry point for the vanilla PPO loss, with explicit clip ranges.

    Same math as :func:`compute_policy_loss_vanilla`; a range left ``None`` takes :class:`ActorConfig`'s default
    (``cliprange`` -> ``clip_ratio``, low/high default to ``cliprange``, ``clip_ratio_c``).
    Returns ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``.
    """
    given = {
        "clip_ratio": cliprange,
        "clip_ratio_low": cliprange_low,
        "clip_ratio_high": cliprange_high,
        "clip_ratio_c": clip_ratio_c,
    }
    config = actor_config({key: value for key, value in given.items() if value is not None})
    pg_loss, metrics = compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=loss_agg_mode, config=config
    )
    return pg_loss, metrics["actor/pg_clipfrac"], metrics["actor/ppo_kl"], metrics["actor/pg_clipfrac_lower"]


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071), token form GSPO-token.

    Sequence ratio ``s_i = exp(mean_t (log pi - log pi_old))``; per token ``s_it = sg(s_i) * pi_t / sg(pi_t)``
    (same value as ``s_i``, gradient of the sequence mean log-prob); ``l = max(-A s_it, -A clip(s_it, 1-low,
    1+high))``. Aggregated with ``seq-mean-token-mean`` whatever ``loss_agg_mode`` says (the loss is defined per
    sequence, as in verl).
    """
    params = _clip_params(config)
    raw_log_ratio = log_prob - old_log_prob
    seq_len = response_mask.sum(dim=-1).clamp(min=1).to(log_prob.dtype)
    seq_log_ratio = verl_F.masked_sum(raw_log_ratio, response_mask, axis=-1) / seq_len
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP))
    loss_unclipped, loss_clipped = _clip_surrogate(ratio, advantages, params.low, params.high)
    losses = torch.maximum(loss_unclipped, loss_clipped)
    pg_loss = agg_loss(_apply_is_weights(losses, rollout_is_weights), response_mask, "seq-mean-token-mean")
    clipped = torch.gt(loss_clipped, loss_unclipped)
    return pg_loss, _pg_metrics(
        _log_ratio(log_prob, old_log_prob),
        response_mask,
        _masked_fraction(clipped, response_mask),
        _masked_fraction(clipped & (advantages < 0), response_mask),
    )


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Group Policy Gradient loss (Chu et al. 2025, arXiv:2504.02546): plain policy gradient ``l = -A log pi``.

    No ratio and no clipping; ``actor/ppo_kl`` is still reported to watch off-policyness.
    """
    losses = -advantages * log_prob
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    zero = torch.zeros((), device=log_prob.device)
    return pg_loss, _pg_metrics(_log_ratio(log_prob, old_log_prob), response_mask, zero, zero)


def _token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Centred product ``(A - mean A) * (log pi - mean log pi)`` per token, means over the masked batch."""
    lp = log_prob.detach()
    return (advantages - verl_F.masked_mean(advantages, response_mask)) * (lp - verl_F.masked_mean(lp, response_mask))


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617).

    Tokens whose covariance ``(A - mean A)(log pi - mean log pi)`` lies in ``(clip_cov_lb, clip_cov_ub)`` and that
    PPO did not already clip are candidates; ``max(1, int(clip_cov_ratio * n_tokens))`` of them, drawn at random
    (torch's global RNG), have their loss and gradient removed. The rest get the PPO clipped loss (no dual clip).
    Config: ``policy_loss.clip_cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub`` (defaults: :class:`PolicyLossConfig`).
    """
    params = _clip_params(config)
    policy_loss = actor_config(config).policy_loss
    ratio_frac = policy_loss.clip_cov_ratio
    cov_lb, cov_ub = policy_loss.clip_cov_lb, policy_loss.clip_cov_ub
    if ratio_frac <= 0:
        raise ValueError(f"actor.policy_loss.clip_cov_ratio must be > 0 for clip_cov, got {ratio_frac}")
    log_ratio = _log_ratio(log_prob, old_log_prob)
    loss_unclipped, loss_clipped = _clip_surrogate(torch.exp(log_ratio), advantages, params.low, params.high)
    valid = response_mask > 0
    clipped_by_ppo = torch.gt(loss_clipped, loss_unclipped) & valid

    cov = _token_covariance(advantages, log_prob, response_mask)
    candidates = valid & ~clipped_by_ppo & (cov > cov_lb) & (cov < cov_ub)
    cand_idx = torch.nonzero(candidates)
    n_pick = max(int(ratio_frac * float(response_mask.sum().item())), 1)
    keep = torch.ones_like(advantages)
    if cand_idx.shape[0] > 0:
        perm = torch.randperm(cand_idx.shape[0], device="cpu")[:n_pick].to(cand_idx.device)
        picked = cand_idx[perm]
        keep[picked[:, 0], picked[:, 1]] = 0.0

    losses = torch.maximum(loss_unclipped, loss_clipped) * keep
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    return pg_loss, _pg_metrics(
        log_ratio,
        response_mask,
        _masked_fraction(keep == 0, response_mask),
        _masked_fraction(clipped_by_ppo & (advantages < 0), response_mask),
    )


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617): unclipped ``-A r`` plus a KL penalty on high-covariance tokens.

    The ``max(1, int(kl_cov_ratio * n_tokens))`` valid tokens with the largest covariance
    ``(A - mean A)(log pi - mean log pi)`` get ``l = -A r + ppo_kl_coef * |log pi - log pi_old|``; all others
    ``l = -A r``. Config: ``policy_loss.kl_cov_ratio``, ``ppo_kl_coef`` (defaults: :class:`PolicyLossConfig`).
    """
    policy_loss = actor_config(config).policy_loss
    ratio_frac, kl_coef = policy_loss.kl_cov_ratio, policy_loss.ppo_kl_coef
    if ratio_frac <= 0:
        raise ValueError(f"actor.policy_loss.kl_cov_ratio must be > 0 for kl_cov, got {ratio_frac}")
    log_ratio = _log_ratio(log_prob, old_log_prob)
    losses = -advantages * torch.exp(log_ratio)

    valid = response_mask > 0
    flat_valid = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    penalised = torch.zeros_like(valid)
    if flat_valid.numel() > 0:
        cov = _token_covariance(advantages, log_prob, response_mask).reshape(-1)[flat_valid]
        k = min(max(1, int(flat_valid.numel() * ratio_frac)), flat_valid.numel())
        top = flat_valid[torch.topk(cov, k, largest=True).indices]
        penalised.view(-1)[top] = True
    losses = torch.where(penalised, losses + kl_coef * log_ratio.abs(), losses)
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    metrics = _pg_metrics(
        log_ratio, response_mask, _masked_fraction(penalised, response_mask), torch.zeros((), device=log_prob.device)
    )
    metrics["actor/ppo_kl_abs"] = verl_F.masked_mean(log_ratio.abs(), response_mask).detach()
    return pg_loss, metrics


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """CISPO (MiniMax-M1, arXiv:2506.13585): clipped importance-sampling weight, stop-gradient, times log-prob.

    ``l = -sg(clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high)) * A * log pi``: unlike PPO no token loses its
    gradient; only the size of its IS weight is bounded. Set a large ``clip_ratio_low`` to clip only from above,
    as the paper does.
    """
    params = _clip_params(config)
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio).detach()
    weight = torch.clamp(ratio, 1.0 - params.low, 1.0 + params.high)
    losses = -weight * advantages * log_prob
    pg_loss = agg_loss(
        _apply_is_weights(losses, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        loss_scale_factor=loss_scale_factor(config),
    )
    return pg_loss, _pg_metrics(
        log_ratio,
        response_mask,
        _masked_fraction(weight != ratio, response_mask),
        _masked_fraction(ratio < 1.0 - params.low, response_mask),
    )


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Geometric-Mean Policy Optimization (GMPO, Zhao et al. 2025, arXiv:2507.20673).

    Token log-ratios are clipped in log space to ``[-clip_ratio_low, clip_ratio_high]`` on the side that matters
    for the sign of ``A`` (``sgn(A) * min(sgn(A) d, sgn(A) clip(d))``); the sequence ratio is their geometric
    mean ``R_i = exp(mean_t d_t)`` and ``l_i = -A_i R_i`` with ``A_i`` the mean token advantage. The loss is the
    mean over sequences (``loss_agg_mode`` is not used: the objective is sequence-level). ``rollout_is_weights``
    enter as their per-sequence masked mean.
    """
    params = _clip_params(config)
    log_ratio = _log_ratio(log_prob, old_log_prob)
    sign = torch.sign(advantages)
    log_ratio_clamped = torch.clamp(log_ratio, -params.low, params.high)
    log_ratio_used = sign * torch.minimum(sign * log_ratio, sign * log_ratio_clamped)
    seq_len = response_mask.sum(dim=-1).to(log_prob.dtype) + 1e-8
    seq_ratio = torch.exp(verl_F.masked_sum(log_ratio_used, response_mask, axis=-1) / seq_len)
    seq_adv = verl_F.masked_sum(advantages, response_mask, axis=-1) / seq_len
    seq_losses = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        _check_is_weights_shape(rollout_is_weights, log_prob.shape)
        seq_losses = seq_losses * verl_F.masked_mean(rollout_is_weights.detach(), response_mask, axis=-1)
    pg_loss = seq_losses.mean()
    clipped = torch.ne(log_ratio, log_ratio_clamped)
    return pg_loss, _pg_metrics(
        log_ratio,
        response_mask,
        _masked_fraction(clipped & (advantages > 0), response_mask),
        _masked_fraction(clipped & (advantages < 0), response_mask),
    )
