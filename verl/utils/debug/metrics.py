"""How far the rollout engine's token probabilities are from the trainer's (verl's ``verl.utils.debug.metrics``).

The rollout samples with its own kernels and precision, so ``rollout_log_probs`` (recorded while sampling, with
``actor_rollout_ref.rollout.calculate_log_probs``) and ``old_log_probs`` (the actor's forward pass on the same tokens)
differ a little; a large gap means the two are not the same policy and PPO's ratio is off (the mismatch studied in
"Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", Yao et al. 2025, and measured with the
Pearson correlation of the two probabilities in arXiv:2506.13585).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

__all__ = ["calculate_debug_metrics"]

logger = logging.getLogger(__name__)

_PREFIX = "training/rollout_"


def _response_mask(data: Any, shape: torch.Size) -> torch.Tensor:
    """``response_mask``, else the response part of ``attention_mask``, else every token (a warning)."""
    batch = data.batch
    if "response_mask" in batch.keys():
        return batch["response_mask"].bool()
    if "attention_mask" in batch.keys():
        return batch["attention_mask"][:, -shape[-1] :].bool()
    logger.warning("calculate_debug_metrics: no response_mask / attention_mask in the batch; every token counts")
    return torch.ones(shape, dtype=torch.bool)


def calculate_debug_metrics(data: Any) -> dict[str, float]:
    """Gap between the rollout's and the actor's per-token probabilities over the valid response tokens.

    ``data`` is a :class:`~verl.protocol.DataProto` (only its ``batch`` is read: this helper sits below the
    protocol). Reads ``rollout_log_probs [bs, R]``, ``old_log_probs [bs, R]`` and the mask (``response_mask
    [bs, R]``, else ``attention_mask [bs, P+R]``'s last ``R`` columns, else all tokens). With ``p = exp(log_prob)``
    and ``d = |p_actor - p_rollout|`` over the masked tokens, returns ``training/rollout_probs_diff_{max,mean,std}``
    (``std`` unbiased) of ``d``, ``training/rollout_actor_probs_pearson_corr`` (Pearson correlation of ``p_actor``
    and ``p_rollout``; NaN for fewer than two tokens or a constant side) and ``training/rollout_probs_diff_valid``
    (1, or 0 with the others NaN when no token is valid).
    """
    rollout = data.batch["rollout_log_probs"].float()
    actor = data.batch["old_log_probs"].float()
    if rollout.shape != actor.shape:
        raise ValueError(
            f"calculate_debug_metrics: rollout_log_probs {tuple(rollout.shape)} and old_log_probs "
            f"{tuple(actor.shape)} differ in shape"
        )
    mask = _response_mask(data, rollout.shape).to(rollout.device)
    if mask.shape != rollout.shape:
        raise ValueError(
            f"calculate_debug_metrics: the mask {tuple(mask.shape)} does not match the log-probs {tuple(rollout.shape)}"
        )
    if not mask.any():
        nan = math.nan
        return {
            f"{_PREFIX}probs_diff_valid": 0,
            f"{_PREFIX}probs_diff_max": nan,
            f"{_PREFIX}probs_diff_mean": nan,
            f"{_PREFIX}probs_diff_std": nan,
            f"{_PREFIX}actor_probs_pearson_corr": nan,
        }
    p_actor = actor.exp()[mask]
    p_rollout = rollout.exp()[mask]
    diff = (p_actor - p_rollout).abs()
    if diff.numel() > 1:
        corr = float(torch.corrcoef(torch.stack([p_actor, p_rollout]))[0, 1])
        std = float(diff.std())
    else:
        corr = std = math.nan
    return {
        f"{_PREFIX}probs_diff_valid": 1,
        f"{_PREFIX}probs_diff_max": float(diff.max()),
        f"{_PREFIX}probs_diff_mean": float(diff.mean()),
        f"{_PREFIX}probs_diff_std": std,
        f"{_PREFIX}actor_probs_pearson_corr": corr,
    }
