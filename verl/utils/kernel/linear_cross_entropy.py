"""Log-probs and entropy through the LM head in chunks, never materialising the ``[tokens, vocab]`` logits.

The naive path computes ``logits = hidden @ W^T`` for every token (``[N, V]``, 8192 tokens x 152k vocab is 2.5 GB
in bf16), keeps it for the backward and allocates a gradient of the same size. Here one autograd ``Function`` walks
token chunks and, inside each, slices of the vocabulary: per ``[tokens, vocab slice]`` block it computes the logits
in float32 and folds them into the log-prob of the label (``z_y - logsumexp(z)``) and the entropy
(``logsumexp(z) - sum_j p_j z_j``) with an online softmax, then drops the block. Only the inputs (hidden ``[N, H]``,
weight ``[V, H]``, labels) and two floats per token (logsumexp and ``E_p[z]``) are saved; the backward recomputes
each block and accumulates ``grad_hidden``, ``grad_weight`` (and ``grad_bias``).

Same quantities as upstream verl's fused kernels (``verl/utils/kernel/linear_cross_entropy.py``, used with
``actor_rollout_ref.model.use_fused_kernels``) and Liger's fused linear cross-entropy; written here in plain torch.

Gradients, with ``z = (h W^T + b) / T``, ``p = softmax(z)`` and upstream gradients ``g_lp``, ``g_H`` per token:
``dL/dz_j = g_lp (1[j = y] - p_j) + g_H p_j (E_p[z] - z_j)``; ``dL/dh = (dL/dz / T) W``,
``dL/dW = (dL/dz / T)^T h``, ``dL/db = sum_tokens dL/dz / T``.
"""

from __future__ import annotations

import torch

# Elements of one float32 [chunk, vocab] working block (~128 MiB) when the caller gives no chunk size (as in
# verl/utils/torch_functional.py).
_AUTO_CHUNK_ELEMENTS = 1 << 25
# Tokens per chunk by default: each chunk adds its share into every slice of grad_weight once, so fewer and larger
# chunks mean fewer passes over the [V, H] gradient.
_AUTO_TOKEN_CHUNK = 4096


