"""Upstream verl's ``verl.trainer.ppo.rollout_corr_helper`` module path for rollout correction.

The maths lives in :mod:`verl.algorithms.rollout_correction` and the driver's side in
:mod:`verl.trainer.ppo.rollout_correction`; this module gives them upstream's names and return shapes:

- ``compute_rollout_correction_and_rejection_mask(...) -> (weights DataProto | None, response_mask, metrics)``;
- ``compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask)``: the mismatch metrics, unprefixed;
- ``compute_rollout_correction_and_add_to_batch(batch, rollout_corr_config) -> (batch, metrics)``.

The IS / RS levels and thresholds accepted are those of :func:`verl.algorithms.rollout_correction
.compute_rollout_correction` (docs/algorithms.md lists them); an option it does not know is refused there with the
list of known ones.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verl.algorithms.rollout_correction import SAFETY_BOUND, compute_mismatch_metrics, compute_rollout_correction
from verl.algorithms.rollout_rejection import ROLLOUT_RS_OPTIONS
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_correction import apply_rollout_correction
from verl.utils import torch_functional as verl_F

__all__ = [
    "SAFETY_BOUND",
    "SUPPORTED_ROLLOUT_RS_OPTIONS",
    "TOKEN_LEVEL_ROLLOUT_RS_OPTIONS",
    "compute_is_metrics",
    "compute_offpolicy_metrics",
    "compute_rollout_correction_and_add_to_batch",
    "compute_rollout_correction_and_rejection_mask",
]

# the rejection criteria ``algorithm.rollout_correction.rollout_rs`` accepts (comma-separated), and the per-token ones
SUPPORTED_ROLLOUT_RS_OPTIONS: frozenset[str] = frozenset(ROLLOUT_RS_OPTIONS)
TOKEN_LEVEL_ROLLOUT_RS_OPTIONS: frozenset[str] = frozenset(o for o in ROLLOUT_RS_OPTIONS if o.startswith("token_"))


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: float | None = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: float | None = None,
) -> tuple[DataProto | None, torch.Tensor, dict[str, float]]:
    """Truncated IS weights and rejection in one call, with upstream's return shape.

    Args and shapes as :func:`verl.algorithms.rollout_correction.compute_rollout_correction` (all tensors
    ``[batch, response_len]``). Returns ``(DataProto with batch["rollout_is_weights"]`` or None without
    ``rollout_is``, the response mask with rejected tokens zeroed, the ``rollout_corr/*`` metrics)``.
    """
    result = compute_rollout_correction(
        old_log_prob,
        rollout_log_prob,
        response_mask,
        rollout_is=rollout_is,
        rollout_is_threshold=2.0 if rollout_is_threshold is None else rollout_is_threshold,
        rollout_is_batch_normalize=rollout_is_batch_normalize,
        rollout_rs=rollout_rs,
        rollout_rs_threshold=rollout_rs_threshold,
    )
    weights = None
    if result.rollout_is_weights is not None:
        weights = DataProto.from_dict(tensors={"rollout_is_weights": result.rollout_is_weights})
    return weights, result.response_mask, result.metrics


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, float]:
    """The off-policy gap metrics, unprefixed (:func:`verl.algorithms.rollout_correction.compute_mismatch_metrics`:
    ``kl``, ``k3_kl``, ``training_ppl``, ``rollout_ppl``, ``chi2_token``, ...). Without ``rollout_log_prob`` only
    the trainer's ``training_ppl`` (batch mean of ``exp(-mean_t log pi_old)``) and ``training_log_ppl``.
    Tensors ``[batch, response_len]``; ValueError when ``response_mask`` has no valid token."""
    if not response_mask.any():
        raise ValueError("compute_offpolicy_metrics: response_mask has no valid token (1)")
    if rollout_log_prob is not None:
        return compute_mismatch_metrics(old_log_prob, rollout_log_prob, response_mask)
    mean_lp = verl_F.masked_mean(old_log_prob.double(), response_mask.double(), axis=-1)
    return {"training_ppl": torch.exp(-mean_lp).mean().item(), "training_log_ppl": (-mean_lp).mean().item()}


def compute_rollout_correction_and_add_to_batch(batch: DataProto, rollout_corr_config: Any) -> tuple[DataProto, dict]:
    """Add ``rollout_is_weights`` and apply rejection to ``batch`` (in place) as ``rollout_corr_config``
    (``algorithm.rollout_correction``) asks; returns ``(batch, rollout_corr/* metrics)``."""
    metrics = apply_rollout_correction(batch, rollout_corr_config)
    return batch, metrics


def compute_is_metrics(
    rollout_is_weights: torch.Tensor,
    raw_rollout_is_weights: torch.Tensor,
    log_ratio_for_metrics: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str,
    rollout_is_threshold: float,
    rollout_is_threshold_lower: float | None = None,
) -> dict[str, float]:
    """Diagnostics of importance-sampling weights ``w = pi_train / pi_rollout`` (upstream v0.9's
    ``rollout_corr_helper.compute_is_metrics``; keys unprefixed).

    Args: ``rollout_is_weights`` (the applied weights, after truncation / IcePop) and ``raw_rollout_is_weights``
    (before), ``response_mask``: ``[batch, response_len]``; ``log_ratio_for_metrics``: the unclamped log-ratio at the
    IS level (``[batch, 1]`` for ``sequence``, ``[batch, response_len]`` for ``token``); ``rollout_is_threshold``:
    the upper bound ``U``; ``rollout_is_threshold_lower``: the lower bound ``L`` (default ``1 / U``).

    ``rollout_is_mean`` is the masked mean of the applied weights. ``_max`` / ``_min`` / ``_ratio_fraction_high`` /
    ``_ratio_fraction_low`` (share above ``U`` / below ``L``): for ``sequence``, of ``exp(log_ratio_for_metrics)``
    (max clamped at ``exp(SAFETY_BOUND)``, fractions over the sequences); for ``token``, the max / min of the applied
    weights over valid tokens and the fractions of the raw weights over valid tokens. ``rollout_is_std`` and
    ``rollout_is_eff_sample_size = 1 / mean((w' / mean(w'))^2)`` use ``w' = clamp(w, 0, U)`` over valid tokens.
    ``rollout_is_seq_{mean,std,max,min,max_deviation}``: statistics of the per-sequence mean applied weight (and its
    largest ``|. - 1|``); ``rollout_is_seq_fraction_{high,low}``: share of sequences whose raw mean weight is
    above ``U`` / below ``L``. Raises ValueError when ``response_mask`` has no valid token.
    """
    if not response_mask.any():
        raise ValueError("compute_is_metrics: response_mask has no valid token (1)")
    upper = float(rollout_is_threshold)
    lower = 1.0 / upper if rollout_is_threshold_lower is None else float(rollout_is_threshold_lower)
    mask = response_mask.to(rollout_is_weights.dtype)
    valid = response_mask.bool()

    def masked_mean(x: torch.Tensor, axis: int | None = None) -> torch.Tensor:
        if axis is None:
            return (x * mask).sum() / mask.sum()
        return (x * mask).sum(axis) / mask.sum(axis).clamp(min=1)

    metrics: dict[str, float] = {"rollout_is_mean": masked_mean(rollout_is_weights).item()}
    if rollout_is == "sequence":
        log_r = log_ratio_for_metrics
        metrics["rollout_is_max"] = log_r.max().clamp(max=SAFETY_BOUND).exp().item()
        metrics["rollout_is_min"] = log_r.min().exp().item()
        metrics["rollout_is_ratio_fraction_high"] = (log_r > math.log(upper)).float().mean().item()
        metrics["rollout_is_ratio_fraction_low"] = (log_r < math.log(lower)).float().mean().item()
    else:
        metrics["rollout_is_ratio_fraction_high"] = masked_mean((raw_rollout_is_weights > upper).to(mask.dtype)).item()
        metrics["rollout_is_ratio_fraction_low"] = masked_mean((raw_rollout_is_weights < lower).to(mask.dtype)).item()
        metrics["rollout_is_max"] = rollout_is_weights[valid].max().item()
        metrics["rollout_is_min"] = rollout_is_weights[valid].min().item()
    clamped = rollout_is_weights.clamp(min=0.0, max=upper)
    clamped_mean = masked_mean(clamped)
    if mask.sum() > 1:
        variance = masked_mean(clamped.square()) - clamped_mean.square()
        metrics["rollout_is_std"] = variance.clamp(min=0.0).sqrt().item()
    else:
        metrics["rollout_is_std"] = 0.0
    metrics["rollout_is_eff_sample_size"] = 1.0 / masked_mean((clamped / (clamped_mean + 1e-8)).square()).item()
    if rollout_is_weights.dim() > 1:
        seq_mean = masked_mean(rollout_is_weights, axis=-1)
        metrics["rollout_is_seq_mean"] = seq_mean.mean().item()
        metrics["rollout_is_seq_std"] = seq_mean.std().item() if seq_mean.numel() > 1 else 0.0
        metrics["rollout_is_seq_max"] = seq_mean.max().item()
        metrics["rollout_is_seq_min"] = seq_mean.min().item()
        metrics["rollout_is_seq_max_deviation"] = (seq_mean - 1.0).abs().max().item()
        # the raw means: a mean of weights truncated at U can never exceed U
        raw_seq_mean = masked_mean(raw_rollout_is_weights, axis=-1)
        metrics["rollout_is_seq_fraction_high"] = (raw_seq_mean > upper).float().mean().item()
        metrics["rollout_is_seq_fraction_low"] = (raw_seq_mean < lower).float().mean().item()
    return metrics
