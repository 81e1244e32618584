"""SPO, Single-stream Policy Optimization (Xu & Ding 2025, arXiv:2509.13232), as verl-recipe's ``spo`` trains it.

SPO drops the group of GRPO: one response per prompt, and the baseline is a persistent per-prompt estimate of the
success probability, tracked across the whole run by a discounted Beta posterior:

    p_hat(x) = alpha(x) / (alpha(x) + beta(x))                             the prompt's value before this step
    A_i      = r_i - p_hat(x_i),  then normalised over the batch: (A - mean A) / (std A + 1e-8)
    alpha(x) <- rho(x) alpha(x) + r,   beta(x) <- rho(x) beta(x) + (1 - r)   after the step's update

with ``r`` in [0, 1] the response's summed reward. ``rho`` forgets old evidence: a constant, or (the recipe's
default) adapted to how far the policy moved since the prompt was last seen,

    D(x)   = mean_t |log pi_then(y_t) - log pi_now(y_t)|     over the prompt's previous response y (its mask)
    rho(x) = clip(2 ** (-D / 0.06), clip_lower, 0.96)         (first visit: D = 0, so rho = 0.96)

The prior comes from offline samples of the base policy (``offline_N`` binary scores per prompt; ``N0 = 1 / (1 -
clip_lower)`` is the steady-state evidence of the discounted tracker): ``alpha = N0 (s + 1/2) / (n + 1)``, ``beta =
N0 (n - s + 1/2) / (n + 1)`` for ``s`` successes of ``n`` scores; a prompt without offline scores starts at the
Jeffreys prior ``alpha = beta = 1/2``. Prompts are drawn by priority ``sqrt(p_hat (1 - p_hat)) + 0.05``, which
favours prompts the policy solves about half the time (the most informative ones).

This module holds the tracker and the formulas; the driver's part (which prompts, the log-prob passes for ``D``,
the checkpoint) is :mod:`verl.trainer.ppo.spo_driver`.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from verl.algorithms.registry import register_adv_est

__all__ = [
    "EXPLORATION_EPSILON",
    "SPOValueTracker",
    "compute_spo_advantage",
    "kl_discount",
    "load_offline_scores",
    "policy_drift",
    "priority_weights",
]

#: added to every prompt's priority, so prompts the policy always (or never) solves are still drawn now and then
EXPLORATION_EPSILON = 0.05
#: the policy drift (mean absolute log-prob change) that halves the old evidence of a prompt (the recipe's D_half)
KL_HALF_LIFE = 0.06
#: the largest discount: even an unchanged policy forgets a little (the recipe's upper clip)
RHO_MAX = 0.96


def priority_weights(p_hat: np.ndarray, epsilon: float = EXPLORATION_EPSILON) -> np.ndarray:
    """Sampling priority of each prompt, ``sqrt(p_hat (1 - p_hat)) + epsilon`` (``[prompts]`` in and out): the
    Bernoulli standard deviation of its outcome, largest at ``p_hat = 1/2``."""
    p = np.clip(np.asarray(p_hat, dtype=np.float64), 0.0, 1.0)
    return np.sqrt(p * (1.0 - p)) + float(epsilon)


def policy_drift(
    then_log_probs: torch.Tensor, now_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """How far the policy moved on a response, ``D = masked mean_t |then - now|`` (module docstring). All inputs
    ``[rows, response_len]``; returns ``[rows]`` float64 (a row with no response token: 0)."""
    mask = response_mask.to(torch.float64)
    diff = (then_log_probs.double() - now_log_probs.double()).abs() * mask
    return diff.sum(-1) / mask.sum(-1).clamp(min=1.0)


def kl_discount(drift: np.ndarray, clip_lower: float) -> tuple[np.ndarray, np.ndarray]:
    """SPO's adaptive discount from the drift ``D`` (``[rows]``): ``rho = 2 ** (-D / 0.06)``; returns ``(rho,
    clip(rho, clip_lower, 0.96))``."""
    raw = np.power(2.0, -np.asarray(drift, dtype=np.float64) / KL_HALF_LIFE)
    return raw, np.clip(raw, float(clip_lower), RHO_MAX)


@register_adv_est("spo")
def compute_spo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    spo_values: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SPO's advantage (module docstring): ``A_i = r_i - p_hat_i`` with ``r_i`` the summed token rewards and
    ``p_hat_i = spo_values[i]`` (the driver's tracker value of row ``i``'s prompt, ``[batch]``), normalised by the
    mean and standard deviation over the rows that hold a response (padding rows of an agent loop's segments take
    no part), then put on every response token. ``[batch, response_len]`` in and out; returns ``(advantages,
    advantages)`` (the returns are the advantages, as the recipe sets them)."""
    if spo_values is None:
        raise ValueError(
            "algorithm.adv_estimator=spo needs each row's prompt value (the batch column spo_values), which the PPO "
            "driver's SPO tracker attaches; it cannot run on a batch that did not come through it"
        )
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).double()
        centred = scores - spo_values.to(scores)
        real = response_mask.sum(-1) > 0
        if int(real.sum()) > 1:
            kept = centred[real]
            centred = (centred - kept.mean()) / (kept.std() + 1e-8)
        else:  # one row: nothing to normalise against (the recipe's std would be nan)
            centred = centred - centred[real].mean() if bool(real.any()) else centred
        advantages = centred.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return advantages, advantages


