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
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[batch, response_len]`` to a scalar over the tokens where ``loss_mask`` is 1.

    - ``token-mean``: ``sum(l * m) / N`` (every token of the batch weighs the same; DAPO).
    - ``token-sum``: ``sum(l * m)``, no normalisation at all (upstream verl v0.9, ``agg_loss`` in
      ``verl/trainer/ppo/core_algos.py``): the gradient grows with the number of tokens, as in a plain
      maximum-likelihood sum. The actor's gradient accumulation keeps it a sum over the whole mini-batch.
    - ``seq-mean-token-sum``: ``sum_i (sum_t l_it m_it) / B``.
    - ``seq-mean-token-mean``: ``sum_i (sum_t l_it m_it / sum_t m_it) / B`` (original GRPO).
    - ``seq-mean-token-sum-norm``: ``sum_i (sum_t l_it m_it) / B / L`` with ``L = loss_scale_factor`` when given
      (``actor.loss_scale_factor``, a constant kept the same all run), else ``response_len`` (Dr. GRPO, Liu et al.
      2025, arXiv:2503.20783).

    Global normalisation (upstream v0.9's ``agg_loss(dp_size, batch_num_tokens, global_batch_size, ...)``): when
    ``batch_num_tokens`` (``N``, the valid tokens of the whole mini-batch over all data-parallel ranks) or
    ``global_batch_size`` (``B``, its sequences) is given, this micro-batch's partial sum is divided by the global
    count and multiplied by ``dp_size``, so summing the losses of all micro-batches (gradient accumulation) and
    averaging over ranks (FSDP's gradient mean) gives the loss of the whole mini-batch, whatever the split;
    ``token-sum`` is multiplied by ``dp_size`` for the same reason. Without them (``dp_size`` must then be 1), ``N``
    and ``B`` are this micro-batch's own token count and row count (rows with no valid token count in ``B`` here
    and add 0; upstream leaves them out of ``B``).

    Unknown modes raise ValueError.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"Unknown loss_agg_mode {loss_agg_mode!r} (actor.loss_agg_mode); choose one of {LOSS_AGG_MODES}"
        )
    if loss_agg_mode == "token-sum":
        return verl_F.masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            _require_local(dp_size, "batch_num_tokens", loss_agg_mode)
            return verl_F.masked_mean(loss_mat, loss_mask)
        return verl_F.masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    seq_sums = verl_F.masked_sum(loss_mat, loss_mask, axis=-1)
    if loss_agg_mode == "seq-mean-token-mean":
        # Rows with no valid token contribute 0 instead of 0/0.
        seq_lens = loss_mask.to(loss_mat.dtype).sum(dim=-1)
        seq_sums = seq_sums / seq_lens.clamp(min=1)
    if global_batch_size is None:
        _require_local(dp_size, "global_batch_size", loss_agg_mode)
        seq_mean = seq_sums.mean()
    else:
        seq_mean = seq_sums.sum() / global_batch_size * dp_size
    if loss_agg_mode != "seq-mean-token-sum-norm":
        return seq_mean
    horizon = loss_mask.shape[-1] if loss_scale_factor is None else float(loss_scale_factor)
    if not horizon > 0:
        raise ValueError(f"actor.loss_scale_factor must be > 0 for seq-mean-token-sum-norm, got {loss_scale_factor}")
    return seq_mean / horizon


def _require_local(dp_size: int, name: str, loss_agg_mode: str) -> None:
    """Without the global count a micro-batch normalises by its own, which is only right on one rank."""
    if dp_size > 1:
        raise ValueError(f"agg_loss(loss_agg_mode={loss_agg_mode!r}, dp_size={dp_size}) needs the global {name}")


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss of PPO (Schulman et al. 2017; the PPO2 baselines variant).

    ``v_clip = values + clip(vpreds - values, -c, c)``,
    ``L = 0.5 * agg(max((vpreds - returns)^2, (v_clip - returns)^2))``.

    Args: ``vpreds`` (current critic), ``returns``, ``values`` (critic at rollout time), ``response_mask``: all
    ``[batch, response_len]``; ``cliprange_value``: ``c``; ``loss_scale_factor``: the ``seq-mean-token-sum-norm``
    divisor (``critic.loss_scale_factor``); ``dp_size``, ``batch_num_tokens``, ``global_batch_size``: the global
    normalisation of :func:`agg_loss` (upstream v0.9's ``compute_value_loss``).
    Returns: ``(vf_loss, vf_clipfrac)``: the scalar loss and the masked fraction of tokens where the clipped
    error was the larger one.
    """
    vpred_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(
        torch.maximum(err_unclipped, err_clipped),
        response_mask,
        loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
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
