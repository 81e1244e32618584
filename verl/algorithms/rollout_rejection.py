"""Upstream verl v0.9's rollout-correction threshold specs and divergence-based rejection sampling.

Upstream source: ``verl/trainer/ppo/rollout_corr_helper.py`` (``_parse_rollout_is_threshold``,
``_parse_rollout_rs_thresholds``, ``compute_rollout_rejection_mask``) and the presets of
``verl/trainer/config/algorithm.py`` (``RolloutCorrectionConfig.decoupled_geo_rs`` etc.). Reference: Liu, Li, Fu,
Wang, Liu, Shen (2025), "When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference
Mismatch", https://richardli.xyz/rl-collapse.

With ``log r_t = log pi_train(y_t) - log pi_rollout(y_t)`` (clamped to ``[-20, 20]``) on the valid tokens, three
per-token divergence estimators of ``KL(pi_rollout || pi_train)``:

* ``k1 = -log r`` (signed; its thresholds are ratio bounds ``lower_upper`` compared as ``log lower <= k1 <= log
  upper``),
* ``k2 = (log r)^2 / 2`` and ``k3 = r - 1 - log r`` (non-negative; one upper bound).

A rejection option ``<level>_<estimator>`` aggregates them: ``token_k*`` per token, ``seq_sum_k*`` the sum over the
response, ``seq_mean_k*`` the mean (``seq_mean_k1`` is the geometric-mean filter: ``exp(-seq_mean_k1)`` is the
geometric mean of the token ratios), ``seq_max_k2``/``seq_max_k3`` the largest token value. A token (or a whole
response, for ``seq_*``) outside the bounds is rejected: its ``response_mask`` entry becomes 0. Several options,
comma-separated (``"token_k1,seq_max_k2"``), must all pass.
"""

from __future__ import annotations

import math

import torch

from verl.utils import torch_functional as verl_F

SAFETY_BOUND = 20.0
ROLLOUT_RS_OPTIONS: tuple[str, ...] = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)


def parse_is_threshold(spec: str | float | int) -> tuple[float, float | None]:
    """``algorithm.rollout_correction.rollout_is_threshold`` as ``(upper, lower)``.

    A number (or a number as a string) is a truncation bound (TIS: ``w = min(w, upper)``, ``lower`` is ``None``);
    ``"lower_upper"`` (e.g. ``"0.5_5.0"``) asks for IcePop: weights outside ``[lower, upper]`` become 0 and the
    rest stay as they are. Both bounds must be positive and ``lower <= upper``.
    """
    if isinstance(spec, bool):
        raise TypeError(f"rollout_is_threshold={spec!r}: a number or a 'lower_upper' string, not a boolean")
    if not isinstance(spec, str | float | int):
        raise ValueError(
            f"rollout_is_threshold={spec!r}: expected a number or a 'lower_upper' string such as '0.5_5.0'"
        )
    text = str(spec).strip()
    try:
        if "_" in text:
            lower_text, upper_text = text.split("_", 1)
            lower, upper = float(lower_text), float(upper_text)
        else:
            lower, upper = None, float(text)
    except ValueError as exc:
        raise ValueError(f"rollout_is_threshold={spec!r} is not a number nor a 'lower_upper' pair") from exc
    if not upper > 0:
        raise ValueError(f"rollout_is_threshold={spec} must be > 0")
    if lower is not None and not 0 < lower <= upper:
        raise ValueError(f"rollout_is_threshold={spec!r}: IcePop bounds 'lower_upper' need 0 < lower <= upper")
    return upper, lower


def parse_rs_options(rollout_rs: str) -> list[str]:
    """The distinct options of a comma-separated ``rollout_rs`` string, in order; unknown ones raise ValueError."""
    options: list[str] = []
    for part in str(rollout_rs).split(","):
        name = part.strip()
        if not name:
            continue
        if name not in ROLLOUT_RS_OPTIONS:
            raise ValueError(f"rollout_rs option {name!r} is not one of {list(ROLLOUT_RS_OPTIONS)}")
        if name not in options:
            options.append(name)
    if not options:
        raise ValueError(f"rollout_rs={rollout_rs!r} names no option; expected e.g. 'seq_mean_k1'")
    return options


