"""Optimal token baselines (``algorithm.adv_estimator=optimal_token_baseline`` / ``tir_optimal_token_baseline``).

Upstream source: ``verl/trainer/ppo/core_algos.py`` (``compute_optimal_token_baseline_advantage``,
``compute_multi_turn_optimal_token_baseline_advantage``) and ``examples/otb_trainer``. Both need the per-token
``sum_pi_squared = sum_v pi(v)^2`` over the vocabulary, which the actor returns with its old-log-prob pass when
``actor_rollout_ref.actor.calculate_sum_pi_squared=true``.

Theory: the variance-minimising baseline of a policy-gradient term weighs each sampled return by the squared norm of
the score function. For a softmax policy ``||grad_logits log pi(y_j)||^2 = 1 - 2 pi(y_j) + sum_v pi(v)^2``; summing
it over the prefix gives the path-variance proxy ``W_t = sum_{j <= t} (1 - 2 pi_j + sum_v pi_j(v)^2)``, and the
per-position baseline over a prompt's group of responses is ``B_t = sum_i G_i,t W_i,t / sum_i W_i,t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from verl.algorithms.advantage import _check_index, _group_rows
from verl.algorithms.registry import AdvantageEstimator, register_adv_est


def _path_variance(
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is_weights: torch.Tensor | None,
) -> torch.Tensor:
    """``W_t = cumsum_t m_t * rho_t^2 * (1 - 2 exp(old_log_prob_t) + sum_pi_squared_t)`` ``[B, T]`` (``rho = 1``
    without rollout importance weights: with them ``W`` is scaled by ``rho^2``, which minimises the MSE under
    truncated IS)."""
    w = 1.0 - 2.0 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        w = w * rollout_is_weights.square()
    return (w * response_mask).cumsum(dim=-1)


def _returns_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


def _zero_unique_tail(baselines: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor) -> None:
    """Where one response of a group is strictly the longest, its baseline beyond the second-longest length is 0 (no
    other response of the group reaches those positions, so the "baseline" would be its own return)."""
    group_lengths = lengths[rows]
    ordered = torch.sort(group_lengths).values
    longest, second = int(ordered[-1].item()), int(ordered[-2].item())
    is_longest = (group_lengths == longest).nonzero(as_tuple=True)[0]
    if is_longest.numel() == 1 and longest > second:
        baselines[int(rows[is_longest[0]].item()), second:] = 0.0


def _check_inputs(old_log_probs: Any, sum_pi_squared: Any, estimator: str) -> None:
    if old_log_probs is None or sum_pi_squared is None:
        raise ValueError(
            f"{estimator} needs old_log_probs and sum_pi_squared [batch, response_len]: set "
            "actor_rollout_ref.actor.calculate_sum_pi_squared=true"
        )


@register_adv_est(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE)
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline (OTB): one baseline per position ``t``, shared by a prompt's group.

    ``G_t`` = undiscounted return-to-go, ``W_t`` the cumulative path-variance proxy (module docstring), and per group
    ``B_t = sum_i G_i,t W_i,t m_i,t / (sum_i W_i,t m_i,t + eps)``; ``A_t = (G_t - B_t) m_t``. A group of one has
    ``B = 0``; with ``handle_zero_tail`` a strictly longest response gets ``B = 0`` past the second-longest length.

    Shapes: every tensor ``[batch, response_len]``, ``index`` ``[batch]``. Returns ``(advantages, returns)``.
    """
    _check_inputs(old_log_probs, sum_pi_squared, "optimal_token_baseline")
    index = _check_index(index, token_level_rewards.shape[0], "optimal_token_baseline")
    with torch.no_grad():
        mask = response_mask.to(token_level_rewards.dtype)
        returns = _returns_to_go(token_level_rewards, mask)
        w_cum = _path_variance(old_log_probs, sum_pi_squared, mask, rollout_is_weights)
        baselines = torch.zeros_like(returns)
        lengths = mask.sum(dim=-1)
        for rows in _group_rows(index, returns.device).values():
            if rows.numel() == 1:
                continue
            num = (returns[rows] * w_cum[rows] * mask[rows]).sum(dim=0)
            den = (w_cum[rows] * mask[rows]).sum(dim=0) + epsilon
            baselines[rows] = (num / den).unsqueeze(0).expand(rows.numel(), -1)
            if handle_zero_tail:
                _zero_unique_tail(baselines, lengths, rows)
        advantages = (returns - baselines) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB for tool-integrated / multi-turn responses: positions are counted over the *generated* tokens only.

    Same ``G``, ``W`` and baseline as :func:`compute_optimal_token_baseline_advantage`, but each response is first
    compacted to its valid tokens (tool and observation tokens, ``response_mask`` 0, are dropped), so the ``k``-th
    generated token of every response in the group shares a baseline whatever tool output came between. The
    advantages are scattered back to the original positions. Rows with no valid token get 0.
    """
    _check_inputs(old_log_probs, sum_pi_squared, "tir_optimal_token_baseline")
    index = _check_index(index, token_level_rewards.shape[0], "tir_optimal_token_baseline")
    with torch.no_grad():
        mask = response_mask.to(token_level_rewards.dtype)
        returns = _returns_to_go(token_level_rewards, mask)
        w_cum = _path_variance(old_log_probs, sum_pi_squared, mask, rollout_is_weights)
        lengths = mask.sum(dim=-1).long()
        width = int(lengths.max().item()) if lengths.numel() else 0
        packed_w = w_cum.new_zeros((mask.shape[0], width))
        packed_g = torch.zeros_like(packed_w)
        valid = mask.bool()
        for i in range(mask.shape[0]):
            n = int(lengths[i].item())
            packed_w[i, :n] = w_cum[i, valid[i]]
            packed_g[i, :n] = returns[i, valid[i]]
        non_empty = [gid if int(lengths[i].item()) > 0 else None for i, gid in enumerate(index)]
        baselines = torch.zeros_like(packed_g)
        for gid, rows in _group_rows(non_empty, returns.device).items():
            if gid is None or rows.numel() == 1:
                continue
            b = (packed_g[rows] * packed_w[rows]).sum(dim=0) / (packed_w[rows].sum(dim=0) + epsilon)
            baselines[rows] = b.to(baselines.dtype)
            if handle_zero_tail:
                _zero_unique_tail(baselines, lengths.to(baselines.dtype), rows)
        packed_adv = packed_g - baselines
        advantages = torch.zeros_like(returns)
        for i in range(mask.shape[0]):
            n = int(lengths[i].item())
            if n:
                advantages[i, valid[i]] = packed_adv[i, :n]
        advantages = advantages * mask
    return advantages, returns
