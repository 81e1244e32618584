"""FlowRL, reward-distribution matching with a trajectory-balance loss (Zhu et al., 2025, arXiv:2509.15207):
``actor_rollout_ref.actor.policy_loss.loss_mode=flowrl``, verl-recipe's ``flowrl`` recipe.

Instead of maximising the reward, FlowRL fits the policy to the distribution ``pi_ref(y|x) exp(beta r(x, y)) / Z(x)``
by driving each sampled response's trajectory-balance residual to zero:

    delta_i = log Z(x_i) + mean_t log pi(y_it) - beta * mean_t A_it - mean_t log pi_ref(y_it)
    w_i     = min(exp(sum_t (log pi(y_it) - log pi_old(y_it))), cap)          (no gradient)
    loss    = mean_i w_i * delta_i^2

The means run over a response's tokens (length-normalised log-probs, as the recipe), ``A`` is the advantage (GRPO's
group-normalised reward, the recipe's "log reward"), ``log Z(x)`` comes from the learned head of
:mod:`verl.models.log_z_head` on the prompt's mean hidden state, and ``w`` is the sequence-level importance weight
of a response sampled by an older policy (1 on an exactly on-policy update), capped at ``cap``. The recipe's
constants are the defaults: ``beta = 15`` (``policy_loss.flowrl_beta``), ``cap = 10``
(``policy_loss.flowrl_weight_cap``). One term per response: micro-batches are weighed into their mini-batch by rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from verl.algorithms.policy_loss import actor_config
from verl.algorithms.registry import register_policy_loss
from verl.sections.actor import ActorConfig
from verl.utils import torch_functional as verl_F


def trajectory_balance_residual(
    log_z: torch.Tensor,
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """``delta [bs]`` of the module docstring from ``log_z [bs]`` and the ``[bs, response_len]`` tensors."""
    mean_log_prob = verl_F.masked_mean(log_prob, response_mask, axis=1)
    mean_ref = verl_F.masked_mean(ref_log_prob, response_mask, axis=1)
    log_reward = verl_F.masked_mean(advantages, response_mask, axis=1)
    return log_z + mean_log_prob - beta * log_reward - mean_ref


@register_policy_loss("flowrl")
def compute_policy_loss_flowrl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
    log_z: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """FlowRL's loss of one micro-batch (module docstring), ``mean_i w_i delta_i^2``.

    Tensors ``[bs, response_len]``; ``log_z`` ``[bs]`` (or ``[bs, 1]``), the log Z head's output for each row's
    prompt, which the actor computes (``needs_log_z``). ``loss_agg_mode`` is not used: the loss is per response.
    Metrics (the recipe's): ``actor/log_z``, ``actor/log_reward``, ``actor/importance_weight``, ``actor/ref_kl``,
    ``actor/ppo_kl``, and ``actor/tb_residual_rms`` (the root mean square of ``delta``, 0 at the optimum).
    """
    del loss_agg_mode  # one term per response
    if rollout_is_weights is not None:
        raise ValueError(
            "loss_mode=flowrl weighs whole responses by its own capped importance weight: unset "
            "algorithm.rollout_correction.rollout_is"
        )
    if ref_log_prob is None or log_z is None:
        raise ValueError("loss_mode=flowrl needs ref_log_prob and log_z (the actor passes both)")
    cfg = actor_config(config)
    beta, cap = float(cfg.policy_loss.flowrl_beta), float(cfg.policy_loss.flowrl_weight_cap)
    mask = response_mask.to(log_prob.dtype)
    log_z = log_z.reshape(-1).to(log_prob.dtype)
    delta = trajectory_balance_residual(log_z, log_prob, ref_log_prob, advantages, mask, beta)
    log_ratio = ((log_prob - old_log_prob) * mask).sum(-1).detach()
    weight = torch.exp(log_ratio.clamp(max=math.log(cap)))  # = min(exp(log_ratio), cap), without overflow
    loss = (weight * delta.pow(2)).mean()
    metrics = {
        "actor/log_z": log_z.detach().mean(),
        "actor/log_reward": verl_F.masked_mean(advantages, mask).detach(),
        "actor/importance_weight": weight.mean(),
        "actor/ref_kl": verl_F.masked_mean(ref_log_prob - log_prob, mask).detach(),
        "actor/ppo_kl": verl_F.masked_mean(old_log_prob - log_prob, mask).detach(),
        "actor/tb_residual_rms": delta.detach().pow(2).mean().sqrt(),
    }
    return loss, metrics


compute_policy_loss_flowrl.needs_reference = True  # type: ignore[attr-defined]
compute_policy_loss_flowrl.needs_log_z = True  # type: ignore[attr-defined]
compute_policy_loss_flowrl.per_response = True  # type: ignore[attr-defined]
