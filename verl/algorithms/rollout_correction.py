"""Rollout correction: importance weights and rejection masks for the rollout-vs-trainer policy mismatch.

The rollout engine (vLLM, the hf engine in another dtype, ...) samples responses from ``pi_rollout``; the trainer
computes the same tokens' log-probs under ``pi_old`` (the actor's ``compute_log_prob`` pass, before the update).
Different kernels and precisions make the two differ, so the PPO update is silently off-policy. With the per-token
log-ratio ``r_t = log pi_old(y_t) - log pi_rollout(y_t)`` over the valid tokens ``t`` of a response (``m_t = 1``):

* token-level importance weight ``w_t = exp(r_t)``;
* sequence-level weight ``w = exp(sum_t r_t)`` (the likelihood ratio of the whole response, unbiased, high
  variance), the same for every token of the response;
* geometric-mean sequence level ``w = exp(mean_t r_t)`` (length-normalised; used for rejection, where it does not
  grow with the response length).

Truncated importance sampling (TIS) uses ``min(w, rollout_is_threshold)`` as the weight of the per-token policy loss;
rejection sampling (RS) drops the tokens / responses whose weight lies outside ``[lower, upper]`` (``lower`` defaults
to ``1 / upper``) by zeroing their ``response_mask``; the token veto drops every response holding a token whose
weight is below ``rollout_token_veto_threshold``. Log-ratios are clamped to ``[-20, 20]`` before ``exp`` so weights
cannot overflow; thresholds are compared in log space on the unclamped log-ratios.

All inputs are ``[batch, response_len]`` float tensors; ``response_mask`` is 1 on response tokens, 0 on padding.
Metric names follow upstream verl (``rollout_corr/...``, see ``verl/trainer/ppo/rollout_corr_helper.py`` there).

References:
    Yao, Liu, Zhang, Li, Wang, Gao, Ma (2025), "Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training", https://fengyao.notion.site/off-policy-rl (truncated importance sampling, TIS).
    Liu, Li, Fu, Wang, Liu, Shen (2025), "When Speed Kills Stability: Demystifying RL Collapse from the
    Training-Inference Mismatch", https://richardli.xyz/rl-collapse (sequence-level IS, geometric rejection, veto).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from verl.algorithms.config import RolloutCorrectionConfig
from verl.algorithms.rollout_rejection import compute_rollout_rejection_mask, parse_is_threshold
from verl.utils import torch_functional as verl_F

SAFETY_BOUND = 20.0
IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "sequence", "geometric")  # the earlier rejection levels (rollout_rs_threshold[_lower] bounds)
METRIC_PREFIX = "rollout_corr/"


def _check_shapes(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor) -> None:
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(
            "old_log_prob, rollout_log_prob and response_mask must have the same shape [batch, response_len], got "
            f"{tuple(old_log_prob.shape)}, {tuple(rollout_log_prob.shape)}, {tuple(response_mask.shape)}"
        )
    if old_log_prob.dim() != 2:
        raise ValueError(f"log-probs must be [batch, response_len], got shape {tuple(old_log_prob.shape)}")


def aggregate_log_ratio(log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str) -> torch.Tensor:
    """The log importance weight at ``level``: ``token`` -> ``r`` ``[B, T]``; ``sequence`` -> ``sum_t m_t r_t``
    ``[B, 1]``; ``geometric`` -> ``sum_t m_t r_t / sum_t m_t`` ``[B, 1]`` (unclamped)."""
    if level == "token":
        return log_ratio
    if level == "sequence":
        return verl_F.masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
    if level == "geometric":
        return verl_F.masked_mean(log_ratio, response_mask, axis=-1).unsqueeze(-1)
    raise ValueError(f"unknown aggregation level {level!r}; expected one of {RS_LEVELS}")


def _unit_values(agg: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The 1-D values of the weighting units: valid tokens (``agg`` is ``[B, T]``) or responses with at least one
    valid token (``agg`` is ``[B, 1]``)."""
    if agg.shape[-1] == 1 and response_mask.shape[-1] != 1:
        return agg[:, 0][response_mask.sum(-1) > 0]
    return agg[response_mask.bool()]


