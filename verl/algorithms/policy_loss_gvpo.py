"""GVPO, Group Variance Policy Optimization (Zhang et al., NeurIPS 2025, arXiv:2504.19599): ``loss_mode=gvpo``.

GVPO's objective is ``max E[R(x, y)] - beta * KL(pi_theta || pi_theta')``, whose optimum is unique; it is reached
by regressing, within each prompt's group of ``k`` responses, the centred implicit reward of the policy onto the
centred reward:

    R_theta(x, y_i) = beta * (log pi_theta(y_i | x) - log pi_theta'(y_i | x))      (sums over the response tokens)
    l_i = 1/2 * ((R_theta_i - mean_group R_theta) - (R_i - mean_group R))^2 / (k - 1)

with ``pi_theta'`` the policy that sampled (``old_log_probs``) and ``R_i - mean_group R`` the response's advantage
(GRPO's with ``algorithm.norm_adv_by_std_in_grpo=false``, averaged over its tokens). There is no probability ratio
and no clip, hence no importance weights. The group mean of ``R_theta`` is taken without gradient, as in the
recipe; the gradient is the same either way, because the residuals of a group sum to zero.

Every response's group must be whole in its micro-batch (the mean is over the group): the actor orders a rank's
rows group by group and gives this loss each row's ``group_index`` and ``group_size``; the config checks ask for
micro-batches of whole groups (verl/trainer/config/algorithm_checks.py).

Scale: as verl-recipe's ``gvpo`` actor, the loss of a micro-batch is the sum of its ``l_i`` and the micro-batches
of a mini-batch are averaged, i.e. ``ppo_micro_batch_size_per_gpu`` times the mini-batch's mean ``l_i``; the
recipe's learning rate and ``grad_clip`` therefore carry over. (So the micro-batch size scales this loss, and how
often ``grad_clip`` acts; keep the recipe's value to reproduce its runs.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from verl.algorithms.policy_loss import actor_config
from verl.algorithms.registry import register_policy_loss
from verl.sections.actor import ActorConfig


def whole_group_positions(group_index: torch.Tensor, group_size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(position, count)``: each row's group as a position ``[bs]`` among this micro-batch's groups, and the rows
    ``[num_groups]`` of each. Raises ValueError unless every group present is whole (``count == group_size``)."""
    _, position, count = torch.unique(group_index, return_inverse=True, return_counts=True)
    # every row of a group carries the group's size, so any row's value may land in its slot
    size = torch.zeros_like(count).scatter_(0, position, group_size.to(count.dtype))
    if not torch.equal(count, size):
        bad = int((count != size).nonzero()[0, 0])
        raise ValueError(
            f"loss_mode=gvpo: a micro-batch holds {int(count[bad])} of the {int(size[bad])} responses of a prompt "
            "group; GVPO centres each group over all its responses, so micro-batches must hold whole groups "
            "(ppo_micro_batch_size_per_gpu a multiple of rollout.n, use_dynamic_bsz=false, shuffle=false)"
        )
    return position, count


@register_policy_loss("gvpo")
def compute_policy_loss_gvpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    group_size: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """GVPO's loss of one micro-batch (module docstring): ``ppo_micro_batch_size_per_gpu * mean_i l_i``.

    Tensors ``[bs, response_len]``; ``group_index`` ``[bs]`` (any ids, equal within a prompt group) and
    ``group_size`` ``[bs]`` (responses in the row's group). ``beta`` is ``actor.gvpo_beta`` (the recipe's key).
    ``loss_agg_mode`` is not used: the loss is per response. Metrics: ``actor/gvpo_residual_rms``, the root mean
    square of the bracket in ``l_i`` (0 at GVPO's optimum).
    """
    del loss_agg_mode  # the loss is one term per response
    if rollout_is_weights is not None:
        raise ValueError(
            "loss_mode=gvpo has no probability ratio to correct: unset algorithm.rollout_correction.rollout_is"
        )
    if group_index is None or group_size is None:
        raise ValueError("loss_mode=gvpo needs each row's group_index and group_size (the actor adds them from uid)")
    cfg = actor_config(config)
    mask = response_mask.to(log_prob.dtype)
    implicit = float(cfg.gvpo_beta) * ((log_prob - old_log_prob) * mask).sum(-1)  # R_theta, [bs]
    reward_dev = (advantages * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)  # R_i - mean R, [bs]
    position, count = whole_group_positions(group_index, group_size)
    group_mean = torch.zeros(count.shape, dtype=implicit.dtype, device=implicit.device)
    group_mean = group_mean.index_add_(0, position, implicit.detach()) / count.to(implicit.dtype)
    residual = (implicit - group_mean[position]) - reward_dev
    per_response = 0.5 * residual.pow(2) / (group_size.to(residual.dtype) - 1.0).clamp_min(1.0)
    micro = cfg.ppo_micro_batch_size_per_gpu
    scale = float(micro) if micro is not None else float(per_response.numel())
    pg_loss = per_response.mean() * scale
    return pg_loss, {"actor/gvpo_residual_rms": residual.detach().pow(2).mean().sqrt()}


compute_policy_loss_gvpo.needs_groups = True  # type: ignore[attr-defined]
compute_policy_loss_gvpo.per_response = True  # type: ignore[attr-defined]
