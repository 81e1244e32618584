"""The recipe's advantage estimator and policy loss, registered by name as verl recipes do."""

from __future__ import annotations

from collections import defaultdict
from enum import Enum
from typing import Any

import numpy as np
import torch

from verl.trainer.ppo.core_algos import agg_loss, get_config_value, register_adv_est, register_policy_loss


class RecipeAdvantageEstimator(str, Enum):
    """The recipe's estimator names (an Enum member registers its value)."""

    MEDIAN_BASELINE = "recipe_median_baseline"


@register_adv_est(RecipeAdvantageEstimator.MEDIAN_BASELINE)
def compute_median_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outcome advantage against the median score of the prompt's group.

    With ``s_i = sum_t token_level_rewards[i, t]`` and ``G(i)`` the responses sharing ``index[i]`` (the prompt's
    uid): ``A_i = s_i - median_{j in G(i)} s_j`` (0 for a group of one), broadcast over the response tokens.

    Args:
        token_level_rewards: ``[bs, response_len]``.
        response_mask: ``[bs, response_len]``, 1 on response tokens.
        index: ``[bs]`` group ids.

    Returns:
        ``(advantages, returns)``, both ``[bs, response_len]`` and equal.
    """
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} entries for {token_level_rewards.shape[0]} responses")
    scores = token_level_rewards.sum(dim=-1)
    groups: dict[Any, list[int]] = defaultdict(list)
    for i, uid in enumerate(index):
        groups[uid].append(i)
    baseline = torch.zeros_like(scores)
    for rows in groups.values():
        if len(rows) > 1:
            baseline[rows] = scores[rows].median()
        else:
            baseline[rows] = scores[rows]
    advantages = (scores - baseline).unsqueeze(-1) * response_mask
    return advantages, advantages


@register_policy_loss("recipe_truncated_is")
def compute_policy_loss_truncated_is(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """REINFORCE with truncated importance weights.

    ``w = min(exp(log_prob - old_log_prob), c)`` (detached; ``c`` is ``policy_loss.truncation`` of the actor config,
    set with ``+actor_rollout_ref.actor.policy_loss.truncation=...``, default 2.0) and the
    per-token loss ``-w * A * log_prob``, aggregated by ``loss_agg_mode``. All tensors ``[bs, response_len]``.

    Returns:
        ``(pg_loss, metrics)`` with ``actor/pg_loss`` and ``actor/is_truncated_frac``.
    """
    cap = float(get_config_value(config, "policy_loss.truncation", 2.0))
    ratio = torch.exp(log_prob - old_log_prob).detach()
    weights = ratio.clamp(max=cap)
    if rollout_is_weights is not None:
        weights = weights * rollout_is_weights
    loss_mat = -weights * advantages * log_prob
    pg_loss = agg_loss(loss_mat=loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
    mask = response_mask.bool()
    truncated = (ratio > cap)[mask].float().mean().item() if mask.any() else 0.0
    return pg_loss, {"actor/pg_loss": pg_loss.detach().item(), "actor/is_truncated_frac": truncated}
