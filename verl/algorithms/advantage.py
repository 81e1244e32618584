"""Advantage estimators: ``(token_level_rewards, response_mask, ...) -> (advantages, returns)``.

Calling convention (what the driver does for every estimator, so any registered one can be swapped in)::

    fn = get_adv_estimator_fn(config.algorithm.adv_estimator)
    advantages, returns = fn(
        token_level_rewards=batch["token_level_rewards"],   # [batch, response_len]
        response_mask=batch["response_mask"],               # [batch, response_len]
        index=non_tensor_batch["uid"],                      # numpy array [batch] of group ids
        values=batch.get("values"),                         # [batch, response_len] or None (GAE only)
        reward_baselines=batch.get("reward_baselines"),     # [batch] or None (ReMax only)
        gamma=algorithm.gamma, lam=algorithm.lam,
        norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
        config=algorithm,                                   # the `algorithm` config section
    )

Every estimator takes these as keywords and ignores the ones it does not use (``**kwargs``). A parameter given
as ``None`` falls back to the same-named key of ``config`` and then to the documented default. All outputs are
``[batch, response_len]``, zero where ``response_mask`` is 0, and computed without gradient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from verl.algorithms.config import AlgorithmConfig
from verl.algorithms.registry import AdvantageEstimator, register_adv_est, resolve_param
from verl.utils import torch_functional as verl_F


def _check_index(index: Any, batch_size: int, estimator: str) -> Sequence[Any]:
    if index is None:
        raise ValueError(f"{estimator}: `index` (group ids, e.g. non_tensor_batch['uid']) is required")
    if len(index) != batch_size:
        raise ValueError(f"{estimator}: index has {len(index)} entries but token_level_rewards has {batch_size} rows")
    return index


def _group_rows(index: Sequence[Any], device: torch.device) -> dict[Any, torch.Tensor]:
    """Row numbers of each group as an ``int64`` tensor ``[group_size]`` on ``device``, groups in first-seen order."""
    groups: dict[Any, list[int]] = {}
    for row, gid in enumerate(index):
        groups.setdefault(gid.item() if isinstance(gid, np.generic | torch.Tensor) else gid, []).append(row)
    return {gid: torch.tensor(rows, device=device) for gid, rows in groups.items()}


def _center_by_group_mean(scores: torch.Tensor, groups: dict[Any, torch.Tensor]) -> torch.Tensor:
    """``s_i - mean_g`` for each row of a group of 2 or more; a group of one keeps ``s_i`` (baseline 0). ``[batch]``."""
    centred = scores.clone()
    for rows in groups.values():
        if rows.numel() > 1:
            centred[rows] = scores[rows] - scores[rows].mean()
    return centred


def _per_token(adv: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Broadcast a per-sequence advantage ``[batch]`` over the response tokens: ``[batch, response_len]``."""
    return adv.unsqueeze(-1) * response_mask


