"""The driver's side of rollout correction (``algorithm.rollout_correction``): which log-prob pass a step needs,
and the weights, rejection and ``rollout_corr/*`` metrics added to a batch (the tensor maths lives in
:mod:`verl.algorithms.rollout_correction`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.algorithms.rollout_correction import compute_mismatch_metrics, compute_rollout_correction
from verl.base_config import omega_conf_to_dataclass
from verl.protocol import DataProto
from verl.trainer.config.log_prob_passes import bypass_mode, correction_enabled, needs_old_log_probs
from verl.trainer.config.schema import RolloutCorrectionConfig

__all__ = [
    "correction_enabled",
    "bypass_mode",
    "bypass_loss_needed",
    "needs_old_log_probs",
    "use_rollout_as_old",
    "apply_rollout_correction",
]


def _rollout_log_probs(batch: DataProto, what: str):
    if "rollout_log_probs" not in batch.batch.keys():
        raise KeyError(
            f"{what} needs the rollout's log-probs (batch column 'rollout_log_probs'), which the rollout did not "
            "return: set actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    return batch.batch["rollout_log_probs"]


def bypass_loss_needed(cfg: RolloutCorrectionConfig | Mapping[str, Any] | None) -> bool:
    """Whether bypass mode must swap the actor's loss for ``bypass_mode`` (upstream ``apply_bypass_mode``): importance
    weights or rejection against the current policy, or the REINFORCE loss. Plain bypass with ``loss_type=ppo_clip``
    and no correction is the configured loss with ratio ``pi_theta / pi_rollout``, so the loss is left alone."""
    if not bypass_mode(cfg):
        return False
    rc = omega_conf_to_dataclass(cfg, RolloutCorrectionConfig)
    return rc.rollout_is is not None or rc.rollout_rs is not None or rc.loss_type == "reinforce"


def use_rollout_as_old(batch: DataProto, cfg: RolloutCorrectionConfig | Mapping[str, Any] | None = None) -> DataProto:
    """Bypass mode: ``old_log_probs`` := ``rollout_log_probs`` (the PPO ratio is then ``pi_theta / pi_rollout``).

    When ``cfg`` (``algorithm.rollout_correction``) asks for weights, rejection or ``loss_type=reinforce``, its
    settings travel to the actor in ``meta_info["rollout_correction"]`` and the actor computes the loss with
    ``bypass_mode`` (:func:`verl.algorithms.policy_loss_bypass.compute_policy_loss_bypass_mode`), which corrects
    every micro-batch against the current policy."""
    batch.batch["old_log_probs"] = _rollout_log_probs(batch, "algorithm.rollout_correction.bypass_mode").clone()
    if bypass_loss_needed(cfg):
        batch.meta_info["rollout_correction"] = _plain(cfg)
    return batch


def _plain(cfg: Any) -> dict[str, Any]:
    """The rollout-correction settings as a plain dict (they cross to the workers in ``meta_info``)."""
    from dataclasses import asdict, is_dataclass

    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return dict(OmegaConf.to_container(cfg, resolve=True))
    if is_dataclass(cfg):
        return {k: v for k, v in asdict(cfg).items() if k != "extra"}
    return dict(cfg)


def apply_rollout_correction(
    batch: DataProto, cfg: RolloutCorrectionConfig | Mapping[str, Any] | None
) -> dict[str, float]:
    """Add ``rollout_is_weights`` and apply rejection (``response_mask`` zeroed on rejected tokens) as ``cfg``
    (``algorithm.rollout_correction``) asks; returns the ``rollout_corr/*`` metrics.

    In bypass mode nothing happens here (the actor's ``bypass_mode`` loss corrects each micro-batch). With the
    correction off the batch is left as it is, and the mismatch metrics (KL, perplexity
    gap, chi-square) are still returned whenever the batch holds both the rollout's and the old log-probs.
    """
    if bypass_mode(cfg):
        return {}  # old == rollout: the bypass-mode loss corrects against the current policy (use_rollout_as_old)
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

    # typed: keys a caller's partial section leaves out take RolloutCorrectionConfig's defaults
    rc = omega_conf_to_dataclass(cfg, RolloutCorrectionConfig)

    def as_float(v: Any) -> float | None:
        return None if v is None else float(v)

    result = compute_rollout_correction(
        batch.batch["old_log_probs"],
        rollout_log_probs,
        batch.batch["response_mask"],
        rollout_is=rc.rollout_is,
        rollout_is_threshold=rc.rollout_is_threshold,
        rollout_is_batch_normalize=rc.rollout_is_batch_normalize,
        rollout_rs=rc.rollout_rs,
        rollout_rs_threshold=rc.rollout_rs_threshold,
        rollout_rs_threshold_lower=as_float(rc.rollout_rs_threshold_lower),
        rollout_token_veto_threshold=as_float(rc.rollout_token_veto_threshold),
    )
    batch.batch["response_mask"] = result.response_mask
    if result.rollout_is_weights is not None:
        batch.batch["rollout_is_weights"] = result.rollout_is_weights
    return result.metrics
