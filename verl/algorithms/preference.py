"""The DPO family's loss on preference pairs (sequence log-probs of a chosen and a rejected response under the policy
and a reference): one implementation for the offline ``DPOTrainer`` and the online ``loss_mode=online_dpo``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["DPO_LOSS_TYPES", "dpo_loss"]

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair DPO-family losses and implicit rewards; all inputs are sequence log-probs of shape ``[batch]``.

    With ``h = (log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))``:

    - ``sigmoid`` (DPO, Rafailov et al. 2023): ``-(1 - eps) log sigma(beta h) - eps log sigma(-beta h)``, where
      ``eps = label_smoothing`` is the conservative-DPO flip rate (0 gives plain DPO).
    - ``ipo`` (Azar et al. 2023): ``(h - 1 / (2 beta))^2``.
    - ``hinge`` (SLiC, Zhao et al. 2023): ``relu(1 - beta h)``.

    Returns:
        ``(losses, chosen_rewards, rejected_rewards)``, each ``[batch]``; the rewards are
        ``beta * (log pi - log ref)`` of the chosen / rejected response, detached.
    """
    if beta <= 0:
        raise ValueError(f"dpo_loss: beta must be > 0, got {beta}")
    chosen_ratio = policy_chosen_logps - ref_chosen_logps
    rejected_ratio = policy_rejected_logps - ref_rejected_logps
    h = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * h) * (1.0 - label_smoothing) - F.logsigmoid(-beta * h) * label_smoothing
    elif loss_type == "ipo":
        losses = (h - 1.0 / (2.0 * beta)) ** 2
    elif loss_type == "hinge":
        losses = torch.relu(1.0 - beta * h)
    else:
        raise ValueError(f"dpo_loss: unknown loss_type {loss_type!r}; expected one of {list(DPO_LOSS_TYPES)}")
    return losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