def group_ids_to_tensor(index: Sequence[Any], device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids ``[batch]`` (str uids, ints...) to contiguous ``int64`` ids ``[batch]``.

    Returns ``(ids, num_groups)``. Uses numpy's sort-based unique, falling back to a dict for unorderable ids.
    """
    arr = np.asarray(index.cpu() if isinstance(index, torch.Tensor) else index)
    try:
        _, inverse = np.unique(arr, return_inverse=True)
        inverse = inverse.reshape(-1)
    except TypeError:
        lookup: dict[Any, int] = {}
        inverse = np.array([lookup.setdefault(gid, len(lookup)) for gid in arr.reshape(-1).tolist()], dtype=np.int64)
    ids = torch.as_tensor(inverse, dtype=torch.long, device=device)
    return ids, int(ids.max().item()) + 1 if ids.numel() else 0


def _group_stats(scores: torch.Tensor, ids: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, ...]:
    """Per-group count, sum, mean and unbiased std of ``scores`` ``[batch]`` (each ``[num_groups]``)."""
    counts = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(
        0, ids, torch.ones_like(scores)
    )
    sums = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, ids, scores)
    means = sums / counts
    sq_dev = torch.zeros_like(sums).index_add_(0, ids, (scores - means[ids]) ** 2)
    stds = torch.sqrt(sq_dev / (counts - 1).clamp(min=1))
    return counts, sums, means, stds


@register_adv_est(AdvantageEstimator.GAE)
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float | torch.Tensor | None = None,
    lam: float | torch.Tensor | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438).

    ``delta_t = r_t + gamma * V_{t+1} - V_t``, ``A_t = delta_t + gamma * lam * A_{t+1}``, where ``t+1`` is the next
    position with mask 1: masked-out positions (e.g. tool/observation tokens of a multi-turn rollout) are
    skipped, the next value and running advantage are carried over them. ``returns = A + V`` (before
    whitening); the advantages are then whitened over the masked batch.

    Args: ``token_level_rewards``, ``values``, ``response_mask``: ``[batch, response_len]``; ``gamma``, ``lam``
    (``None``: ``config.gamma`` / ``config.lam``, defaults of :class:`AlgorithmConfig`).
    Returns: ``(advantages, returns)``, both ``[batch, response_len]``.
    """
    if values is None:
        raise ValueError("gae: `values` [batch, response_len] from the critic is required (is the critic enabled?)")
    gamma = resolve_param("gamma", gamma, config)
    lam = resolve_param("lam", lam, config)
    with torch.no_grad():
        mask = response_mask.to(values.dtype)
        next_value = torch.zeros_like(values[:, 0])
        running_adv = torch.zeros_like(values[:, 0])
        advantages = torch.zeros_like(values)
        for t in reversed(range(token_level_rewards.shape[-1])):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            candidate = delta + gamma * lam * running_adv
            m = mask[:, t]
            running_adv = m * candidate + (1 - m) * running_adv
            next_value = m * values[:, t] + (1 - m) * next_value
            advantages[:, t] = running_adv
        returns = (advantages + values) * mask
        advantages = verl_F.masked_whiten(advantages, response_mask) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300).

    Score ``s_i = sum_t r_{i,t}``; per group of responses to one prompt, ``A_i = (s_i - mean_g) / (std_g + eps)``
    with the unbiased std, or ``A_i = s_i - mean_g`` with ``norm_adv_by_std_in_grpo=False`` (Dr. GRPO, Liu et al.
    2025, arXiv:2503.20783). A group of one uses mean 0 and std 1. ``A_i`` is broadcast over the response tokens.

    Args: ``token_level_rewards``, ``response_mask``: ``[batch, response_len]``; ``index``: ``[batch]`` group ids.
    Returns: ``(advantages, advantages)``, ``[batch, response_len]``.
    """
    norm_by_std = resolve_param("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo, config)
    index = _check_index(index, token_level_rewards.shape[0], "grpo")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = torch.zeros_like(scores)
        for rows in _group_rows(index, scores.device).values():
            group = scores[rows]
            if rows.numel() == 1:
                mean, std = torch.zeros_like(group[0]), torch.ones_like(group[0])
            else:
                mean, std = group.mean(), group.std(unbiased=True)
            adv[rows] = (group - mean) / (std + epsilon) if norm_by_std else group - mean
        advantages = _per_token(adv, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage with scatter/gather group statistics (no Python loop over groups).

    Same result as :func:`compute_grpo_outcome_advantage`. Shapes: ``[batch, response_len]`` in and out.
    """
    norm_by_std = resolve_param("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo, config)
    index = _check_index(index, token_level_rewards.shape[0], "grpo_vectorized")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        ids, num_groups = group_ids_to_tensor(index, scores.device)
        counts, _, means, stds = _group_stats(scores, ids, num_groups)
        singleton = counts[ids] == 1
        mean = torch.where(singleton, torch.zeros_like(scores), means[ids])
        std = torch.where(singleton, torch.ones_like(scores), stds[ids])
        adv = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean
        advantages = _per_token(adv, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO advantage (Thrampoulidis et al. 2025, "Pass@k training"; verl's ``grpo_passk``).

    Only the best response of each group is credited: ``A_best = s_(1) - s_(2)`` (best minus second-best score),
    divided by ``std_g + eps`` (unbiased) when ``norm_adv_by_std_in_grpo``; every other response gets 0.
    Groups must hold at least 2 responses. Shapes: ``[batch, response_len]`` in and out.
    """
    norm_by_std = resolve_param("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo, config)
    index = _check_index(index, token_level_rewards.shape[0], "grpo_passk")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = torch.zeros_like(scores)
        for gid, rows in _group_rows(index, scores.device).items():
            if rows.numel() < 2:
                raise ValueError(f"grpo_passk: group {gid!r} has {rows.numel()} response; pass@k needs rollout.n >= 2")
            group = scores[rows]
            top2, top2_pos = torch.topk(group, 2)
            gap = top2[0] - top2[1]
            if norm_by_std:
                gap = gap / (group.std(unbiased=True) + epsilon)
            adv[rows[top2_pos[0]]] = gap
        advantages = _per_token(adv, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024, arXiv:2402.14740; Kool et al. 2019).

    ``A_i = s_i - (sum_{j in g, j != i} s_j) / (n_g - 1)``; a group of one keeps ``A_i = s_i``.
    Shapes: ``[batch, response_len]`` in and out; returns equal advantages.
    """
    index = _check_index(index, token_level_rewards.shape[0], "rloo")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        adv = scores.clone()
        for rows in _group_rows(index, scores.device).values():
            n = rows.numel()
            if n > 1:
                group = scores[rows]
                adv[rows] = group - (group.sum() - group) / (n - 1)
        advantages = _per_token(adv, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO with scatter/gather group sums; same result as :func:`compute_rloo_outcome_advantage`."""
    index = _check_index(index, token_level_rewards.shape[0], "rloo_vectorized")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        ids, num_groups = group_ids_to_tensor(index, scores.device)
        counts, sums, _, _ = _group_stats(scores, ids, num_groups)
        n = counts[ids]
        baseline = (sums[ids] - scores) / (n - 1).clamp(min=1)
        adv = torch.where(n > 1, scores - baseline, scores)
        advantages = _per_token(adv, response_mask)
    return advantages, advantages


def _discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Returns-to-go ``G_t = r_t + gamma * G_{t'}`` over masked-in positions (``t'`` the next one with mask 1).

    Masked-out positions add no reward and no discount step; their return is 0. ``[batch, len]`` in and out.
    """
    running = torch.zeros_like(rewards[:, 0])
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[-1])):
        m = mask[:, t]
        running = m * (rewards[:, t] + gamma * running) + (1 - m) * running
        returns[:, t] = running * m
    return returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float | torch.Tensor | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): discounted returns-to-go, whitened over the masked batch.

    ``G_t = sum_{k >= t} gamma^(k-t) r_k`` (masked-in positions only), ``A = whiten(G)``. ``gamma`` defaults to
    ``config.gamma`` (default: :class:`AlgorithmConfig`). Returns ``(advantages, returns)``, ``[batch, response_len]``.
    """
    gamma = resolve_param("gamma", gamma, config)
    with torch.no_grad():
        mask = response_mask.to(token_level_rewards.dtype)
        returns = _discounted_returns(token_level_rewards, mask, gamma)
        advantages = verl_F.masked_whiten(returns, response_mask) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline (Hu 2025): ``s_i - mean_g`` broadcast over tokens, then batch whitening.

    A group of one uses baseline 0. Shapes: ``[batch, response_len]`` in and out; returns equal advantages.
    """
    index = _check_index(index, token_level_rewards.shape[0], "reinforce_plus_plus_baseline")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        centred = _center_by_group_mean(scores, _group_rows(index, scores.device))
        mask = response_mask.to(scores.dtype)
        advantages = _per_token(centred, mask)
        advantages = verl_F.masked_whiten(advantages, response_mask) * mask
    return advantages, advantages


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv:2310.10505): undiscounted returns-to-go minus a greedy-rollout baseline.

    ``G_t = sum_{k >= t} r_k m_k``, ``A_t = G_t - b`` with ``reward_baselines`` ``b``: ``[batch]`` (the reward of
    the greedy response to the same prompt). Returns ``(advantages, returns)``, ``[batch, response_len]``.
    """
    if reward_baselines is None:
        raise ValueError("remax: `reward_baselines` [batch] (greedy-rollout rewards) is required")
    with torch.no_grad():
        mask = response_mask.to(token_level_rewards.dtype)
        returns = (token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = (returns - reward_baselines.to(returns.dtype).unsqueeze(-1)) * mask
        returns = returns * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """On-Policy RL with Optimal reward baseline (Hao et al. 2025, arXiv:2505.23585).

    Length-weighted group baseline ``b_g = sum_i |o_i| s_i / sum_i |o_i|`` (``|o_i|`` = response length from the
    mask), ``A_i = s_i - b_g``; a group of one uses ``b = 0``. Shapes: ``[batch, response_len]`` in and out.
    """
    index = _check_index(index, token_level_rewards.shape[0], "opo")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        lengths = response_mask.sum(dim=-1).to(scores.dtype)
        adv = scores.clone()
        for rows in _group_rows(index, scores.device).values():
            if rows.numel() > 1:
                weights = lengths[rows]
                baseline = (weights * scores[rows]).sum() / weights.sum().clamp(min=epsilon)
                adv[rows] = scores[rows] - baseline
        advantages = _per_token(adv, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group Policy Gradient advantage (Chu et al. 2025, "GPG", arXiv:2504.02546).

    ``A_i = alpha * (s_i - mean_g) / f_norm`` with the gradient-correction factor ``alpha = B / (B - M)``: ``B``
    is the batch size and ``M`` the number of responses in groups (of 2 or more) whose scores are all equal,
    which carry zero advantage and would otherwise dilute the batch-mean gradient. A group of one uses mean 0.
    ``alpha`` may be given explicitly. Shapes: ``[batch, response_len]`` in and out.
    """
    index = _check_index(index, token_level_rewards.shape[0], "gpg")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        batch = scores.shape[0]
        groups = _group_rows(index, scores.device)
        centred = _center_by_group_mean(scores, groups)
        # Responses of a group (of 2 or more) with identical scores carry zero advantage.
        invalid = sum(
            rows.numel()
            for rows in groups.values()
            if rows.numel() > 1 and bool((scores[rows] == scores[rows][0]).all())
        )
        if alpha is None:
            alpha = batch / (batch - invalid) if batch > invalid else 1.0
        advantages = _per_token(alpha * centred / f_norm, response_mask)
    return advantages, advantages
