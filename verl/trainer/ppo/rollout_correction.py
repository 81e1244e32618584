"""The driver's side of rollout correction (``algorithm.rollout_correction``): which log-prob pass a step needs,
and the weights, rejection and ``rollout_corr/*`` metrics added to a batch (the tensor maths lives in
:mod:`verl.algorithms.rollout_correction`)."""

from __future__ import annotations

from typing import Any

from verl.algorithms.rollout_correction import compute_mismatch_metrics, compute_rollout_correction
from verl.base_config import get_config_value
from verl.protocol import DataProto
from verl.trainer.config.log_prob_passes import bypass_mode, correction_enabled, needs_old_log_probs

__all__ = ["correction_enabled", "bypass_mode", "needs_old_log_probs", "use_rollout_as_old", "apply_rollout_correction"]


def _rollout_log_probs(batch: DataProto, what: str):
    if "rollout_log_probs" not in batch.batch.keys():
        raise KeyError(
            f"{what} needs the rollout's log-probs (batch column 'rollout_log_probs'), which the rollout did not "
            "return: set actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    return batch.batch["rollout_log_probs"]


def use_rollout_as_old(batch: DataProto) -> DataProto:
    """Bypass mode: ``old_log_probs`` := ``rollout_log_probs`` (the PPO ratio is then ``pi_theta / pi_rollout``)."""
    batch.batch["old_log_probs"] = _rollout_log_probs(batch, "algorithm.rollout_correction.bypass_mode").clone()
    return batch


def apply_rollout_correction(batch: DataProto, cfg: Any) -> dict[str, float]:
    """Add ``rollout_is_weights`` and apply rejection (``response_mask`` zeroed on rejected tokens) as ``cfg``
    (``algorithm.rollout_correction``) asks; returns the ``rollout_corr/*`` metrics.

    With the correction off (or in bypass mode) the batch is left as it is, and the mismatch metrics (KL, perplexity
    gap, chi-square) are still returned whenever the batch holds both the rollout's and the old log-probs.
    """
    has_old = "old_log_probs" in batch.batch.keys()
    if not correction_enabled(cfg):
        if bypass_mode(cfg) or not has_old or "rollout_log_probs" not in batch.batch.keys():
            return {}
        metrics = compute_mismatch_metrics(
            batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], batch.batch["response_mask"]
        )
        return {f"rollout_corr/{k}": v for k, v in metrics.items()}
    rollout_log_probs = _rollout_log_probs(batch, "algorithm.rollout_correction")
    if not has_old:
        raise KeyError("algorithm.rollout_correction needs old_log_probs in the batch (run compute_log_prob first)")

    def value(key: str, default: Any = None) -> Any:
        return get_config_value(cfg, key, default)

    def as_float(key: str) -> float | None:
        v = value(key)
        return None if v is None else float(v)

    result = compute_rollout_correction(
        batch.batch["old_log_probs"],
        rollout_log_probs,
        batch.batch["response_mask"],
        rollout_is=value("rollout_is"),
        rollout_is_threshold=float(value("rollout_is_threshold", 2.0)),
        rollout_is_batch_normalize=bool(value("rollout_is_batch_normalize", False)),
        rollout_rs=value("rollout_rs"),
        rollout_rs_threshold=as_float("rollout_rs_threshold"),
        rollout_rs_threshold_lower=as_float("rollout_rs_threshold_lower"),
        rollout_token_veto_threshold=as_float("rollout_token_veto_threshold"),
    )
    batch.batch["response_mask"] = result.response_mask
    if result.rollout_is_weights is not None:
        batch.batch["rollout_is_weights"] = result.rollout_is_weights
    return result.metrics