def _weight_stats(log_w: torch.Tensor, prefix: str, upper: float, lower: float) -> dict[str, float]:
    """mean/max/min/std of ``exp(log_w)`` (clamped to the safety bound) and the fractions above ``upper`` and below
    ``lower`` (compared in log space), over the 1-D unit values ``log_w``."""
    if log_w.numel() == 0:
        return {}
    w = torch.exp(log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND)).double()
    return {
        f"{prefix}_mean": w.mean().item(),
        f"{prefix}_max": w.max().item(),
        f"{prefix}_min": w.min().item(),
        f"{prefix}_std": w.std(unbiased=False).item(),
        f"{prefix}_ratio_fraction_high": (log_w > math.log(upper)).double().mean().item(),
        f"{prefix}_ratio_fraction_low": (log_w < math.log(lower)).double().mean().item(),
    }


def compute_is_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    level: str = "token",
    threshold: str | float = RolloutCorrectionConfig.rollout_is_threshold,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights ``min(w, threshold)`` ``[B, T]`` (0 on padding, detached) and their metrics.

    ``level``: ``token`` (``w_t = exp(r_t)``) or ``sequence`` (``w = exp(sum_t r_t)`` broadcast over the response).
    ``threshold``: a number (truncation, TIS) or ``"lower_upper"`` (IcePop, inclusionAI's Ling team 2025, Ring-1T
    report; upstream ``rollout_corr_helper.compute_rollout_correction_weights``, ``docs/algo/rollout_corr.md``):
    weights outside ``[lower, upper]`` become 0, the others stay untruncated (the response mask is not changed); the
    share of valid tokens zeroed is logged as ``rollout_is_oob_ratio``.
    ``batch_normalize``: divide the truncated weights by their mean over the units (valid tokens, or responses), so
    the batch mean is 1 (the divisor is logged as ``rollout_is_batch_norm_factor``).

    Metrics (over the units, before truncation): ``rollout_is_mean/max/min/std``, ``rollout_is_ratio_fraction_high``
    (the fraction truncated: ``w > threshold``), ``rollout_is_ratio_fraction_low`` (``w < 1/threshold``), and
    ``rollout_is_eff_sample_size = 1 / mean((w' / mean(w'))^2)`` of the truncated weights ``w'`` (1: uniform).
    """
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    if level not in IS_LEVELS:
        raise ValueError(f"rollout_is={level!r} is not a level; expected one of {IS_LEVELS} (or null: no weights)")
    upper, icepop_lower = parse_is_threshold(threshold)
    mask = response_mask.to(old_log_prob.dtype)
    log_ratio = (old_log_prob - rollout_log_prob).detach()
    agg = aggregate_log_ratio(log_ratio, mask, level)
    lower = 1.0 / upper if icepop_lower is None else icepop_lower
    metrics = _weight_stats(_unit_values(agg, mask), "rollout_is", upper, lower)
    raw = torch.exp(agg.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    if icepop_lower is None:
        weights = raw.clamp(max=upper) * mask
    else:
        inside = ((agg >= math.log(icepop_lower)) & (agg <= math.log(upper))).expand_as(log_ratio)
        weights = torch.where(inside, raw, torch.zeros_like(raw)) * mask
        metrics["rollout_is_oob_ratio"] = verl_F.masked_mean((~inside).to(mask.dtype), mask).item()
    units = _unit_values(weights if level == "token" else weights.amax(-1, keepdim=True), mask)
    if units.numel() > 0:
        norm = units / (units.mean() + 1e-8)
        metrics["rollout_is_eff_sample_size"] = (1.0 / (norm.double().square().mean() + 1e-12)).item()
        if batch_normalize:
            factor = units.mean()
            metrics["rollout_is_batch_norm_factor"] = factor.item()
            if factor > 1e-8:
                weights = weights / factor
    return weights.detach(), metrics


def compute_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    level: str = "token",
    threshold: float = 2.0,
    threshold_lower: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` with the tokens (``token``) or whole responses (``sequence``, ``geometric``) whose weight
    lies outside ``[threshold_lower, threshold]`` set to 0 (``threshold_lower`` defaults to ``1 / threshold``).

    Metrics: the weight statistics ``rollout_rs_mean/max/min/std/ratio_fraction_high/ratio_fraction_low`` (over the
    units), ``rollout_rs_masked_fraction`` (valid tokens rejected) and ``rollout_rs_seq_masked_fraction``
    (responses with at least one token rejected, among those with a valid token).
    """
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    if level not in RS_LEVELS:
        raise ValueError(f"rollout_rs={level!r} is not a level; expected one of {RS_LEVELS} (or null: no rejection)")
    lower = 1.0 / threshold if threshold_lower is None else float(threshold_lower)
    if not 0 < lower <= threshold:
        raise ValueError(f"rejection thresholds need 0 < lower <= upper, got lower={lower}, upper={threshold}")
    mask = response_mask.to(old_log_prob.dtype)
    agg = aggregate_log_ratio((old_log_prob - rollout_log_prob).detach(), mask, level)
    keep = ((agg >= math.log(lower)) & (agg <= math.log(threshold))).to(mask.dtype).expand_as(mask)
    new_mask = mask * keep
    metrics = _weight_stats(_unit_values(agg, mask), "rollout_rs", threshold, lower)
    metrics.update(_rejected_fractions(mask, new_mask, "rollout_rs"))
    return new_mask.to(response_mask.dtype), metrics


