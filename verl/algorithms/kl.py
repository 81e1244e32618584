"""KL penalty estimators and KL-coefficient controllers.

The estimators follow J. Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html):
with ``log r = ref_logprob - logprob`` sampled under the policy,
``k1 = -log r``, ``k2 = 0.5 (log r)^2``, ``k3 = (r - 1) - log r``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.algorithms.config import KLControlConfig
from verl.base_config import omega_conf_to_dataclass

KL_PENALTY_TYPES: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "k3+", "low_var_kl+")


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate ``[batch, response_len]`` between the policy and the reference (no straight-through).

    ``kl``/``k1``: ``logp - logp_ref``; ``abs``: ``|logp - logp_ref|``; ``mse``/``k2``: ``0.5 (logp - logp_ref)^2``;
    ``low_var_kl``/``k3``: ``exp(logp_ref - logp) - (logp_ref - logp) - 1``, log-ratio clamped to [-20, 20] and the
    result to [-10, 10] for stability. A trailing ``+`` is ignored here (see :func:`kl_penalty`).
    """
    mode = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty
    if mode in ("kl", "k1"):
        return logprob - ref_logprob
    if mode == "abs":
        return (logprob - ref_logprob).abs()
    if mode in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if mode in ("low_var_kl", "k3"):
        log_ratio = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)
        k3 = torch.exp(log_ratio) - log_ratio - 1.0
        return torch.clamp(k3, min=-10.0, max=10.0)
    raise ValueError(
        f"Unknown kl_penalty {kl_penalty!r} (algorithm.kl_penalty / actor.kl_loss_type); "
        f"choose one of {KL_PENALTY_TYPES}"
    )


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL penalty ``[batch, response_len]``; ``kl_penalty`` names the estimator.

    ``k1+`` and ``k3+`` (also ``low_var_kl+``) are straight-through: the forward value is k1 / k3, the gradient is
    that of k2, ``d/dlogp 0.5 (logp - logp_ref)^2 = logp - logp_ref``, which is an unbiased gradient of
    KL(pi || pi_ref) when the tokens are sampled from pi (k1 and k3 have biased gradients as losses).
    """
    forward = kl_penalty_forward(logprob, ref_logprob, kl_penalty)
    if not kl_penalty.endswith("+"):
        return forward
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + forward.detach()


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float
) -> torch.Tensor:
    """KL-shaped rewards ``r = scores - kl_ratio * (logp_old - logp_ref)``, all ``[batch, response_len]``."""
    return token_level_scores - (old_log_prob - ref_log_prob) * kl_ratio


class FixedKLController:
    """A constant KL coefficient: ``.value`` never changes."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (kept so fixed and adaptive controllers are interchangeable)."""


class AdaptiveKLController:
    """Proportional KL-coefficient control (Ziegler et al. 2019, "Fine-Tuning LMs from Human Preferences", sec. 2.2).

    ``e = clip(KL / target - 1, -0.2, 0.2)``; ``beta <- min(beta * (1 + e * n_steps / horizon), kl_coef_max)``.
    ``kl_coef_max`` (None: no cap) bounds how far a policy that keeps overshooting the target can push the
    coefficient up: past the cap the KL term would dominate the task reward.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int, kl_coef_max: float | None = None) -> None:
        if target_kl <= 0:
            raise ValueError(f"AdaptiveKLController: target_kl must be > 0, got {target_kl}")
        if horizon <= 0:
            raise ValueError(f"AdaptiveKLController: horizon must be > 0, got {horizon}")
        _check_cap(init_kl_coef, kl_coef_max, "AdaptiveKLController")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = horizon
        self.kl_coef_max = None if kl_coef_max is None else float(kl_coef_max)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move ``.value`` toward the coefficient that keeps ``current_kl`` at the target (``n_steps`` samples),
        never above ``kl_coef_max``."""
        error = float(np.clip(float(current_kl) / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon
        if self.kl_coef_max is not None:
            self.value = min(self.value, self.kl_coef_max)


def _check_cap(kl_coef: float, kl_coef_max: float | None, who: str) -> None:
    if kl_coef_max is None:
        return
    if kl_coef_max <= 0:
        raise ValueError(f"{who}: kl_coef_max must be > 0 (or None for no cap), got {kl_coef_max}")
    if kl_coef > kl_coef_max:
        raise ValueError(f"{who}: kl_coef={kl_coef} is above kl_coef_max={kl_coef_max}")


def get_kl_controller(kl_ctrl: KLControlConfig | Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller of ``algorithm.kl_ctrl`` (``type``: fixed | adaptive; ``kl_coef``, ``target_kl``,
    ``horizon``, ``kl_coef_max``: the adaptive coefficient's cap, None for none; a fixed ``kl_coef`` must not
    exceed it). A partial section (a dict, a DictConfig, ``None``) is completed from :class:`KLControlConfig`."""
    cfg = omega_conf_to_dataclass(kl_ctrl, KLControlConfig)
    ctrl_type, kl_coef, kl_coef_max = cfg.type, cfg.kl_coef, cfg.kl_coef_max
    if ctrl_type == "fixed":
        _check_cap(kl_coef, kl_coef_max, "algorithm.kl_ctrl")
        return FixedKLController(kl_coef=kl_coef)
    if ctrl_type == "adaptive":
        return AdaptiveKLController(
            init_kl_coef=kl_coef,
            target_kl=cfg.target_kl,
            horizon=cfg.horizon,
            kl_coef_max=kl_coef_max,
        )
    raise ValueError(f"Unknown algorithm.kl_ctrl.type {ctrl_type!r}; choose 'fixed' or 'adaptive'")