def load_offline_scores(path: str) -> dict[str, list[float]]:
    """The recipe's offline values file (``merge_offline_values.py``): a JSON object mapping each prompt to a list
    of scores of the base policy's responses. Errors name the file and the prompt."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"algorithm.spo.offline_values={path}: no such file")
    with open(path, encoding="utf-8") as fh:
        try:
            raw = json.load(fh)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err}); SPO's offline values are {{prompt: [scores]}}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: SPO's offline values are a JSON object {{prompt: [scores]}}, not a {type(raw)}")
    scores: dict[str, list[float]] = {}
    for prompt, values in raw.items():
        if not isinstance(values, list) or not all(isinstance(v, (int, float)) for v in values):
            raise ValueError(f"{path}: prompt {prompt[:80]!r}: the scores must be a list of numbers, got {values!r}")
        scores[prompt.strip()] = [float(v) for v in values]
    return scores


class SPOValueTracker:
    """Each prompt's discounted Beta posterior of success (module docstring): ``alpha``, ``beta`` and how often it
    was trained on, keyed by the prompt's text. Prompts never seen and without offline scores sit at the Jeffreys
    prior ``(1/2, 1/2)``."""

    PRIOR = 0.5

    def __init__(self) -> None:
        self.alpha: dict[str, float] = {}
        self.beta: dict[str, float] = {}
        self.visits: dict[str, int] = {}

    @classmethod
    def from_offline(
        cls, scores: Mapping[str, Sequence[float]], offline_n: int, clip_lower: float, seed: int = 0
    ) -> SPOValueTracker:
        """The prior from offline scores (module docstring): each score counts as a success when ``> 0`` (the
        recipe's rule); a prompt with more than ``offline_n`` scores keeps a random ``offline_n`` of them (drawn
        with ``seed``); ``offline_n = 0`` ignores the scores (every prompt at the Jeffreys prior). Where a prompt has
        fewer scores than ``offline_n``, its own count is the ``n`` of the formula (the recipe divides by
        ``offline_n`` whatever the count, which biases such prompts towards failure)."""
        tracker = cls()
        if offline_n <= 0:
            return tracker
        weight = 1.0 / (1.0 - float(clip_lower))
        rng = random.Random(seed)
        for prompt in sorted(scores):
            wins = [int(s > 0) for s in scores[prompt]]
            if len(wins) > offline_n:
                wins = rng.sample(wins, offline_n)
            n, s = len(wins), sum(wins)
            if n == 0:
                continue
            tracker.alpha[prompt] = weight * (s + 0.5) / (n + 1)
            tracker.beta[prompt] = weight * (n - s + 0.5) / (n + 1)
        return tracker

    def __len__(self) -> int:
        return len(self.alpha)

    def posterior(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(alpha, beta)`` of each prompt, ``[prompts]`` float64."""
        alpha = np.array([self.alpha.get(p, self.PRIOR) for p in prompts], dtype=np.float64)
        beta = np.array([self.beta.get(p, self.PRIOR) for p in prompts], dtype=np.float64)
        return alpha, beta

    def values(self, prompts: Sequence[str]) -> np.ndarray:
        """``p_hat = alpha / (alpha + beta)`` of each prompt, ``[prompts]`` float64."""
        alpha, beta = self.posterior(prompts)
        return alpha / (alpha + beta)

    def update(self, prompts: Sequence[str], rewards: Sequence[float], rho: Mapping[str, float]) -> None:
        """Fold one step's outcomes in: per prompt, ``alpha <- rho alpha + sum r``, ``beta <- rho beta + sum (1 -
        r)`` over that prompt's rows of the step (one row with the recipe's ``n = 1``), ``rho[prompt]`` its discount.
        Rewards must lie in [0, 1] (a success probability is tracked): others raise ValueError naming the row."""
        wins: dict[str, float] = {}
        rows: dict[str, int] = {}
        for i, (prompt, r) in enumerate(zip(prompts, rewards)):
            r = float(r)
            if not (0.0 <= r <= 1.0) or math.isnan(r):
                raise ValueError(
                    f"SPO tracks each prompt's success probability, so a response's reward must lie in [0, 1]: row "
                    f"{i} (prompt {prompt[:60]!r}) scored {r}; map the reward into [0, 1] (e.g. (r + 1) / 2 for -1/1)"
                )
            wins[prompt] = wins.get(prompt, 0.0) + r
            rows[prompt] = rows.get(prompt, 0) + 1
        alpha, beta = self.posterior(list(wins))
        for j, prompt in enumerate(wins):
            discount = float(rho[prompt])
            self.alpha[prompt] = discount * float(alpha[j]) + wins[prompt]
            self.beta[prompt] = discount * float(beta[j]) + rows[prompt] - wins[prompt]
            self.visits[prompt] = self.visits.get(prompt, 0) + 1

    def state_dict(self) -> dict[str, Any]:
        """Plain lists: the prompts and their ``alpha``, ``beta`` and visit counts (float64 exact through JSON or
        ``torch.save``)."""
        prompts = sorted(set(self.alpha) | set(self.visits))
        return {
            "prompts": prompts,
            "alpha": [self.alpha.get(p, self.PRIOR) for p in prompts],
            "beta": [self.beta.get(p, self.PRIOR) for p in prompts],
            "visits": [self.visits.get(p, 0) for p in prompts],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        prompts = list(state["prompts"])
        self.alpha = {p: float(a) for p, a in zip(prompts, state["alpha"])}
        self.beta = {p: float(b) for p, b in zip(prompts, state["beta"])}
        self.visits = {p: int(v) for p, v in zip(prompts, state["visits"]) if int(v) > 0}
