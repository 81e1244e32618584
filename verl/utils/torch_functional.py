"""Tensor helpers shared by the actor, the critic and ``core_algos``.

The log-prob and entropy functions are the memory hot spot of RL post-training: a naive
``log_softmax(logits.float())`` over ``[tokens, vocab]`` allocates a float32 copy of the whole logits tensor (8192
tokens x 152k vocab is ~5 GB) and keeps it alive for the backward pass. Here both run over chunks of tokens with a
custom autograd ``Function``: only one ``[chunk, vocab]`` float32 block exists at a time, forward and
backward, and the saved state is the input logits (already alive) plus one float per token.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from verl.utils.distributed_stats import distributed_masked_mean, distributed_mean_max_min_std  # noqa: F401
from verl.utils.logprob_kernels import EAGER_KERNELS, ChunkKernels
from verl.utils.optim import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup  # noqa: F401

# Elements of one float32 [chunk, vocab] working block (~128 MiB) when the caller gives no chunk size.
_AUTO_CHUNK_ELEMENTS = 1 << 25


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every narrower float type is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _resolve_chunk_size(chunk_size: int | None, vocab: int) -> int:
    if chunk_size is None:
        return max(1, _AUTO_CHUNK_ELEMENTS // max(vocab, 1))
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be a positive number of tokens, got {chunk_size!r}")
    return int(chunk_size)


def _chunks(rows: int, length: int, chunk_size: int) -> Iterator[tuple[slice, slice]]:
    """(row, token) slices of a ``[rows, length]`` grid with about ``chunk_size`` tokens each.

    Short rows are grouped several per chunk; long rows are split along the token axis.
    """
    if length >= chunk_size:
        for r in range(rows):
            for t in range(0, length, chunk_size):
                yield slice(r, r + 1), slice(t, min(t + chunk_size, length))
    else:
        per_chunk = max(1, chunk_size // max(length, 1))
        for r in range(0, rows, per_chunk):
            yield slice(r, min(r + per_chunk, rows)), slice(0, length)


def _as_3d(x: torch.Tensor) -> torch.Tensor:
    """``[..., T, V] -> [B, T, V]`` as a view where the strides allow it (e.g. a ``logits[:, :-1]`` slice),
    so a non-contiguous input is never copied as a whole."""
    if x.dim() == 2:
        return x.unsqueeze(0)
    if x.dim() == 3:
        return x
    return x.flatten(0, -3)


class _ChunkedLogProbs(torch.autograd.Function):
    """log p(label) = logits[label] - logsumexp(logits) on ``[B, T, V]`` logits, chunked over tokens.

    Backward: d log p(y) / d logits_j = 1[j == y] - softmax(logits)_j, rebuilt per chunk from the saved logsumexp.
    The per-chunk work is ``kernels``' (:mod:`verl.utils.logprob_kernels`: eager, or compiled into fused kernels).
    """

    @staticmethod
    def forward(
        ctx, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int, kernels: ChunkKernels
    ) -> torch.Tensor:  # type: ignore[override]
        cdtype = _compute_dtype(logits.dtype)
        out = torch.empty(labels.shape, dtype=cdtype, device=logits.device)
        lse = torch.empty(labels.shape, dtype=cdtype, device=logits.device)
        for rows, toks in _chunks(labels.shape[0], labels.shape[1], chunk_size):
            kernels.logprob_forward(logits[rows, toks], labels[rows, toks], out[rows, toks], lse[rows, toks])
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk_size, ctx.kernels = chunk_size, kernels
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:  # type: ignore[override]
        logits, labels, lse = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        grad_logits = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for rows, toks in _chunks(labels.shape[0], labels.shape[1], ctx.chunk_size):
            ctx.kernels.logprob_backward(
                logits[rows, toks], labels[rows, toks], lse[rows, toks], grad_out[rows, toks], grad_logits[rows, toks]
            )
        return grad_logits, None, None, None


class _ChunkedEntropy(torch.autograd.Function):
    """H = logsumexp(x) - sum_j p_j x_j with p = softmax(x) on ``[B, T, V]`` logits, chunked over tokens.

    Backward: dH/dx_j = p_j * (E_p[x] - x_j); the per-token logsumexp and E_p[x] are saved. The per-chunk work is
    ``kernels``' (:mod:`verl.utils.logprob_kernels`).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, chunk_size: int, kernels: ChunkKernels) -> torch.Tensor:  # type: ignore[override]
        cdtype = _compute_dtype(logits.dtype)
        lse = torch.empty(logits.shape[:-1], dtype=cdtype, device=logits.device)
        mean_x = torch.empty(logits.shape[:-1], dtype=cdtype, device=logits.device)
        for rows, toks in _chunks(logits.shape[0], logits.shape[1], chunk_size):
            kernels.entropy_forward(logits[rows, toks], lse[rows, toks], mean_x[rows, toks])
        ctx.save_for_backward(logits, lse, mean_x)
        ctx.chunk_size, ctx.kernels = chunk_size, kernels
        return lse - mean_x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:  # type: ignore[override]
        logits, lse, mean_x = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        grad_logits = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for rows, toks in _chunks(logits.shape[0], logits.shape[1], ctx.chunk_size):
            ctx.kernels.entropy_backward(
                logits[rows, toks], lse[rows, toks], mean_x[rows, toks], grad_out[rows, toks], grad_logits[rows, toks]
            )
        return grad_logits, None, None


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int | None = None,
    inplace_backward: bool = True,
    kernels: ChunkKernels | None = None,
) -> torch.Tensor:
    """Log-probability of each label under the softmax of its logits, ``log softmax(logits)[label]``.

    Args:
        logits: ``[..., vocab]`` in any float dtype (bf16/fp16 are upcast per chunk, never as a whole). A strided
            view such as ``logits[:, :-1]`` is read in place, not copied.
        labels: ``[...]`` integer token ids in ``[0, vocab)``.
        chunk_size: tokens per float32 working block; ``None`` picks ~32M elements per block (about 650 tokens
            at a 50k vocab). Peak extra memory is one ``[chunk_size, vocab]`` block in float32.
        inplace_backward: accepted for verl compatibility (its flash-attn path); the chunked backward here
            always writes the logits gradient into one preallocated buffer.
        kernels: the per-chunk kernels (:mod:`verl.utils.logprob_kernels`): None for eager PyTorch, or
            :func:`~verl.utils.logprob_kernels.compiled_chunk_kernels` (``actor.use_torch_compile``) for fused ones.

    Returns:
        ``[...]`` log-probs in float32 (float64 for float64 logits), differentiable w.r.t. ``logits``.
    """
    del inplace_backward
    if logits.dim() < 2 or logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logprobs_from_logits: logits {tuple(logits.shape)} must be labels {tuple(labels.shape)} + [vocab]"
        )
    vocab = logits.shape[-1]
    logits3 = _as_3d(logits)
    labels3 = labels.long().reshape(logits3.shape[:-1])
    chunk = _resolve_chunk_size(chunk_size, vocab)
    out = _ChunkedLogProbs.apply(logits3, labels3, chunk, kernels or EAGER_KERNELS)
    return out.reshape(labels.shape)