def parse_rs_thresholds(options: list[str], spec: str | float | int | None) -> dict[str, tuple[float | None, float]]:
    """Per-option ``(lower, upper)`` bounds from ``rollout_rs_threshold``.

    One entry per option, comma-separated, or one entry shared by all. A ``*_k1`` option takes ratio bounds
    ``"lower_upper"``, or a single upper bound whose reciprocal is the lower one; ``k2``/``k3`` options take a single
    positive upper bound (``lower`` is ``None``).
    """
    if spec is None:
        raise ValueError("rollout_rs_threshold is required when rollout_rs is set (e.g. '0.999_1.001' or 0.01)")
    if isinstance(spec, bool):
        raise ValueError(f"rollout_rs_threshold={spec!r}: expected numbers, not a boolean")
    entries = [e.strip() for e in str(spec).split(",") if e.strip()]
    if len(entries) not in (1, len(options)):
        raise ValueError(
            f"rollout_rs_threshold={spec!r} has {len(entries)} entries for {len(options)} rollout_rs options "
            f"{options}: give one shared entry or one per option"
        )
    entries = entries * len(options) if len(entries) == 1 else entries
    bounds: dict[str, tuple[float | None, float]] = {}
    for option, entry in zip(options, entries):
        try:
            if option.endswith("k1"):
                if "_" in entry:
                    lower_text, upper_text = entry.split("_", 1)
                    lower, upper = float(lower_text), float(upper_text)
                else:
                    upper = float(entry)
                    lower = 1.0 / upper if upper > 0 else -1.0
                if not (lower > 0 and upper > 0 and lower <= upper):
                    raise ValueError("bounds must be positive with lower <= upper")
                bounds[option] = (lower, upper)
            else:
                if "_" in entry:
                    raise ValueError("a k2/k3 option takes one upper bound, not 'lower_upper'")
                upper = float(entry)
                if not upper > 0:
                    raise ValueError("the bound must be positive")
                bounds[option] = (None, upper)
        except ValueError as exc:
            raise ValueError(f"rollout_rs_threshold entry {entry!r} for {option}: {exc}") from exc
    return bounds


def _token_divergence(log_ratio: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token ``k1``/``k2``/``k3`` of the (clamped) log-ratio ``[B, T]``."""
    lr = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    if estimator == "k1":
        return -lr
    if estimator == "k2":
        return 0.5 * lr.square()
    return torch.exp(lr) - 1.0 - lr


def rs_statistic(log_ratio: torch.Tensor, response_mask: torch.Tensor, option: str) -> torch.Tensor:
    """The statistic ``option`` thresholds: ``[B, T]`` for ``token_*``, ``[B, 1]`` for ``seq_*`` (0 for a response
    with no valid token)."""
    level, estimator = option.rsplit("_", 1)
    values = _token_divergence(log_ratio, estimator)
    if level == "token":
        return values
    if level == "seq_sum":
        return verl_F.masked_sum(values, response_mask, axis=-1).unsqueeze(-1)
    if level == "seq_mean":
        return verl_F.masked_mean(values, response_mask, axis=-1).unsqueeze(-1)
    masked = values.masked_fill(~response_mask.bool(), float("-inf")).amax(dim=-1, keepdim=True)
    return torch.where(torch.isinf(masked), torch.zeros_like(masked), masked)


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_rs: str = "token_k1",
    rollout_rs_threshold: str | float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` ``[B, T]`` with the tokens / responses failing any ``rollout_rs`` option zeroed, and metrics.

    ``log_ratio`` is ``log pi_train - log pi_rollout`` ``[B, T]``. ``k1`` options keep ``log lower <= stat <= log
    upper``; ``k2``/``k3`` keep ``stat <= upper`` (see the module docstring). Upstream's function of the same name and
    arguments. Metrics (no prefix) per option: ``rollout_rs_<option>_{mean,max,min}`` of the statistic (over valid
    tokens, or responses for ``seq_*``), ``_fraction_high``/``_fraction_low`` (outside the upper / lower bound),
    ``_masked_fraction`` (valid tokens it rejects) and ``_seq_masked_fraction`` (responses it touches); overall
    ``rollout_rs_masked_fraction`` and ``rollout_rs_seq_masked_fraction``.
    """
    options = parse_rs_options(rollout_rs)
    bounds = parse_rs_thresholds(options, rollout_rs_threshold)
    mask = response_mask.to(log_ratio.dtype)
    valid = mask.bool()
    has_tokens = valid.any(dim=-1)
    keep_all = torch.ones_like(mask)
    metrics: dict[str, float] = {}
    for option in options:
        lower, upper = bounds[option]
        stat = rs_statistic(log_ratio.detach(), mask, option)
        if option.endswith("k1"):
            lo, hi = math.log(lower), math.log(upper)
            keep = (stat >= lo) & (stat <= hi)
        else:
            lo, hi = None, upper
            keep = stat <= hi
        keep = keep.expand_as(mask)
        units = stat[valid] if stat.shape[-1] == mask.shape[-1] else stat[:, 0][has_tokens]
        prefix = f"rollout_rs_{option}"
        if units.numel() > 0:
            metrics[f"{prefix}_mean"] = units.mean().item()
            metrics[f"{prefix}_max"] = units.max().item()
            metrics[f"{prefix}_min"] = units.min().item()
            metrics[f"{prefix}_fraction_high"] = (units > hi).double().mean().item()
            metrics[f"{prefix}_fraction_low"] = 0.0 if lo is None else (units < lo).double().mean().item()
            rejected = (~keep) & valid
            metrics[f"{prefix}_masked_fraction"] = (rejected.sum() / valid.sum()).item()
            metrics[f"{prefix}_seq_masked_fraction"] = rejected.any(-1)[has_tokens].double().mean().item()
        keep_all = keep_all * keep.to(mask.dtype)
    new_mask = mask * keep_all
    if valid.any():
        rejected_all = valid & (new_mask == 0)
        metrics["rollout_rs_masked_fraction"] = (rejected_all.sum() / valid.sum()).item()
        metrics["rollout_rs_seq_masked_fraction"] = rejected_all.any(-1)[has_tokens].double().mean().item()
    return new_mask.to(response_mask.dtype), metrics