def _rejected_fractions(mask: torch.Tensor, new_mask: torch.Tensor, prefix: str) -> dict[str, float]:
    rejected = mask - new_mask
    has_tokens = mask.sum(-1) > 0
    if not has_tokens.any():
        return {}
    return {
        f"{prefix}_masked_fraction": (rejected.sum() / mask.sum()).item(),
        f"{prefix}_seq_masked_fraction": (rejected.sum(-1) > 0)[has_tokens].double().mean().item(),
    }


def compute_token_veto_mask(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, threshold: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` with every response that holds a valid token of weight ``exp(r_t) < threshold`` zeroed
    (a catastrophic outlier: the trainer gives the sampled token almost no probability). Metrics:
    ``rollout_is_veto_fraction`` (responses vetoed) and ``rollout_is_catastrophic_token_fraction``."""
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    if not threshold > 0:
        raise ValueError(f"rollout_token_veto_threshold must be > 0, got {threshold}")
    mask = response_mask.to(old_log_prob.dtype)
    bad = ((old_log_prob - rollout_log_prob) < math.log(threshold)) & mask.bool()
    vetoed = bad.any(-1, keepdim=True)
    metrics = {
        "rollout_is_veto_fraction": vetoed.double().mean().item(),
        "rollout_is_catastrophic_token_fraction": (bad.sum() / mask.sum().clamp(min=1)).item(),
    }
    return (mask * (~vetoed).to(mask.dtype)).to(response_mask.dtype), metrics


class LogProbGapSums:
    """Running sums of the rollout-vs-trainer log-prob gap over response tokens, so that a gap measured
    micro-batch by micro-batch equals the whole batch's whatever the split: ``tokens``, ``k1`` (sum of
    ``log pi_rollout - log pi_trainer``), ``k3`` (sum of ``exp(r) - r - 1`` with ``r = log pi_trainer -
    log pi_rollout``, clamped to the safety bound), ``abs_sum`` and ``abs_max`` of ``|r|``."""

    def __init__(self) -> None:
        self.tokens, self.k1, self.k3, self.abs_sum, self.abs_max = 0.0, 0.0, 0.0, 0.0, 0.0

    def add(self, trainer_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor) -> None:
        """Add one micro-batch (all ``[batch, response_len]``; only tokens where ``response_mask`` is set)."""
        _check_shapes(trainer_log_prob, rollout_log_prob, response_mask)
        keep = response_mask.bool()
        r = (trainer_log_prob.detach().double() - rollout_log_prob.detach().double())[keep]
        if r.numel() == 0:
            return
        r_safe = r.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        self.tokens += float(r.numel())
        self.k1 += float((-r).sum().item())
        self.k3 += float((torch.exp(r_safe) - r_safe - 1).sum().item())
        self.abs_sum += float(r.abs().sum().item())
        self.abs_max = max(self.abs_max, float(r.abs().max().item()))

    def metrics(self) -> dict[str, float]:
        """``kl``, ``k3_kl``, ``log_prob_abs_diff_mean``, ``log_prob_abs_diff_max`` (token means; empty without
        tokens), as :func:`compute_mismatch_metrics` names them."""
        if self.tokens == 0:
            return {}
        return {
            "kl": self.k1 / self.tokens,
            "k3_kl": self.k3 / self.tokens,
            "log_prob_abs_diff_mean": self.abs_sum / self.tokens,
            "log_prob_abs_diff_max": self.abs_max,
        }


def compute_mismatch_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """The gap between the rollout policy and the trainer, over the valid tokens (no prefix).

    With ``r_t = log pi_old - log pi_rollout`` and per-response mean log-probs ``lp_old``, ``lp_rollout``:

    * ``kl`` (k1): ``mean_t(-r_t)``, an estimate of ``KL(pi_rollout || pi_old)`` on the rollout's samples;
    * ``k3_kl``: ``mean_t(exp(r_t) - r_t - 1)`` (Schulman's k3: non-negative, lower variance);
    * ``training_ppl`` / ``rollout_ppl``: batch mean of the per-response perplexity ``exp(-lp)``; ``*_log_ppl``: of
      ``-lp``;
    * ``log_ppl_diff`` = mean of ``lp_rollout - lp_old`` (= ``log(training_ppl_i / rollout_ppl_i)``), with
      ``log_ppl_abs_diff``, ``log_ppl_diff_max``, ``log_ppl_diff_min``; ``ppl_ratio`` = mean of
      ``training_ppl_i / rollout_ppl_i`` (1: no gap; > 1: the trainer finds the samples less likely);
    * ``chi2_token`` = ``mean_t(exp(2 r_t)) - 1`` and ``chi2_seq`` = ``mean(exp(2 sum_t r_t)) - 1``: chi-square
      divergences, i.e. the variance of the token and sequence importance weights;
    * ``log_prob_abs_diff_mean`` / ``log_prob_abs_diff_max``: mean and max over tokens of ``|r_t|``.
    """
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    mask = response_mask.to(torch.float64)
    has_tokens = mask.sum(-1) > 0
    if not has_tokens.any():
        return {}
    old, rollout = old_log_prob.double(), rollout_log_prob.double()
    r = old - rollout
    r_safe = r.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    lp_old = verl_F.masked_mean(old, mask, axis=-1)[has_tokens]
    lp_rollout = verl_F.masked_mean(rollout, mask, axis=-1)[has_tokens]
    log_ppl_diff = lp_rollout - lp_old
    seq_r = verl_F.masked_sum(r, mask, axis=-1)[has_tokens].clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "kl": verl_F.masked_mean(-r, mask).item(),
        "k3_kl": verl_F.masked_mean(torch.exp(r_safe) - r_safe - 1, mask).item(),
        "log_prob_abs_diff_mean": verl_F.masked_mean(r.abs(), mask).item(),
        "log_prob_abs_diff_max": r.abs()[mask.bool()].max().item(),
        "training_ppl": torch.exp(-lp_old).mean().item(),
        "training_log_ppl": (-lp_old).mean().item(),
        "rollout_ppl": torch.exp(-lp_rollout).mean().item(),
        "rollout_log_ppl": (-lp_rollout).mean().item(),
        "log_ppl_diff": log_ppl_diff.mean().item(),
        "log_ppl_abs_diff": log_ppl_diff.abs().mean().item(),
        "log_ppl_diff_max": log_ppl_diff.max().item(),
        "log_ppl_diff_min": log_ppl_diff.min().item(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean().item(),
        "chi2_token": (verl_F.masked_mean(torch.exp(2 * r_safe), mask) - 1).item(),
        "chi2_seq": (torch.exp(2 * seq_r).mean() - 1).item(),
    }


@dataclass
class RolloutCorrection:
    """The result of :func:`compute_rollout_correction`: the truncated weights (``None`` without ``rollout_is``),
    the response mask after rejection and veto, and the metrics under ``rollout_corr/``."""

    rollout_is_weights: torch.Tensor | None
    response_mask: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def compute_rollout_correction(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float = RolloutCorrectionConfig.rollout_is_threshold,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    rollout_rs_threshold_lower: float | None = None,
    rollout_token_veto_threshold: float | None = None,
) -> RolloutCorrection:
    """Importance weights (``rollout_is``; TIS or IcePop by ``rollout_is_threshold``), rejection, token veto, and the
    mismatch metrics, all computed on the original ``response_mask``; the returned mask is the original one with the
    rejected and vetoed tokens zeroed.

    ``rollout_rs`` is either one of the earlier levels ``token``/``sequence``/``geometric`` (bounds
    ``[rollout_rs_threshold_lower, rollout_rs_threshold]`` on the weight; ``rollout_rs_threshold`` ``None`` ->
    the upper bound of ``rollout_is_threshold``) or upstream v0.9's comma-separated divergence options
    (``token_k1``, ``seq_mean_k1``, ``seq_max_k2``, ... with ``rollout_rs_threshold`` as in
    :func:`verl.algorithms.rollout_rejection.compute_rollout_rejection_mask`).
    """
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    metrics: dict[str, float] = {}
    weights = None
    if rollout_is is not None:
        weights, is_metrics = compute_is_weights(
            old_log_prob, rollout_log_prob, response_mask, rollout_is, rollout_is_threshold, rollout_is_batch_normalize
        )
        metrics.update(is_metrics)
    new_mask = response_mask
    if rollout_rs is not None:
        if rollout_rs in RS_LEVELS:
            upper = (
                parse_is_threshold(rollout_is_threshold)[0] if rollout_rs_threshold is None else rollout_rs_threshold
            )
            rs_mask, rs_metrics = compute_rejection_mask(
                old_log_prob, rollout_log_prob, response_mask, rollout_rs, float(upper), rollout_rs_threshold_lower
            )
        else:
            rs_mask, rs_metrics = compute_rollout_rejection_mask(
                (old_log_prob - rollout_log_prob).detach(), response_mask, rollout_rs, rollout_rs_threshold
            )
        new_mask = new_mask * rs_mask
        metrics.update(rs_metrics)
    if rollout_token_veto_threshold is not None:
        veto_mask, veto_metrics = compute_token_veto_mask(
            old_log_prob, rollout_log_prob, response_mask, rollout_token_veto_threshold
        )
        new_mask = new_mask * veto_mask
        metrics.update(veto_metrics)
    if rollout_rs is not None or rollout_token_veto_threshold is not None:
        mask_f = response_mask.to(torch.float64)
        metrics.update(_rejected_fractions(mask_f, new_mask.to(torch.float64), "total"))
    metrics.update(compute_mismatch_metrics(old_log_prob, rollout_log_prob, response_mask))
    return RolloutCorrection(weights, new_mask, {METRIC_PREFIX + k: v for k, v in metrics.items()})


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: str | float = RolloutCorrectionConfig.rollout_is_threshold,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Upstream's entry point (``rollout_corr_helper.compute_rollout_correction_weights``): the weights of
    :func:`compute_is_weights` from the log-ratio ``log pi_train - log pi_rollout`` ``[B, T]`` directly."""
    return compute_is_weights(
        log_ratio,
        torch.zeros_like(log_ratio),
        response_mask,
        rollout_is,
        rollout_is_threshold,
        rollout_is_batch_normalize,
    )


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float = RolloutCorrectionConfig.rollout_is_threshold,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """Upstream's unified entry point with its arguments: ``(rollout_is_weights [B, T] or None, response_mask after
    rejection, rollout_corr/* metrics)``. Upstream wraps the weights in a ``DataProto`` (key ``rollout_is_weights``);
    here they are the tensor itself."""
    result = compute_rollout_correction(
        old_log_prob,
        rollout_log_prob,
        response_mask,
        rollout_is=rollout_is,
        rollout_is_threshold=rollout_is_threshold,
        rollout_is_batch_normalize=rollout_is_batch_normalize,
        rollout_rs=rollout_rs,
        rollout_rs_threshold=rollout_rs_threshold,
    )
    return result.rollout_is_weights, result.response_mask, result.metrics


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
) -> dict[str, float]:
    """Upstream's name (``rollout_corr_helper.compute_offpolicy_metrics``): :func:`compute_mismatch_metrics`, or
    only ``training_ppl`` / ``training_log_ppl`` when there are no rollout log-probs. No prefix."""
    if rollout_log_prob is not None:
        return compute_mismatch_metrics(old_log_prob, rollout_log_prob, response_mask)
    mask = response_mask.to(torch.float64)
    has_tokens = mask.sum(-1) > 0
    if not has_tokens.any():
        return {}
    lp = verl_F.masked_mean(old_log_prob.double(), mask, axis=-1)[has_tokens]
    return {"training_ppl": torch.exp(-lp).mean().item(), "training_log_ppl": (-lp).mean().item()}


def compute_rollout_corr_metrics_from_logprobs(
    log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """Upstream's name: the mismatch metrics of the *current* policy against the rollout's, under ``rollout_corr/``."""
    metrics = compute_mismatch_metrics(log_prob, rollout_log_prob, response_mask)
    return {METRIC_PREFIX + k: v for k, v in metrics.items()}
