"""SPPO, Self-Play Preference Optimization (Wu et al. 2024, arXiv:2405.00675), as verl-recipe's ``sppo`` trains it:
``algorithm.adv_estimator=sppo`` with ``actor_rollout_ref.actor.policy_loss.loss_mode=sppo``.

SPPO moves the policy toward ``pi_{t+1}(y | x) ~ pi_t(y | x) exp(eta P(y > pi_t | x))`` by regressing each response's
log-ratio onto its scaled preference. With a reward model or function standing in for the preference, the recipe
centres the sequence reward on the batch's soft mean and fits

    A_i = R_i - SoftMean_beta(R),   SoftMean_beta(R) = 1/beta log(1/N sum_j exp(beta R_j))      (over the batch)
    l_i = (sum_t (log pi_theta - log pi_t)(y_i) - eta A_i)^2

with ``beta = algorithm.sppo_eta`` (0: the arithmetic mean), ``eta = actor.sppo_eta`` and ``pi_t`` the policy that
sampled (``old_log_probs``). The loss is the mean of ``l_i`` over the responses (rows with an empty response
excluded); micro-batches are weighed by their rows, as the recipe divides each micro-batch's mean by the
accumulation steps. No ratio, no clip: rollout importance weights are refused at config time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from verl.algorithms.config import AlgorithmConfig
from verl.algorithms.policy_loss import actor_config
from verl.algorithms.registry import register_adv_est, register_policy_loss, resolve_param
from verl.sections.actor import ActorConfig


def soft_mean(x: torch.Tensor, beta: float) -> torch.Tensor:
    """``1/beta log(mean(exp(beta x)))`` of a 1-D tensor (log-sum-exp, stable), the arithmetic mean at ``beta = 0``;
    between the mean and the maximum for ``beta > 0``."""
    if beta == 0.0:
        return x.mean()
    n = torch.tensor(float(x.numel()), dtype=x.dtype, device=x.device)
    return (torch.logsumexp(beta * x, dim=0) - n.log()) / beta


@register_adv_est("sppo")
def compute_sppo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    sppo_eta: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SPPO's centred reward (module docstring): ``A_i = R_i - SoftMean_beta(R)`` over the whole batch, ``R_i`` the
    summed token rewards, ``beta = sppo_eta`` (default ``algorithm.sppo_eta``). ``[batch, response_len]`` in and
    out, the advantage on every response token; returns ``(advantages, advantages)``."""
    beta = float(resolve_param("sppo_eta", sppo_eta, config))
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        advantages = (scores - soft_mean(scores, beta)).unsqueeze(-1) * response_mask
    return advantages, advantages


@register_policy_loss("sppo")
def compute_policy_loss_sppo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """SPPO's squared regression (module docstring), the mean over the responses of a micro-batch.

    Tensors ``[bs, response_len]``; ``A_i`` is the mean of the row's advantages over its tokens. ``loss_agg_mode``
    is not used (one term per response). Metrics (the recipe's): ``actor/log_ratio_mean``, the mean summed
    log-ratio, and ``actor/preference_mean``, the mean ``eta A_i``.
    """
    del loss_agg_mode  # one term per response
    if rollout_is_weights is not None:
        raise ValueError(
            "loss_mode=sppo has no probability ratio to correct: unset algorithm.rollout_correction.rollout_is"
        )
    eta = float(actor_config(config).sppo_eta)
    mask = response_mask.to(log_prob.dtype)
    tokens = mask.sum(-1)
    log_ratio = ((log_prob - old_log_prob) * mask).sum(-1)
    preference = eta * (advantages * mask).sum(-1) / tokens.clamp_min(1.0)
    answered = (tokens > 0).to(log_prob.dtype)
    per_response = (log_ratio - preference).pow(2)
    pg_loss = (per_response * answered).sum() / answered.sum().clamp_min(1.0)
    metrics = {"actor/log_ratio_mean": log_ratio.detach().mean(), "actor/preference_mean": preference.mean()}
    return pg_loss, metrics


compute_policy_loss_sppo.per_response = True  # type: ignore[attr-defined]
