"""Token choice of the ``hf`` engine's decode loops: one sampler for every loop (the fast KV-cache loop, the plain
loop for modules without ``generate``), so greedy decoding, temperature, top-k, top-p and the seeded draws mean the
same everywhere.

Each step draws nothing from the global RNG: the loops draw every step's uniforms up front (``[batch, steps]``), one
per row and step, so a row's tokens do not depend on which rows share its batch and a step can be compiled or
captured as a CUDA graph.
"""

from __future__ import annotations

import torch

__all__ = ["choose_tokens", "filter_top_k_top_p", "sample_from_logits", "token_log_probs"]


def filter_top_k_top_p(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0) -> torch.Tensor:
    """Mask ``logits [bs, vocab]`` to ``-inf`` outside the top-k tokens and outside the nucleus of mass ``top_p``.

    Nucleus sampling (Holtzman et al., 2020): keep the smallest set of most likely tokens whose cumulative
    probability reaches ``top_p``; a token is dropped when the mass of the tokens ranked above it already
    exceeds ``top_p``, so the most likely token is always kept. ``top_k <= 0`` and ``top_p >= 1`` are off.
    """
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_above = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_above > top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_from_logits(logits: torch.Tensor, uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row drawn from ``softmax(logits)`` ``[batch, vocab]`` -> ``[batch]`` (``-inf`` = excluded).

    Inverse-CDF sampling: ``u ~ U[0, total)`` located in the running sum of the probabilities. It draws from the
    same distribution as ``torch.multinomial(probs, 1)``, which on CPU uses the exponential race (one exponential
    variate per vocabulary entry: ~50 ms per decode step for 32 rows x 49k tokens, a quarter of the decode time);
    this needs one uniform per row and a cumulative sum. Uses (and advances) torch's global RNG, unless
    ``uniforms [batch, 1]`` (draws from ``U[0, 1)``) are given: decode loops draw every step's uniforms up front,
    one per row and step, so a row's tokens do not depend on which other rows share its batch and the step has no
    RNG call inside (it can be compiled or captured as a CUDA graph).
    """
    probs = torch.softmax(logits.float(), dim=-1)
    cdf = probs.cumsum(dim=-1)
    if uniforms is None:
        uniforms = torch.rand(cdf.shape[0], 1, device=cdf.device, dtype=cdf.dtype)
    u = uniforms.to(cdf.dtype) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return tokens.clamp_(max=logits.shape[-1] - 1)


def choose_tokens(
    scores: torch.Tensor,
    greedy: bool,
    temperature: float = 1.0,
    top_k: int = -1,
    top_p: float = 1.0,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """The next token of every row from ``scores [batch, vocab]`` (logits, fp32, with any forbidden token already at
    ``-inf``) -> ``[batch]``: the argmax when ``greedy``, else a draw from ``softmax(filter(scores / temperature))``
    with the top-k/top-p filter (:func:`filter_top_k_top_p`) and ``uniforms [batch, 1]`` (:func:`sample_from_logits`).
    """
    if greedy:
        return scores.argmax(dim=-1)
    if temperature != 1.0:  # x / 1 == x: no pass over [batch, vocab] for nothing (a kernel of every decode step)
        scores = scores / temperature
    return sample_from_logits(filter_top_k_top_p(scores, top_k, top_p), uniforms)


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log softmax(logits / temperature)`` at ``tokens``: ``[..., vocab]``, ``[...]`` -> ``[...]`` (fp32). The
    rollout's log-probs: taken from the unfiltered logits, as the trainer computes them."""
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
