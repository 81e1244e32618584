"""Distillation from a teacher model: the losses and the dense per-token reward, as pure tensor functions.

- :func:`generalized_jsd_loss`: the generalised Jensen-Shannon divergence of GKD (R. Agarwal et al., "On-Policy
  Distillation of Language Models: Learning from Self-Generated Mistakes", ICLR 2024, arXiv:2306.13649) with TRL's
  convention for ``beta`` (``trl.GKDTrainer``): the mixture is ``M = beta * P_teacher + (1 - beta) * P_student`` and
  ``JSD_beta = beta * KL(P_teacher || M) + (1 - beta) * KL(P_student || M)``; ``beta = 0`` is the forward KL
  ``KL(P_teacher || P_student)`` and ``beta = 1`` the reverse KL ``KL(P_student || P_teacher)``.
- :func:`reverse_kl_token_rewards`: on-policy distillation's dense reward, ``r_t = -coef * (log pi_student(y_t) -
  log pi_teacher(y_t))`` on the tokens the student sampled (a one-sample estimate of the per-token reverse KL).
- :func:`reverse_kl_pg_loss`: that reward used directly as a per-token advantage in a REINFORCE loss (no critic, no
  discounting), whose gradient is an unbiased estimate of the gradient of the per-token reverse KL.

All tensors are ``[batch, response_len]`` (per-token values) or ``[batch, response_len, vocab]`` (logits), with a
``mask`` of the same leading shape that is 1 on response tokens.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def generalized_jsd_per_token(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    beta: float = 0.5,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Per-token generalised JSD between the student's and the teacher's next-token distributions.

    Args:
        student_logits: ``[batch, seq, vocab]``.
        teacher_logits: ``[batch, seq, vocab]`` (the same vocabulary; no gradient flows into it).
        beta: mixture weight of the teacher, in [0, 1]; 0 gives ``KL(teacher || student)``, 1 gives
            ``KL(student || teacher)``.
        temperature: both distributions are ``softmax(logits / temperature)``.

    Returns:
        ``[batch, seq]``: ``beta * KL(P_t || M) + (1 - beta) * KL(P_s || M)`` with ``M = beta P_t + (1 - beta) P_s``.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"generalized_jsd_loss: beta must be in [0, 1], got {beta}")
    if temperature <= 0:
        raise ValueError(f"generalized_jsd_loss: temperature must be > 0, got {temperature}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"generalized_jsd_loss: student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} differ (the teacher must share the student's vocabulary)"
        )
    log_s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    if beta == 0.0:  # KL(P_t || P_s)
        return (log_t.exp() * (log_t - log_s)).sum(-1)
    if beta == 1.0:  # KL(P_s || P_t)
        return (log_s.exp() * (log_s - log_t)).sum(-1)
    # log M computed in log space: logsumexp(log P_s + log(1 - beta), log P_t + log beta)
    log_m = torch.logsumexp(torch.stack([log_s + math.log(1.0 - beta), log_t + math.log(beta)]), dim=0)
    kl_t = (log_t.exp() * (log_t - log_m)).sum(-1)
    kl_s = (log_s.exp() * (log_s - log_m)).sum(-1)
    return beta * kl_t + (1.0 - beta) * kl_s


def generalized_jsd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor,
    beta: float = 0.5,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """GKD's loss: :func:`generalized_jsd_per_token` over the positions where ``mask`` is 1.

    ``reduction="mean"`` divides by the number of masked tokens (TRL's ``batchmean`` over tokens), ``"sum"``
    returns the sum (the offline trainers divide by the step's token count themselves).
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"generalized_jsd_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    per_token = generalized_jsd_per_token(student_logits, teacher_logits, beta, temperature)
    m = mask.to(per_token.dtype)
    if reduction == "sum":
        return (per_token * m).sum()
    return _masked_mean(per_token, m)


def reverse_kl_token_rewards(
    student_log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor,
    mask: torch.Tensor,
    coef: float = 1.0,
) -> torch.Tensor:
    """Dense distillation reward ``[batch, response_len]``: ``-coef * (log pi_s(y_t) - log pi_t(y_t))`` on response
    tokens, 0 elsewhere.

    ``y_t`` is the token the student sampled, so the sum over a response is a one-sample estimate of
    ``-coef * KL(pi_s || pi_t)`` of that sequence (on-policy distillation as a reward, as in GKD's RL view and
    Thinking Machines' "On-Policy Distillation", 2025). The result carries no gradient.
    """
    if student_log_probs.shape != teacher_log_probs.shape:
        raise ValueError(
            f"reverse_kl_token_rewards: student {tuple(student_log_probs.shape)} and teacher "
            f"{tuple(teacher_log_probs.shape)} log-probs differ in shape"
        )
    diff = (student_log_probs.detach().float() - teacher_log_probs.detach().float()) * mask.float()
    return -float(coef) * diff


def estimator_token_rewards(
    student_log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor,
    mask: torch.Tensor,
    coef: float = 1.0,
    loss_mode: str = "k1",
    loss_max_clamp: float | None = None,
) -> torch.Tensor:
    """Dense distillation reward ``[batch, response_len]`` of upstream verl v0.9's estimator loss modes:
    ``-coef * clamp(D_t, -c, c)`` on response tokens, 0 elsewhere, no gradient.

    ``D_t = kl_penalty(log pi_s(y_t), log pi_t(y_t), loss_mode)`` (upstream ``verl/trainer/distillation/losses.py``,
    ``compute_distillation_loss_reverse_kl_estimator``, with ``use_policy_gradient`` its negative is the per-token
    advantage; ``c = distillation_loss.loss_max_clamp``, no clamp when None), with ``d = log pi_s - log pi_t``:
    ``kl``/``k1``: ``d``; ``abs``: ``|d|``; ``mse``/``k2``: ``d^2 / 2``; ``low_var_kl``/``k3``: ``exp(-d) + d - 1``
    (Schulman's k3, clamped to [-10, 10] as :func:`verl.algorithms.kl.kl_penalty_forward`). ``k1`` equals
    :func:`reverse_kl_token_rewards`.
    """
    from verl.algorithms.kl import kl_penalty_forward

    if student_log_probs.shape != teacher_log_probs.shape:
        raise ValueError(
            f"estimator_token_rewards: student {tuple(student_log_probs.shape)} and teacher "
            f"{tuple(teacher_log_probs.shape)} log-probs differ in shape"
        )
    per_token = kl_penalty_forward(student_log_probs.detach().float(), teacher_log_probs.detach().float(), loss_mode)
    if loss_max_clamp is not None:
        per_token = per_token.clamp(min=-float(loss_max_clamp), max=float(loss_max_clamp))
    return -float(coef) * per_token * mask.float()


def reverse_kl_pg_loss(
    student_log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor,
    mask: torch.Tensor,
    coef: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """REINFORCE loss with the dense reverse-KL reward as a per-token advantage:
    ``-sum_t A_t * log pi_s(y_t)`` with ``A_t = reverse_kl_token_rewards(...)`` (detached).

    For tokens sampled from the student, ``E[grad]`` of this loss equals ``coef * grad KL(pi_s || pi_t)`` at each
    position (the score-function identity; the baseline term ``E[grad log pi_s] = 0`` drops out).
    ``student_log_probs`` must carry the gradient. ``reduction`` as in :func:`generalized_jsd_loss`.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reverse_kl_pg_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    advantages = reverse_kl_token_rewards(student_log_probs, teacher_log_probs, mask, coef)
    per_token = -advantages * student_log_probs.float() * mask.float()
    if reduction == "sum":
        return per_token.sum()
    return per_token.sum() / mask.float().sum().clamp(min=1.0)
