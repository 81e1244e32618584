"""The next-token log-probs (and entropies) of a batch at chosen positions, with the LM head run there only.

:func:`next_token_logprobs_at` scores the positions a caller marks: the PPO actor's response positions
(:mod:`verl.workers.actor.response_forward`), SFT's loss tokens, DPO's and KTO's completions; and
:func:`next_token_logits_at` returns the logits there (distillation's loss needs the whole distribution). The batch
runs padded, or packed with ``use_remove_padding`` (:mod:`verl.utils.padding`: rows as wide as the longest
sequence, or one row for flash-attention's varlen kernels). Packed rows keep different columns in each row, so the
LM head's input is selected by flat position (:func:`verl.models.loader.forward_logits_at`) or goes through the
chunked head (``use_fused_kernels``, :mod:`verl.workers.actor.fused_head`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from verl.models.loader import forward_logits_at
from verl.models.vlm import pack_vision_inputs
from verl.utils.logprob_kernels import ChunkKernels
from verl.utils.padding import next_token_labels, pack_padded_batch, varlen_attention
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from verl.workers.actor.fused_head import FUSED_KEY, fused_logprobs_forward


def entropy_or_none(
    logits: torch.Tensor,
    calculate: bool,
    requires_grad: bool,
    chunk_size: int | None = None,
    kernels: ChunkKernels | None = None,
) -> torch.Tensor | None:
    """Per-token entropy of ``[..., V]`` logits (None unless ``calculate``); ``chunk_size`` tokens per fp32 block
    (None: automatic, ~32M logits per block), ``kernels`` the per-chunk kernels (None: eager)."""
    if not calculate:
        return None
    if requires_grad:
        return entropy_from_logits(logits, chunk_size, kernels)
    with torch.no_grad():
        return entropy_from_logits(logits.detach(), chunk_size, kernels)


def sum_pi_squared_of(logits: torch.Tensor) -> torch.Tensor:
    """``sum_v softmax(logits)_v^2`` over the vocabulary (last dim), without gradient, float32: the squared norm term
    of the optimal token baseline (``algorithm.adv_estimator=optimal_token_baseline``)."""
    with torch.no_grad():
        return torch.softmax(logits.detach().float(), dim=-1).square().sum(dim=-1)


class ScoredLogprobs(NamedTuple):
    """What :func:`next_token_logprobs_at` returns: per scored position, in the padded batch's order."""

    log_probs: torch.Tensor  # [1, K] float32
    entropy: torch.Tensor | None  # [1, K] float32, with calculate_entropy
    sum_pi_squared: torch.Tensor | None  # [1, K] float32, with calculate_sum_pi_squared
    positions: torch.Tensor  # [K] flat index (row * seq + col) of each scored position in the padded batch


def _scored_layout(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor | None,
    scored: torch.Tensor,
    pack: bool,
    pack_rows: bool | None,
    extra_inputs: dict[str, Any] | None,
) -> tuple[Any, ...]:
    """``(ids, mask, position_ids, slots [K], positions [K], labels [1, K], extra_inputs)``: the model inputs of the
    padded or packed layout, the flat index of each scored position in those inputs and in the padded batch, and
    the token that follows each in its row."""
    if not pack:
        positions = scored.flatten().nonzero(as_tuple=False).squeeze(-1)
        labels = next_token_labels(input_ids).flatten().index_select(0, positions)[None]
        return input_ids, attention_mask, position_ids, positions, positions, labels, extra_inputs
    if pack_rows is None:
        pack_rows = not extra_inputs and not varlen_attention(module)
    if extra_inputs and pack_rows:
        raise ValueError("a vision-language batch packs into one row only (pack_rows=False)")
    packed = pack_padded_batch(input_ids, attention_mask, into_rows=pack_rows)
    if extra_inputs:  # a VLM's images pass as they are; its token types and M-RoPE positions are packed too
        extra_inputs = pack_vision_inputs(extra_inputs, packed.indices, packed.position_ids)
    keep = scored.flatten().index_select(0, packed.indices).nonzero(as_tuple=False).squeeze(-1)
    slots, positions = packed.slots.index_select(0, keep), packed.indices.index_select(0, keep)
    labels = next_token_labels(packed.input_ids).flatten().index_select(0, slots)[None]
    return packed.input_ids, None, packed.position_ids, slots, positions, labels, extra_inputs


