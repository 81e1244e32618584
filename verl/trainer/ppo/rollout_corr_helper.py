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

from typing import Any

import torch

from verl.algorithms.rollout_correction import SAFETY_BOUND, compute_rollout_correction
from verl.algorithms.rollout_correction import compute_mismatch_metrics as compute_offpolicy_metrics
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_correction import apply_rollout_correction

__all__ = [
    "SAFETY_BOUND",
    "compute_offpolicy_metrics",
    "compute_rollout_correction_and_add_to_batch",
    "compute_rollout_correction_and_rejection_mask",
]


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


def compute_rollout_correction_and_add_to_batch(batch: DataProto, rollout_corr_config: Any) -> tuple[DataProto, dict]:
    """Add ``rollout_is_weights`` and apply rejection to ``batch`` (in place) as ``rollout_corr_config``
    (``algorithm.rollout_correction``) asks; returns ``(batch, rollout_corr/* metrics)``."""
    metrics = apply_rollout_correction(batch, rollout_corr_config)
    return batch, metrics
