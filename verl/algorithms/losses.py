"""Loss aggregation and the critic / entropy losses."""

from __future__ import annotations

import torch

from verl.utils import torch_functional as verl_F

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[batch, response_len]`` to a scalar over the tokens where ``loss_mask`` is 1.

    - ``token-mean``: ``sum(l * m) / sum(m)`` (every token of the batch weighs the same; DAPO).
    - ``token-sum``: ``sum(l * m)``, no normalisation at all (upstream verl v0.9, ``agg_loss`` in
      ``verl/trainer/ppo/core_algos.py``): the gradient grows with the number of tokens, as in a plain
      maximum-likelihood sum. The actor's gradient accumulation keeps it a sum over the whole mini-batch.
    - ``seq-mean-token-sum``: ``mean_i sum_t l_it m_it``.
    - ``seq-mean-token-mean``: ``mean_i (sum_t l_it m_it / sum_t m_it)`` (original GRPO).
    - ``seq-mean-token-sum-norm``: ``mean_i (sum_t l_it m_it) / L`` with ``L = loss_scale_factor`` when given
      (``actor.loss_scale_factor``, a constant kept the same all run), else ``response_len`` (Dr. GRPO, Liu et al.
      2025, arXiv:2503.20783).

    Unknown modes raise ValueError.
    """
    if loss_agg_mode == "token-mean":
        return verl_F.masked_mean(loss_mat, loss_mask)
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"Unknown loss_agg_mode {loss_agg_mode!r} (actor.loss_agg_mode); choose one of {LOSS_AGG_MODES}"
        )
    if loss_agg_mode == "token-sum":
        return verl_F.masked_sum(loss_mat, loss_mask)
    seq_sums = verl_F.masked_sum(loss_mat, loss_mask, axis=-1)
    if loss_agg_mode == "seq-mean-token-sum":
        return seq_sums.mean()
    if loss_agg_mode == "seq-mean-token-mean":
        # Rows with no valid token contribute 0 instead of 0/0.
        seq_lens = loss_mask.to(loss_mat.dtype).sum(dim=-1)
        return (seq_sums / seq_lens.clamp(min=1)).mean()
    horizon = loss_mask.shape[-1] if loss_scale_factor is None else float(loss_scale_factor)
    if not horizon > 0:
        raise ValueError(f"actor.loss_scale_factor must be > 0 for seq-mean-token-sum-norm, got {loss_scale_factor}")
    return seq_sums.mean() / horizon


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss of PPO (Schulman et al. 2017; the PPO2 baselines variant).

    ``v_clip = values + clip(vpreds - values, -c, c)``,
    ``L = 0.5 * agg(max((vpreds - returns)^2, (v_clip - returns)^2))``.

    Args: ``vpreds`` (current critic), ``returns``, ``values`` (critic at rollout time), ``response_mask``: all
    ``[batch, response_len]``; ``cliprange_value``: ``c``; ``loss_scale_factor``: the ``seq-mean-token-sum-norm``
    divisor (``critic.loss_scale_factor``).
    Returns: ``(vf_loss, vf_clipfrac)``: the scalar loss and the masked fraction of tokens where the clipped
    error was the larger one.
    """
    vpred_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.maximum(err_unclipped, err_clipped), response_mask, loss_agg_mode, loss_scale_factor)
    vf_clipfrac = verl_F.masked_mean(torch.gt(err_clipped, err_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Aggregated entropy of the policy: ``agg(H(softmax(logits)))``.

    Args: ``logits`` ``[batch, response_len, vocab]``, ``response_mask`` ``[batch, response_len]``.
    Returns: a scalar (maximise it with ``-entropy_coeff * entropy`` in the actor loss).
    """
    token_entropy = verl_F.entropy_from_logits(logits)
    return agg_loss(token_entropy, response_mask, loss_agg_mode)