def _matmul_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype of the head's matmul: the autocast dtype inside an autocast region (what ``nn.Linear`` would use),
    else the promoted dtype of the inputs."""
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _logits_block(
    h: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, temperature: float, cdtype: torch.dtype
) -> torch.Tensor:
    """``(h W^T + b) / T`` of one chunk, in ``cdtype`` (the matmul itself runs in the operands' dtype)."""
    z = (h @ w.T).to(cdtype)
    if bias is not None:
        z.add_(bias.to(cdtype))
    if temperature != 1.0:
        z.div_(temperature)
    return z


def _label_column(labels: torch.Tensor, v0: int, v1: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(in_range [n], column [n, 1])``: which labels fall in the vocabulary slice ``[v0, v1)`` and their column
    in it (clamped into the slice where they do not, to be masked by ``in_range``)."""
    in_range = (labels >= v0) & (labels < v1)
    return in_range, (labels - v0).clamp_(0, v1 - v0 - 1).unsqueeze(-1)


class _LinearLogProbs(torch.autograd.Function):
    """``(log p(label), entropy, sum_j p_j^2)`` per token of ``softmax((hidden W^T + b) / T)``.

    Tokens are walked in chunks of ``token_chunk`` and, inside each, the vocabulary in slices of ``vocab_chunk``
    rows of ``W``: the forward keeps a running max, ``sum e^(z - m)``, ``sum e^(z - m) z`` (and ``sum e^(2(z - m))``)
    per token, rescaled when the max grows (the online softmax of Milakov & Gimelshein 2018); the backward rebuilds
    each ``[token_chunk, vocab_chunk]`` block from the saved logsumexp and ``E_p[z]``, writes that slice of
    ``grad_weight`` and accumulates ``grad_hidden`` over the slices. No ``[V, H]`` copy of the weight is made. The
    third output has no gradient (the optimal-token-baseline term); it is empty unless asked for.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        temperature: float,
        token_chunk: int,
        vocab_chunk: int,
        with_sum_pi_squared: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mm_dtype = _matmul_dtype(hidden, weight)
        cdtype = _compute_dtype(mm_dtype)
        n, vocab, device = hidden.shape[0], weight.shape[0], hidden.device
        logp = torch.empty(n, dtype=cdtype, device=device)
        lse = torch.empty(n, dtype=cdtype, device=device)
        mean_z = torch.empty(n, dtype=cdtype, device=device)
        sq = torch.empty(n if with_sum_pi_squared else 0, dtype=cdtype, device=device)
        with torch.autocast(device.type, enabled=False):
            for s in range(0, n, token_chunk):
                e = min(s + token_chunk, n)
                h, y = hidden[s:e].to(mm_dtype), labels[s:e]
                m = torch.full((e - s,), float("-inf"), dtype=cdtype, device=device)
                sum_e, sum_ez, sum_e2, z_y = (torch.zeros(e - s, dtype=cdtype, device=device) for _ in range(4))
                for v0 in range(0, vocab, vocab_chunk):
                    v1 = min(v0 + vocab_chunk, vocab)
                    b = bias[v0:v1] if bias is not None else None
                    z = _logits_block(h, weight[v0:v1].to(mm_dtype), b, temperature, cdtype)
                    m_new = torch.maximum(m, z.amax(dim=-1))
                    scale = torch.exp(m - m_new)
                    in_range, col = _label_column(y, v0, v1)
                    z_y = torch.where(in_range, z.gather(-1, col).squeeze(-1), z_y)
                    ez = z.sub(m_new.unsqueeze(-1)).exp_()
                    sum_e.mul_(scale).add_(ez.sum(dim=-1))
                    if with_sum_pi_squared:
                        sum_e2.mul_(scale.square()).add_(ez.square().sum(dim=-1))
                    sum_ez.mul_(scale).add_(ez.mul_(z).sum(dim=-1))
                    m = m_new
                    del z, ez
                lse[s:e] = m + sum_e.log()
                logp[s:e] = z_y - lse[s:e]
                mean_z[s:e] = sum_ez / sum_e
                if with_sum_pi_squared:
                    sq[s:e] = sum_e2 / sum_e.square()
        ctx.save_for_backward(hidden, weight, bias, labels, lse, mean_z)
        ctx.temperature, ctx.mm_dtype = temperature, mm_dtype
        ctx.token_chunk, ctx.vocab_chunk = token_chunk, vocab_chunk
        ctx.mark_non_differentiable(sq)
        ctx.set_materialize_grads(False)
        return logp, lse - mean_z, sq

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(  # type: ignore[override]
        ctx, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None, _grad_sq: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, labels, lse, mean_z = ctx.saved_tensors
        nones = (None,) * 5
        if grad_logp is None and grad_entropy is None:
            return (None, None, None) + nones
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        mm_dtype, temperature, cdtype = ctx.mm_dtype, ctx.temperature, lse.dtype
        n, vocab, device = hidden.shape[0], weight.shape[0], hidden.device
        grad_h = torch.empty(hidden.shape, dtype=hidden.dtype, device=device) if need_h else None
        # float32 (it becomes the .grad of a float32 master weight as it is); each slice is written by one matmul
        # per token chunk
        grad_w = torch.zeros(weight.shape, dtype=cdtype, device=device) if need_w else None
        grad_b = torch.zeros(vocab, dtype=cdtype, device=device) if need_b else None
        with torch.autocast(device.type, enabled=False):
            for s in range(0, n, ctx.token_chunk):
                e = min(s + ctx.token_chunk, n)
                h, y = hidden[s:e].to(mm_dtype), labels[s:e]
                g_lp = grad_logp[s:e].to(cdtype).unsqueeze(-1) if grad_logp is not None else None
                g_h = grad_entropy[s:e].to(cdtype).unsqueeze(-1) if grad_entropy is not None else None
                acc_h = torch.zeros(e - s, hidden.shape[1], dtype=cdtype, device=device) if need_h else None
                for v0 in range(0, vocab, ctx.vocab_chunk):
                    v1 = min(v0 + ctx.vocab_chunk, vocab)
                    w = weight[v0:v1].to(mm_dtype)
                    z = _logits_block(h, w, bias[v0:v1] if bias is not None else None, temperature, cdtype)
                    if g_h is None:  # dz = -g_lp * p (+ g_lp at the label, below)
                        dz = z.sub_(lse[s:e].unsqueeze(-1)).exp_().mul_(-g_lp)
                    else:  # dz = p * (g_H (E[z] - z) - g_lp) (+ g_lp at the label)
                        p = torch.sub(z, lse[s:e].unsqueeze(-1)).exp_()
                        dz = z.neg_().add_(mean_z[s:e].unsqueeze(-1)).mul_(g_h)
                        if g_lp is not None:
                            dz.sub_(g_lp)
                        dz.mul_(p)
                        del p
                    if g_lp is not None:
                        in_range, col = _label_column(y, v0, v1)
                        dz.scatter_add_(-1, col, g_lp * in_range.unsqueeze(-1))
                    if temperature != 1.0:
                        dz.div_(temperature)
                    if grad_b is not None:
                        grad_b[v0:v1] += dz.sum(dim=0)
                    dz_mm = dz.to(mm_dtype)
                    del dz, z
                    if acc_h is not None:
                        acc_h += (dz_mm @ w).to(cdtype)
                    if grad_w is not None:
                        grad_w[v0:v1] += (dz_mm.T @ h).to(cdtype)
                    del dz_mm
                if grad_h is not None:
                    grad_h[s:e] = acc_h
        return (
            grad_h,
            grad_w.to(weight.dtype) if grad_w is not None else None,
            grad_b.to(bias.dtype) if grad_b is not None else None,
        ) + nones


def linear_logprobs_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    bias: torch.Tensor | None = None,
    chunk_size: int | None = None,
    with_sum_pi_squared: bool = False,
    vocab_chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token log-prob of ``labels``, entropy (and ``sum_v p_v^2``) of ``softmax((hidden @ weight.T + bias) / T)``.

    Args:
        hidden: ``[..., H]`` final hidden states (after the last norm), any float dtype.
        weight: ``[V, H]`` LM head weight (may be the input embedding's, tied: its gradients add up).
        labels: ``[...]`` token ids in ``[0, V)``.
        temperature: positive logit divisor (the rollout's sampling temperature).
        bias: optional ``[V]`` head bias.
        chunk_size: tokens per chunk (None: up to 4096).
        with_sum_pi_squared: also return ``sum_v p_v^2`` per token (no gradient).
        vocab_chunk_size: rows of ``weight`` per block (None: a float32 ``[tokens, rows]`` block of ~32M
            elements, ~128 MiB; peak working memory is about three such blocks).

    Returns:
        ``(log_probs [...], entropy [...], sum_pi_squared [...] | None)`` in float32 (float64 for float64 inputs);
        log-probs and entropy are differentiable w.r.t. ``hidden``, ``weight`` and ``bias``. The matmul runs in the
        autocast dtype inside an autocast region (as ``nn.Linear`` would), the softmax in float32.
    """
    if hidden.shape[:-1] != labels.shape or weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"linear_logprobs_entropy: hidden {tuple(hidden.shape)} must be labels {tuple(labels.shape)} + [H] "
            f"and weight [V, H], got weight {tuple(weight.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"linear_logprobs_entropy: temperature must be > 0, got {temperature}")
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_y = labels.reshape(-1).long()
    chunk = min(max(flat_h.shape[0], 1), _AUTO_TOKEN_CHUNK) if chunk_size is None else int(chunk_size)
    vchunk = max(1, _AUTO_CHUNK_ELEMENTS // chunk) if vocab_chunk_size is None else int(vocab_chunk_size)
    if chunk < 1 or vchunk < 1:
        raise ValueError(
            f"linear_logprobs_entropy: chunk_size ({chunk_size}) and vocab_chunk_size ({vocab_chunk_size}) must be "
            "positive"
        )
    logp, ent, sq = _LinearLogProbs.apply(
        flat_h, weight, bias, flat_y, float(temperature), chunk, vchunk, with_sum_pi_squared
    )
    shape = labels.shape
    return logp.reshape(shape), ent.reshape(shape), (sq.reshape(shape) if with_sum_pi_squared else None)


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    reduction: str = "none",
    dist_process_group: object | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream verl's name and signature: ``(log_probs, entropy)`` per token of ``hidden [..., H]`` through
    ``weight [V, H]`` at ``temperature`` (see :func:`linear_logprobs_entropy`). Only ``reduction='none'`` and an
    unsplit vocabulary (``dist_process_group=None``) are computed here."""
    if reduction != "none":
        raise ValueError(f"linear_cross_entropy: reduction={reduction!r} is not supported; use 'none' and reduce")
    if dist_process_group is not None:
        raise ValueError("linear_cross_entropy: a vocabulary split over a process group is not supported; pass None")
    logp, ent, _ = linear_logprobs_entropy(hidden, weight, labels, temperature)
    return logp, ent