def next_token_logits_at(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor | None,
    scored: torch.Tensor,
    *,
    pack: bool,
    pack_rows: bool | None = None,
    extra_inputs: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits [1, K, vocab], next tokens [1, K], positions [K])`` at the K positions where ``scored`` is true,
    the LM head run on those positions only; ``positions`` are flat indices ``row * seq + col`` of the padded
    batch. The arguments are :func:`next_token_logprobs_at`'s (for a loss that needs the whole distribution at each
    position, as distillation's)."""
    ids, mask, pos, slots, positions, labels, extra_inputs = _scored_layout(
        module, input_ids, attention_mask, position_ids, scored, pack, pack_rows, extra_inputs
    )
    return forward_logits_at(module, ids, mask, pos, slots, extra_inputs), labels, positions


def next_token_logprobs_at(
    module: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor | None,
    scored: torch.Tensor,
    temperature: float = 1.0,
    *,
    pack: bool,
    pack_rows: bool | None = None,
    calculate_entropy: bool = False,
    entropy_requires_grad: bool = False,
    calculate_sum_pi_squared: bool = False,
    entropy_chunk_size: int | None = None,
    fused: bool = False,
    kernels: ChunkKernels | None = None,
    extra_inputs: dict[str, Any] | None = None,
    fused_key: str = FUSED_KEY,
) -> ScoredLogprobs:
    """``log softmax(logits[b, t] / temperature)[input_ids[b, t + 1]]`` (and the entropy) at the K positions where
    ``scored`` is true, with the LM head run on those K positions only.

    Args:
        module: causal LM (transformers; PEFT- and FSDP2-wrapped ones too).
        input_ids, attention_mask: ``[bs, seq]``; ``position_ids`` ``[bs, seq]`` or None (padded layout only).
        scored: ``[bs, seq]`` bool, true at valid positions whose next token (``t + 1``, valid) is scored. A
            position followed by padding is scored against whatever follows it (the caller masks it).
        pack: run the valid tokens packed (:func:`~verl.utils.padding.pack_padded_batch`), no padding computed;
            else the padded rows with their mask.
        pack_rows: rows as wide as the longest sequence (true) or one row (false); None: one row for
            flash-attention's varlen kernels and for a VLM's images (``extra_inputs``), rows otherwise
            (``sdpa``/``eager`` attend a row's whole block-masked square).
        fused: through the chunked LM head (:mod:`verl.workers.actor.fused_head`), never materialising
            ``[K, vocab]`` logits; ``fused_key`` is the config key its refusals name.
        kernels: the per-chunk kernels of the log-probs and entropy (None: eager PyTorch).
        extra_inputs: a VLM's further inputs of the padded rows (packed with the tokens under ``pack``).
    """
    if not fused:
        logits, labels, positions = next_token_logits_at(
            module, input_ids, attention_mask, position_ids, scored, pack=pack, pack_rows=pack_rows,
            extra_inputs=extra_inputs,
        )  # fmt: skip
        if temperature != 1.0:
            logits = logits / temperature
        log_probs = logprobs_from_logits(logits, labels, kernels=kernels)
        entropy = entropy_or_none(logits, calculate_entropy, entropy_requires_grad, entropy_chunk_size, kernels)
        sq = sum_pi_squared_of(logits) if calculate_sum_pi_squared else None
        return ScoredLogprobs(log_probs, entropy, sq, positions)
    ids, mask, pos, slots, positions, labels, extra_inputs = _scored_layout(
        module, input_ids, attention_mask, position_ids, scored, pack, pack_rows, extra_inputs
    )
    log_probs, entropy, sq = fused_logprobs_forward(
        module, ids, mask, pos, labels, temperature, calculate_entropy, entropy_requires_grad,
        extra_inputs=extra_inputs, calculate_sum_pi_squared=calculate_sum_pi_squared, key=fused_key,
        flat_positions=slots,
    )  # fmt: skip
    return ScoredLogprobs(log_probs, entropy, sq, positions)
