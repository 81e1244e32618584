"""Log-probs and entropy through the LM head in token chunks, never materialising the ``[tokens, vocab]`` logits.

The naive path computes ``logits = hidden @ W^T`` for every token (``[N, V]``, 8192 tokens x 152k vocab is 2.5 GB
in bf16), keeps it for the backward and allocates a gradient of the same size. Here one autograd ``Function`` walks
the tokens in chunks: per chunk it computes the logits block in float32, the log-prob of the label
(``z_y - logsumexp(z)``) and the entropy (``logsumexp(z) - sum_j p_j z_j``), and drops the block. Only the inputs
(hidden ``[N, H]``, weight ``[V, H]``, labels) and two floats per token (logsumexp and ``E_p[z]``) are saved; the
backward recomputes each block and accumulates ``grad_hidden`` and ``grad_weight`` (and ``grad_bias``).

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


class _LinearLogProbs(torch.autograd.Function):
    """``(log p(label), entropy, sum_j p_j^2)`` per token of ``softmax((hidden W^T + b) / T)``, chunked over tokens.

    The third output has no gradient (the optimal-token-baseline term); it is empty unless asked for.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        temperature: float,
        chunk_size: int,
        with_sum_pi_squared: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mm_dtype = _matmul_dtype(hidden, weight)
        cdtype = _compute_dtype(mm_dtype)
        n, device = hidden.shape[0], hidden.device
        logp = torch.empty(n, dtype=cdtype, device=device)
        lse = torch.empty(n, dtype=cdtype, device=device)
        mean_z = torch.empty(n, dtype=cdtype, device=device)
        sq = torch.empty(n if with_sum_pi_squared else 0, dtype=cdtype, device=device)
        with torch.autocast(device.type, enabled=False):
            w = weight.to(mm_dtype)
            for s in range(0, n, chunk_size):
                e = min(s + chunk_size, n)
                z = _logits_block(hidden[s:e].to(mm_dtype), w, bias, temperature, cdtype)
                block_lse = torch.logsumexp(z, dim=-1)
                lse[s:e] = block_lse
                logp[s:e] = z.gather(-1, labels[s:e].unsqueeze(-1)).squeeze(-1) - block_lse
                p = torch.sub(z, block_lse.unsqueeze(-1)).exp_()
                if with_sum_pi_squared:
                    sq[s:e] = p.square().sum(dim=-1)
                mean_z[s:e] = p.mul_(z).sum(dim=-1)
                del z, p
        ctx.save_for_backward(hidden, weight, bias, labels, lse, mean_z)
        ctx.temperature, ctx.chunk_size, ctx.mm_dtype = temperature, chunk_size, mm_dtype
        ctx.mark_non_differentiable(sq)
        ctx.set_materialize_grads(False)
        return logp, lse - mean_z, sq

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(  # type: ignore[override]
        ctx, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None, _grad_sq: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, labels, lse, mean_z = ctx.saved_tensors
        nones = (None,) * 4
        if grad_logp is None and grad_entropy is None:
            return (None, None, None) + nones
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        mm_dtype, temperature, cdtype = ctx.mm_dtype, ctx.temperature, lse.dtype
        n = hidden.shape[0]
        grad_h = torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device) if need_h else None
        # float32 accumulator of grad_weight (it becomes the .grad of a float32 master weight as it is); with a
        # narrower matmul dtype each chunk's product lands in one reused buffer first, so no [V, H] temporary is
        # allocated per chunk
        grad_w = torch.zeros(weight.shape, dtype=cdtype, device=weight.device) if need_w else None
        buf = torch.empty(weight.shape, dtype=mm_dtype, device=weight.device) if need_w and mm_dtype != cdtype else None
        grad_b = torch.zeros(weight.shape[0], dtype=cdtype, device=weight.device) if need_b else None
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(mm_dtype)
            for s in range(0, n, ctx.chunk_size):
                e = min(s + ctx.chunk_size, n)
                h = hidden[s:e].to(mm_dtype)
                z = _logits_block(h, w, bias, temperature, cdtype)
                g_lp = grad_logp[s:e].to(cdtype).unsqueeze(-1) if grad_logp is not None else None
                if grad_entropy is None:  # dz = -g_lp * p, then + g_lp at the label: all in the logits block
                    dz = z.sub_(lse[s:e].unsqueeze(-1)).exp_().mul_(-g_lp)
                else:  # dz = p * (g_H (E[z] - z) - g_lp), then + g_lp at the label
                    p = torch.sub(z, lse[s:e].unsqueeze(-1)).exp_()
                    dz = z.neg_().add_(mean_z[s:e].unsqueeze(-1)).mul_(grad_entropy[s:e].to(cdtype).unsqueeze(-1))
                    if g_lp is not None:
                        dz.sub_(g_lp)
                    dz.mul_(p)
                    del p
                if g_lp is not None:
                    dz.scatter_add_(-1, labels[s:e].unsqueeze(-1), g_lp)
                if temperature != 1.0:
                    dz.div_(temperature)
                if grad_b is not None:
                    grad_b += dz.sum(dim=0)
                dz_mm = dz.to(mm_dtype)
                if grad_h is not None and grad_h.dtype == mm_dtype:
                    torch.mm(dz_mm, w, out=grad_h[s:e])
                elif grad_h is not None:
                    grad_h[s:e] = dz_mm @ w
                if grad_w is not None:
                    if buf is None:
                        grad_w.addmm_(dz_mm.T, h)
                    else:
                        grad_w.add_(torch.mm(dz_mm.T, h, out=buf))
                del dz, dz_mm, z
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token log-prob of ``labels``, entropy (and ``sum_v p_v^2``) of ``softmax((hidden @ weight.T + bias) / T)``.

    Args:
        hidden: ``[..., H]`` final hidden states (after the last norm), any float dtype.
        weight: ``[V, H]`` LM head weight (may be the input embedding's, tied: its gradients add up).
        labels: ``[...]`` token ids in ``[0, V)``.
        temperature: positive logit divisor (the rollout's sampling temperature).
        bias: optional ``[V]`` head bias.
        chunk_size: tokens per float32 ``[chunk, V]`` block; None: ~32M elements per block.
        with_sum_pi_squared: also return ``sum_v p_v^2`` per token (no gradient).

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
    vocab = weight.shape[0]
    chunk = max(1, _AUTO_CHUNK_ELEMENTS // max(vocab, 1)) if chunk_size is None else int(chunk_size)
    if chunk < 1:
        raise ValueError(f"linear_logprobs_entropy: chunk_size must be a positive number of tokens, got {chunk_size}")
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_y = labels.reshape(-1).long()
    logp, ent, sq = _LinearLogProbs.apply(flat_h, weight, bias, flat_y, float(temperature), chunk, with_sum_pi_squared)
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
