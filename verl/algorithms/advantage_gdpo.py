"""GDPO: group reward-decoupled normalisation of several reward components (``algorithm.adv_estimator=gdpo``).

Upstream source: ``verl/trainer/ppo/core_algos.py`` (``compute_gdpo_outcome_advantage``, verl v0.9) and
``examples/gdpo_trainer``; paper: "GDPO: Group reward-Decoupled Normalization Policy Optimization",
arXiv:2601.05242.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from verl.algorithms.advantage import _check_index, compute_grpo_outcome_advantage
from verl.algorithms.config import AlgorithmConfig
from verl.algorithms.registry import AdvantageEstimator, register_adv_est, resolve_param
from verl.base_config import get_config_value
from verl.utils import torch_functional as verl_F


def _component_scores(
    non_tensor_batch: Mapping[str, Any], keys: Sequence[str], batch_size: int, device: torch.device
) -> list[torch.Tensor]:
    """Each reward component ``[batch]`` (float) from the non-tensor columns the reward function's dict filled."""
    scores = []
    for key in keys:
        if key not in non_tensor_batch:
            raise KeyError(
                f"gdpo: reward component {key!r} (algorithm.gdpo_reward_keys) is not in the batch; the reward "
                f"function must return a dict holding it. Columns present: {sorted(non_tensor_batch)}"
            )
        values = np.asarray(non_tensor_batch[key], dtype=np.float32).reshape(-1)
        if values.shape[0] != batch_size:
            raise ValueError(f"gdpo: reward component {key!r} has {values.shape[0]} values for {batch_size} rows")
        scores.append(torch.as_tensor(values, device=device))
    return scores


@register_adv_est(AdvantageEstimator.GDPO)
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: AlgorithmConfig | Mapping[str, Any] | None = None,
    non_tensor_batch: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO advantage: normalise every reward component within its group, then sum and whiten.

    For components ``k = 1..K`` (``algorithm.gdpo_reward_keys``, columns of ``non_tensor_batch`` that the reward
    function returned per response) with weights ``w_k`` (``algorithm.gdpo_reward_weights``, default 1):

    ``A_k,i = (s_k,i - mean_g s_k) / (std_g s_k + eps)`` (GRPO within the group ``g`` of response ``i``; without the
    std when ``norm_adv_by_std_in_grpo=False``), ``A_i = sum_k w_k A_k,i`` broadcast over the response tokens, and
    finally ``A = whiten(A)`` over the valid tokens of the batch. Summing rewards first (GRPO) lets the component
    with the largest spread drown the others; normalising each first does not.

    Without ``non_tensor_batch`` (a caller that passes only tensors) the single score ``sum_t r_t`` is the one
    component. Shapes: ``token_level_rewards``, ``response_mask`` ``[batch, response_len]``; ``index`` ``[batch]``.
    Returns ``(advantages, advantages)``.
    """
    index = _check_index(index, token_level_rewards.shape[0], "gdpo")
    norm_by_std = resolve_param("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo, config)
    with torch.no_grad():
        batch_size, device = token_level_rewards.shape[0], token_level_rewards.device
        if non_tensor_batch is None:
            scores = [token_level_rewards.sum(dim=-1)]
            weights = [1.0]
        else:
            keys = get_config_value(config, "gdpo_reward_keys", None)
            if not keys:
                raise ValueError(
                    "adv_estimator=gdpo needs the reward components to normalise: set +algorithm.gdpo_reward_keys="
                    "'[accuracy_reward, format_reward]' (keys of the reward function's dict)"
                )
            keys = [str(k) for k in keys]
            scores = _component_scores(non_tensor_batch, keys, batch_size, device)
            raw_weights = get_config_value(config, "gdpo_reward_weights", None)
            weights = [1.0] * len(keys) if raw_weights is None else [float(w) for w in raw_weights]
            if len(weights) != len(keys):
                raise ValueError(
                    f"algorithm.gdpo_reward_weights has {len(weights)} entries for {len(keys)} gdpo_reward_keys"
                )
        mask = response_mask.to(token_level_rewards.dtype)
        total = torch.zeros_like(mask)
        for weight, score in zip(weights, scores):
            per_token = torch.zeros_like(mask)
            per_token[:, 0] = score.to(mask.dtype)  # one score per row: GRPO sums the row
            normalised, _ = compute_grpo_outcome_advantage(
                per_token, response_mask, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm_by_std
            )
            total = total + weight * normalised
        advantages = verl_F.masked_whiten(total, response_mask) * mask
    return advantages, advantages