def entropy_from_logits(
    logits: torch.Tensor, chunk_size: int | None = None, kernels: ChunkKernels | None = None
) -> torch.Tensor:
    """Entropy of the softmax distribution, ``H = logsumexp(x) - sum_j softmax(x)_j * x_j``.

    Args:
        logits: ``[..., vocab]`` in any float dtype; computed per token chunk in float32.
        chunk_size: tokens per float32 working block (``None``: automatic, as in :func:`logprobs_from_logits`).
        kernels: the per-chunk kernels, as in :func:`logprobs_from_logits`.

    Returns:
        ``[...]`` entropies (nats) in float32 (float64 for float64 logits), differentiable w.r.t. ``logits``.
    """
    if logits.dim() == 1:
        return entropy_from_logits(logits.unsqueeze(0), chunk_size, kernels).squeeze(0)
    chunk = _resolve_chunk_size(chunk_size, logits.shape[-1])
    out = _ChunkedEntropy.apply(_as_3d(logits), chunk, kernels or EAGER_KERNELS)
    return out.reshape(logits.shape[:-1])


def entropy_from_logits_with_chunking(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """verl's name for chunked entropy; same computation as :func:`entropy_from_logits`. ``[..., V] -> [...]``."""
    return entropy_from_logits(logits, chunk_size=chunk_size)


def _dims(axis: int | Sequence[int]) -> int | tuple[int, ...]:
    return axis if isinstance(axis, int) else tuple(axis)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | Sequence[int] | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero (masked entries, even NaN/inf, contribute nothing).

    ``values`` and ``mask`` broadcast together (e.g. both ``[batch, response_len]``); ``axis=None`` sums all.
    """
    valid = torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))
    weighted = valid * mask.to(values.dtype)
    return weighted.sum() if axis is None else weighted.sum(dim=_dims(axis))


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | Sequence[int] | None = None) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` is non-zero: ``sum(v * m) / (sum(m) + 1e-8)``.

    Shapes broadcast (typically ``[batch, response_len]``); ``axis`` reduces one/several dims, ``None`` all.
    An all-zero mask gives 0 rather than NaN.
    """
    mask_f = mask.to(values.dtype)
    denom = mask_f.sum() if axis is None else mask_f.sum(dim=_dims(axis))
    return masked_sum(values, mask, axis) / (denom + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of ``values`` (scalar), with Bessel's n/(n-1) correction when ``unbiased``.

    Raises ValueError when the mask selects no element, or a single one with ``unbiased=True``.
    """
    n_valid = mask.sum()
    if n_valid.item() == 0:
        raise ValueError("masked_var: the mask selects no element; at least one entry of the mask must be 1")
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        if n_valid.item() == 1:
            raise ValueError("masked_var: the mask selects a single element; the unbiased variance is undefined")
        variance = variance * (n_valid / (n_valid - 1)).to(variance.dtype)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Whiten ``values`` with the masked mean and unbiased variance: ``(v - mean) / sqrt(var + 1e-8)``.

    With ``shift_mean=False`` the mean is added back (scale only). Shape of ``values`` is kept.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor, tensor_max: torch.Tensor) -> torch.Tensor:
    """Element-wise clamp of ``x`` into ``[tensor_min, tensor_max]`` with tensor bounds (broadcasting)."""
    return torch.maximum(torch.minimum(x, tensor_max), tensor_min)


def get_response_mask(
    response_id: torch.Tensor, eos_token: int | Sequence[int] = 2, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """Mask of the response tokens up to and including the first EOS.

    Args:
        response_id: ``[batch, response_len]`` generated token ids.
        eos_token: one EOS id or a list of ids (any of them ends the response).
        dtype: dtype of the returned mask.

    Returns:
        ``[batch, response_len]``: 1 before and at the first EOS of each row, 0 after it; all ones if no EOS.
    """
    eos_ids = torch.as_tensor(eos_token, device=response_id.device, dtype=response_id.dtype).reshape(-1)
    is_eos = torch.isin(response_id, eos_ids).to(torch.int64)
    # EOS tokens strictly before position t; zero means t is at or before the first EOS.
    eos_before = is_eos.cumsum(dim=-1) - is_eos
    return eos_before.eq(0).to(dtype)


def pad_sequence_to_length(
    tensors: torch.Tensor, max_seq_len: int, pad_token_id: int | float, left_pad: bool = False
) -> torch.Tensor:
    """Pad the last dim of ``tensors`` (``[..., seq]``) with ``pad_token_id`` to ``max_seq_len``.

    Tensors already at least ``max_seq_len`` long are returned unchanged.
    """
    missing = max_seq_len - tensors.shape[-1]
    if missing <= 0:
        return tensors
    pad = (missing, 0) if left_pad else (0, missing)
    return F.pad(tensors, pad, mode="constant", value=pad_token_id)


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask ``[batch, seq]``: ``clamp(cumsum(mask) - 1, min=0)``.

    Left padding gets position 0; the first real token is 0 and each later real token counts up.
    """
    return torch.clamp(torch.cumsum(mask, dim=-1) - 1, min=0)


def calculate_sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """``sum_v pi_v^2`` of ``pi = softmax(logits)`` over the last dim, from two log-sum-exps (no softmax, no overflow).

    ``sum_v exp(z_v)^2 / (sum_v exp(z_v))^2 = exp(logsumexp(2 z) - 2 logsumexp(z))``; each ``logsumexp`` subtracts its
    maximum, so logits of any magnitude stay finite. The result lies in ``(0, 1]`` (1 for a one-hot distribution,
    ``1/V`` for a uniform one). It is the squared-norm term of the optimal token baseline
    (``algorithm.adv_estimator=optimal_token_baseline``, upstream v0.9 ``verl/utils/torch_functional.py``).

    Args:
        logits: ``[..., vocab]``, any float dtype (computed in that dtype; no gradient is blocked).

    Returns:
        ``[...]``: the logits' shape without the vocabulary dim.
    """
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


def expand_as_nested(tensor: torch.Tensor, nested_tensor: torch.Tensor) -> torch.Tensor:
    """Repeat a per-sample value over each sample's tokens of a jagged nested tensor.

    Args:
        tensor: ``[batch]``, one value per sample.
        nested_tensor: a jagged (``torch.jagged`` layout) nested tensor ``[batch, j]``; sample ``b`` has ``len_b``
            tokens.

    Returns:
        A jagged nested tensor ``[batch, j]`` with ``nested_tensor``'s offsets whose row ``b`` is ``tensor[b]``
        repeated ``len_b`` times (``tensor``'s dtype).

    Raises AssertionError (as upstream, whose tests expect that type) when ``nested_tensor`` is not nested or not
    2-D, or ``tensor`` is not 1-D or its length is not the batch size.
    """
    assert nested_tensor.is_nested, (
        f"expand_as_nested: nested_tensor must be a nested tensor, got {nested_tensor.shape}"
    )
    assert nested_tensor.dim() == 2, f"expand_as_nested: nested_tensor must be [batch, j], got {nested_tensor.dim()}-D"
    assert tensor.dim() == 1, f"expand_as_nested: tensor must be 1-D [batch], got shape {tuple(tensor.shape)}"
    assert tensor.shape[0] == nested_tensor.size(0), (
        f"expand_as_nested: tensor has {tensor.shape[0]} values for a batch of {nested_tensor.size(0)} samples"
    )
    offsets = nested_tensor.offsets()
    values = torch.repeat_interleave(tensor, offsets.diff().to(tensor.device), dim=0)
    return torch.nested.nested_tensor_from_jagged(values=values, offsets=offsets)
