"""Online DPO (``loss_mode=online_dpo``): DPO on pairs the policy generates during training, as verl-recipe's SPIN
trains (Chen et al. 2024, arXiv:2401.01335, with the DPO loss of Rafailov et al. 2023, arXiv:2305.18290; Guo et al.
2024, arXiv:2402.04792; TRL's ``OnlineDPOTrainer`` is the same idea).

Each prompt's responses form a group (``rollout.n >= 2``); its best response by advantage (the reward ranking, as
the advantage is the reward centred within the group) is *chosen* and its worst *rejected*. With sequence log-probs
``log pi(y) = sum_t log pi(y_t | ...)`` and the reference policy's ``log pi_ref`` (``ref_log_prob``):

    z = (log pi(y_c) - log pi(y_r)) - (log pi_ref(y_c) - log pi_ref(y_r))
    sigmoid: l = -(1 - eps) log sigma(beta z) - eps log sigma(-beta z)        (eps = dpo_label_smoothing)
    ipo:     l = (z - 1 / (2 beta))^2                                         (Azar et al. 2023, arXiv:2310.12036)
    hinge:   l = relu(1 - beta z)                                             (SLiC, Zhao et al. 2023)

(:func:`verl.algorithms.preference.dpo_loss`, the offline ``DPOTrainer``'s loss too).
``beta = actor.dpo_beta``. The loss of a micro-batch is the mean over its pairs; a group whose responses all score
the same has no preference and gives no pair (verl-recipe's SPIN would prefer its first response). Micro-batches hold
whole groups and are weighed by rows, as for ``gvpo``. ``trainer.ref_update_freq`` refreshes the reference from the
policy every so many steps (SPIN's iterations; TR-DPO's hard update).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from verl.algorithms.policy_loss import actor_config
from verl.algorithms.policy_loss_gvpo import whole_group_positions
from verl.algorithms.preference import dpo_loss
from verl.algorithms.registry import register_policy_loss
from verl.sections.actor import ActorConfig


def preference_pairs(scores: torch.Tensor, position: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(chosen, rejected)`` row indices ``[pairs]``: per group (``position`` ``[bs]`` in ``0..groups-1``) the first
    row with the highest and the first with the lowest ``scores`` ``[bs]``; groups whose scores are all equal give
    no pair."""
    rows = torch.arange(scores.numel(), device=scores.device)
    best = torch.full((groups,), -1, dtype=torch.long, device=scores.device)
    worst = torch.full((groups,), -1, dtype=torch.long, device=scores.device)
    for g in range(groups):  # groups per micro-batch are few; a loop keeps "first of equals" plain
        members = rows[position == g]
        values = scores[members]
        if values.max() > values.min():
            best[g] = members[torch.argmax(values)]
            worst[g] = members[torch.argmin(values)]
    kept = best >= 0
    return best[kept], worst[kept]


@register_policy_loss("online_dpo")
def compute_policy_loss_online_dpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | Mapping[str, Any] | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    group_size: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Online DPO on a micro-batch of whole groups (module docstring): the mean loss over its preference pairs.

    Tensors ``[bs, response_len]``; ``group_index`` / ``group_size`` ``[bs]``; ``ref_log_prob`` the reference
    policy's token log-probs. ``old_log_prob`` and ``loss_agg_mode`` are not used (DPO compares with the reference,
    one term per pair). Metrics (verl-recipe's names): ``actor/dpo_logits`` (mean ``beta z``),
    ``actor/chosen_logps`` / ``actor/rejected_logps`` (mean sequence log-probs), ``actor/dpo_accuracy`` (share of
    pairs with ``z > 0``), ``actor/dpo_tied_frac`` (share of groups without a preference).
    """
    del old_log_prob, loss_agg_mode  # compared with the reference; one term per pair
    if rollout_is_weights is not None:
        raise ValueError("loss_mode=online_dpo takes no importance weights: unset algorithm.rollout_correction")
    if group_index is None or group_size is None or ref_log_prob is None:
        raise ValueError("loss_mode=online_dpo needs each row's group_index, group_size and ref_log_prob")
    cfg = actor_config(config)
    beta, smoothing = float(cfg.dpo_beta), float(cfg.dpo_label_smoothing)
    mask = response_mask.to(log_prob.dtype)
    position, count = whole_group_positions(group_index, group_size)
    score = (advantages * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
    chosen, rejected = preference_pairs(score.detach(), position, int(count.numel()))
    policy = (log_prob * mask).sum(-1)
    reference = (ref_log_prob.to(log_prob.dtype) * mask).sum(-1)
    losses, chosen_reward, rejected_reward = dpo_loss(
        policy[chosen], policy[rejected], reference[chosen], reference[rejected], beta, cfg.dpo_loss_type, smoothing
    )
    z = (chosen_reward - rejected_reward) / beta  # the reference margin, detached
    # no pair here: a zero that still reaches every parameter, so the ranks' backward passes line up
    loss = losses.mean() if losses.numel() else (policy * 0.0).sum()
    metrics: dict[str, Any] = {"actor/dpo_tied_frac": 1.0 - losses.numel() / max(int(count.numel()), 1)}
    if losses.numel():
        metrics.update(
            {
                "actor/dpo_logits": (beta * z).mean(),
                "actor/chosen_logps": policy[chosen].detach().mean(),
                "actor/rejected_logps": policy[rejected].detach().mean(),
                "actor/dpo_accuracy": (z > 0).float().mean(),
            }
        )
    return loss, metrics


compute_policy_loss_online_dpo.needs_groups = True  # type: ignore[attr-defined]
compute_policy_loss_online_dpo.per_response = True  # type: ignore[attr-defined]
compute_policy_loss_online_dpo.needs_reference = True  # type: ignore[attr-defined]
