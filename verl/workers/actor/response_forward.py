"""The response forward of one micro-batch: the log-probs (and entropies) of its response tokens under the model.

:func:`response_logits_forward` runs the model on whole sequences (padded, or packed with ``use_remove_padding``)
and scores the response positions; :func:`sequence_parallel_response_forward` splits each sequence over a Ulysses
group. Both compute the log-probs and entropies through the chunked functions of
:mod:`verl.utils.torch_functional` (their per-chunk kernels eager or compiled, :mod:`verl.utils.logprob_kernels`) or
through the chunked LM head (``use_fused_kernels``). The actor (:mod:`verl.workers.actor.dp_actor`) calls them per
micro-batch, for the old-log-prob and reference passes and the update. The packed path scores its response
positions through :func:`verl.workers.actor.token_scoring.next_token_logprobs_at`.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from verl.models.loader import forward_logits
from verl.utils.logprob_kernels import ChunkKernels
from verl.utils.padding import next_token_labels, pack_padded_batch, unpack_to_padded
from verl.utils.torch_functional import logprobs_from_logits
from verl.workers.actor.fused_head import fused_logprobs_forward
from verl.workers.actor.token_scoring import entropy_or_none, next_token_logprobs_at, sum_pi_squared_of


def ulysses_size(group: Any) -> int:
    """The number of ranks of a sequence-parallel group."""
    import torch.distributed as dist

    return dist.get_world_size(group)


def sequence_parallel_inputs(micro: TensorDict, use_remove_padding: bool, sp_group: Any) -> tuple[Any, ...]:
    """``(input_ids, attention_mask | None, position_ids, packed | None, length)`` of a micro-batch as one
    sequence-parallel forward sees them: the padded rows, or with ``use_remove_padding`` the valid tokens packed
    into one row (no mask); the mask is already right-padded to a multiple of the group size, ``length`` is the
    unpadded sequence length."""
    from verl.utils import ulysses

    input_ids, attention_mask = micro["input_ids"], micro["attention_mask"]
    packed = None
    if use_remove_padding:
        packed = pack_padded_batch(input_ids, attention_mask)
        ids, positions, mask = packed.input_ids, packed.position_ids, None
    else:
        ids, mask = input_ids, attention_mask
        positions = micro["position_ids"] if "position_ids" in micro.keys() else (mask.cumsum(-1) - 1).clamp(min=0)
    if mask is not None:
        mask = ulysses.pad_to_multiple(mask, ulysses_size(sp_group), 0)
    return ids, mask, positions, packed, ids.shape[1]


def sequence_parallel_response_forward(
    module: torch.nn.Module,
    micro: TensorDict,
    temperature: float,
    calculate_entropy: bool,
    entropy_requires_grad: bool,
    use_remove_padding: bool,
    sp_group: Any,
    grad_scale: float,
    calculate_sum_pi_squared: bool = False,
    entropy_chunk_size: int | None = None,
    fused: bool = False,
    kernels: ChunkKernels | None = None,
) -> tuple[torch.Tensor, ...]:
    """:func:`response_logits_forward` with each sequence split over the ranks of ``sp_group`` (Ulysses).

    Every rank of the group holds the same micro-batch. The (padded or packed) sequences are right-padded to a
    multiple of the group size, each rank runs the model on its contiguous slice of positions (attention exchanges
    heads for positions, see :mod:`verl.utils.ulysses`), scores its positions' next tokens, and the per-position
    log-probs / entropies are all-gathered back to whole sequences. ``grad_scale`` multiplies the gradient that
    reaches each rank's slice (the group size, so that gradients averaged over all ranks by FSDP equal the
    average over the ``world / sp`` data-parallel groups).
    """
    from verl.utils import ulysses

    bs, seqlen = micro["input_ids"].shape
    response_len = micro["responses"].shape[-1]
    ids, mask, positions, packed, length = sequence_parallel_inputs(micro, use_remove_padding, sp_group)
    labels = ulysses.pad_to_multiple(next_token_labels(ids), ulysses_size(sp_group), 0)
    ids, positions = (ulysses.pad_to_multiple(t, ulysses_size(sp_group), 0) for t in (ids, positions))
    with ulysses.ulysses_context(sp_group, mask, positions):
        local_mask = ulysses.local_slice(mask) if mask is not None else None
        local_ids, local_positions = ulysses.local_slice(ids), ulysses.local_slice(positions)
        if fused:
            log_probs, entropy, sq = fused_logprobs_forward(
                module, local_ids, local_mask, local_positions, ulysses.local_slice(labels), temperature,
                calculate_entropy, entropy_requires_grad, calculate_sum_pi_squared=calculate_sum_pi_squared,
            )  # fmt: skip
        else:
            logits = forward_logits(module, local_ids, local_mask, local_positions)
            if temperature != 1.0:
                logits = logits / temperature
            log_probs = logprobs_from_logits(logits, ulysses.local_slice(labels), kernels=kernels)
            entropy = entropy_or_none(logits, calculate_entropy, entropy_requires_grad, entropy_chunk_size, kernels)
            sq = sum_pi_squared_of(logits) if calculate_sum_pi_squared else None
        log_probs = ulysses.gather_sequence(log_probs, 1, grad_scale)[:, :length]
        if entropy is not None:
            entropy = ulysses.gather_sequence(entropy, 1, grad_scale)[:, :length]
        if sq is not None:
            sq = ulysses.gather_sequence(sq, 1, 1.0)[:, :length]
    if use_remove_padding:
        log_probs = unpack_to_padded(log_probs[0], packed.indices, bs, seqlen)
        entropy = unpack_to_padded(entropy[0], packed.indices, bs, seqlen) if entropy is not None else None
        sq = unpack_to_padded(sq[0], packed.indices, bs, seqlen) if sq is not None else None
    window = slice(seqlen - response_len - 1, seqlen - 1)
    out = (log_probs[:, window], (entropy[:, window] if entropy is not None else None))
    return out + (sq[:, window],) if sq is not None else out


def response_logits_forward(
    module: torch.nn.Module,
    micro: TensorDict,
    temperature: float,
    calculate_entropy: bool,
    entropy_requires_grad: bool,
    use_remove_padding: bool,
    extra_inputs: dict[str, Any] | None = None,
    calculate_sum_pi_squared: bool = False,
    entropy_chunk_size: int | None = None,
    fused: bool = False,
    kernels: ChunkKernels | None = None,
    pack_rows: bool | None = None,
) -> tuple[torch.Tensor, ...]:
    """Log-probs and entropies of the response tokens of one micro-batch.

    The logits at position ``t`` predict token ``t + 1``, so the response tokens (the last ``response_len``
    columns of ``input_ids``) are scored by the logits at columns ``[-response_len - 1, -1)``. Logits are divided by
    ``temperature`` first (the sampling distribution of the rollout). With ``use_remove_padding`` the valid tokens
    are packed (see :mod:`verl.utils.padding`) and the LM head runs on the scoring positions only.

    Args:
        module: causal LM called through ``forward_logits``.
        micro: TensorDict with ``input_ids``, ``attention_mask``, ``position_ids`` ``[bs, seqlen]`` and
            ``responses`` ``[bs, response_len]``.
        temperature: positive logit divisor.
        calculate_entropy: also return the entropy of the tempered distribution.
        entropy_requires_grad: keep the entropy in the graph (entropy bonus); otherwise it is computed detached.
        use_remove_padding: pack the valid tokens and run without padding.
        extra_inputs: further model inputs of the padded rows (a VLM's images and 3-D positions, see
            :func:`~verl.models.vlm.vision_forward_kwargs`); packed with the tokens under
            ``use_remove_padding`` (:func:`~verl.models.vlm.pack_vision_inputs`).

        calculate_sum_pi_squared: also return ``sum_v pi(v)^2`` per response token (no gradient) as a third item.
        fused: through the LM head in token chunks, never materialising the logits
            (``model.use_fused_kernels``, :mod:`verl.workers.actor.fused_head`); the same values.
        kernels: the per-chunk kernels of the log-probs and entropy (:mod:`verl.utils.logprob_kernels`; None:
            eager PyTorch).
        pack_rows: with ``use_remove_padding``, pack into rows as wide as the longest sequence (true) or into one
            row (false). None: one row for flash-attention's varlen kernels and for a VLM's images, rows otherwise
            (``sdpa``/``eager`` attend a row's whole block-masked square).

    Returns:
        ``(log_probs [bs, response_len], entropy [bs, response_len] | None)`` in float32, plus ``sum_pi_squared
        [bs, response_len]`` with ``calculate_sum_pi_squared``; values at padded response positions are meaningless
        and must be masked by the caller.
    """
    input_ids = micro["input_ids"]
    attention_mask = micro["attention_mask"]
    responses = micro["responses"]
    bs, seqlen = input_ids.shape
    response_len = responses.shape[-1]

    def entropy_of(logits: torch.Tensor) -> torch.Tensor | None:
        return entropy_or_none(logits, calculate_entropy, entropy_requires_grad, entropy_chunk_size, kernels)

    if use_remove_padding:
        # the positions whose logits score a response token: padded columns [seqlen - response_len - 1, seqlen - 1)
        cols = torch.arange(seqlen, device=input_ids.device)
        window = (cols >= seqlen - response_len - 1) & (cols < seqlen - 1)
        out = next_token_logprobs_at(
            module, input_ids, attention_mask, None, attention_mask.bool() & window, temperature, pack=True,
            pack_rows=pack_rows, calculate_entropy=calculate_entropy, entropy_requires_grad=entropy_requires_grad,
            calculate_sum_pi_squared=calculate_sum_pi_squared, entropy_chunk_size=entropy_chunk_size, fused=fused,
            kernels=kernels, extra_inputs=extra_inputs,
        )  # fmt: skip
        padded = tuple(
            unpack_to_padded(t[0], out.positions, bs, seqlen)[:, -response_len - 1 : -1] if t is not None else None
            for t in (out.log_probs, out.entropy, out.sum_pi_squared)
        )
        return padded if calculate_sum_pi_squared else padded[:2]

    position_ids = micro["position_ids"] if "position_ids" in micro.keys() else None
    if fused:  # the kept positions score the responses, the last one nothing (its label is a placeholder)
        labels = torch.cat([responses, responses[:, :1]], dim=1)
        out = fused_logprobs_forward(
            module, input_ids, attention_mask, position_ids, labels, temperature, calculate_entropy,
            entropy_requires_grad, response_len + 1, extra_inputs, calculate_sum_pi_squared,
        )  # fmt: skip
        out = tuple(t[:, :-1] if t is not None else None for t in out)
        return out if calculate_sum_pi_squared else out[:2]
    # the LM head (vocab-sized) runs on the last response_len + 1 positions only when the model supports it
    logits = forward_logits(
        module, input_ids, attention_mask, position_ids, logits_to_keep=response_len + 1, extra_inputs=extra_inputs
    )
    logits = logits[:, -response_len - 1 : -1, :]
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logprobs_from_logits(logits, responses, kernels=kernels)
    if calculate_sum_pi_squared:
        return log_probs, entropy_of(logits), sum_pi_squared_of(logits)
    return log_probs, entropy_of(logits)
