"""The per-chunk kernels of the chunked log-probs and entropy (:mod:`verl.utils.torch_functional`), eager or compiled.

The chunked functions read ``[rows, tokens, vocab]`` logits one chunk of tokens at a time. For each chunk a forward
kernel computes what the backward needs (the log-prob of the label and the logsumexp; the entropy, the logsumexp and
``E_p[x]``), and a backward kernel writes the chunk's slice of the logits' gradient. Eager PyTorch runs each as four
to six passes over a float32 copy of the chunk: memory-bound work that took about 18% of a 0.5B-shaped GRPO update
on an H200 (docs/benchmarks.md, the profile of section 8). ``torch.compile`` fuses each into one or two passes over
the logits in their own dtype, with no float32 copy of the chunk.

The four functions below are the one implementation: the eager set calls them as they are, the compiled set calls
their ``torch.compile`` form (:func:`compiled_chunk_kernels`, which ``actor.use_torch_compile`` turns on). They
write into slices of the caller's buffers, so both forms leave the same values in the same places (up to the
rounding of a fused reduction).

Formulas (``x`` the logits of one token, ``p = softmax(x)``, ``g`` the incoming gradient):

- log-prob: ``log p_y = x_y - logsumexp(x)``; ``d/dx_j = g (1[j = y] - p_j)``;
- entropy: ``H = logsumexp(x) - sum_j p_j x_j``; ``d/dx_j = g p_j (E_p[x] - x_j)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = ["ChunkKernels", "EAGER_KERNELS", "compiled_chunk_kernels"]


def logprob_forward(block: torch.Tensor, labels: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """``block [r, t, V]`` logits (any float dtype), ``labels [r, t]``: writes ``out [r, t]`` = ``log p(label)`` and
    ``lse [r, t]`` = ``logsumexp(block)``, both in ``lse``'s dtype (float32, float64 for float64 logits)."""
    x = block.to(lse.dtype)
    block_lse = torch.logsumexp(x, dim=-1)
    lse.copy_(block_lse)
    out.copy_(x.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - block_lse)


def logprob_backward(
    block: torch.Tensor, labels: torch.Tensor, lse: torch.Tensor, grad_out: torch.Tensor, grad_block: torch.Tensor
) -> None:
    """Writes ``grad_block [r, t, V]`` (the logits' dtype) = ``g (onehot(label) - softmax(block))`` for the
    incoming ``grad_out [r, t]``; eager keeps one float32 copy of the chunk, updated in place."""
    g = grad_out.to(lse.dtype).unsqueeze(-1)
    x = block.to(lse.dtype, copy=True)
    x.sub_(lse.unsqueeze(-1)).exp_().mul_(-g)  # -g * softmax
    x.scatter_add_(-1, labels.unsqueeze(-1), g)
    grad_block.copy_(x)  # casts without a temporary


def entropy_forward(block: torch.Tensor, lse: torch.Tensor, mean_x: torch.Tensor) -> None:
    """``block [r, t, V]`` logits: writes ``lse [r, t]`` = ``logsumexp(block)`` and ``mean_x [r, t]`` =
    ``E_p[x]`` (the entropy is ``lse - mean_x``)."""
    x = block.to(lse.dtype)
    block_lse = torch.logsumexp(x, dim=-1)
    probs = torch.sub(x, block_lse.unsqueeze(-1)).exp_()
    lse.copy_(block_lse)
    mean_x.copy_(probs.mul_(x).sum(dim=-1))


def entropy_backward(
    block: torch.Tensor, lse: torch.Tensor, mean_x: torch.Tensor, grad_out: torch.Tensor, grad_block: torch.Tensor
) -> None:
    """Writes ``grad_block [r, t, V]`` = ``g p (E_p[x] - x)`` for the incoming ``grad_out [r, t]``."""
    x = block.to(lse.dtype, copy=True)
    probs = torch.sub(x, lse.unsqueeze(-1)).exp_()
    # p * (E[x] - x) * g, reusing the copy for (E[x] - x)
    x.neg_().add_(mean_x.unsqueeze(-1)).mul_(probs).mul_(grad_out.to(lse.dtype).unsqueeze(-1))
    grad_block.copy_(x)


@dataclass(frozen=True)
class ChunkKernels:
    """The four chunk kernels the chunked log-prob and entropy functions call (see the module docstring)."""

    logprob_forward: Callable[..., None]
    logprob_backward: Callable[..., None]
    entropy_forward: Callable[..., None]
    entropy_backward: Callable[..., None]
    compiled: bool


EAGER_KERNELS = ChunkKernels(logprob_forward, logprob_backward, entropy_forward, entropy_backward, compiled=False)


WHAT = "log-prob/entropy kernels"  # the fallback's warning: "compiling the <WHAT> failed"
_COMPILED: dict[tuple[Any, ...], ChunkKernels] = {}


def compiled_chunk_kernels(eager_on_failure: bool = False, **compile_kwargs: Any) -> ChunkKernels:
    """The compiled kernel set, built once per process for each ``eager_on_failure`` and ``torch.compile`` options
    (every actor shares its compiled code). Compilation happens at a kernel's first call, once per logits dtype,
    then once more with dynamic shapes when the chunk shape changes (a last, shorter chunk)."""
    key = (eager_on_failure, *sorted(compile_kwargs.items()))
    if key not in _COMPILED:
        from verl.utils.compile_errors import CompiledOrEager  # torch._dynamo: only where something compiles

        state = {"failed": False}
        fns = (logprob_forward, logprob_backward, entropy_forward, entropy_backward)
        kernels = [
            CompiledOrEager(torch.compile(fn, **compile_kwargs), fn, state, WHAT, logger, eager_on_failure)
            for fn in fns
        ]
        _COMPILED[key] = ChunkKernels(*kernels, compiled=True)
    return _COMPILED[key]
