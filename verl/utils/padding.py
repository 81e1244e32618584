"""Remove-padding helpers: pack the valid tokens of a padded batch into one row and scatter results back.

A padded batch ``[bs, seqlen]`` (left-padded prompt + right-padded response) wastes compute on pad tokens. Packing
concatenates the valid tokens of every row into a single row ``[1, total_tokens]`` whose ``position_ids`` restart at
0 for each sequence. With no attention mask, transformers (>= 4.5x, verified on 5.19 for sdpa and eager) detects
the sequence boundaries from the position ids (a position that is not the previous one + 1 starts a new sequence)
and builds a block-diagonal causal mask, or uses flash-attention's varlen kernel, so the packed forward equals
the padded one. The model must be called with ``use_cache=False``: a KV cache disables the detection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedBatch:
    """The valid tokens of a padded batch, packed into one row.

    Attributes:
        input_ids: ``[1, total_tokens]`` token ids of all sequences, concatenated in row order.
        position_ids: ``[1, total_tokens]`` positions restarting at 0 for each sequence.
        indices: ``[total_tokens]`` flat index (``row * seqlen + col``) of each packed token in the padded batch.
        cu_seqlens: ``[bs + 1]`` int32 cumulative sequence lengths (flash-attention's varlen convention).
        batch_size: rows of the padded batch.
        seqlen: columns of the padded batch.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    batch_size: int
    seqlen: int


def pack_padded_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> PackedBatch:
    """Pack the tokens where ``attention_mask`` is 1 into one row with per-sequence positions ``0..len-1``.

    Args:
        input_ids: ``[bs, seqlen]`` token ids (any padding side; valid tokens of a row need not be contiguous, but
            they are read in column order, so the mask must mark one sequence per row).
        attention_mask: ``[bs, seqlen]`` 1 for valid tokens, 0 for padding.

    Returns:
        A :class:`PackedBatch`. Rows with no valid token contribute nothing.
    """
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"pack_padded_batch expects input_ids and attention_mask of the same shape [bs, seqlen]; got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    bs, seqlen = input_ids.shape
    valid = attention_mask.bool()
    indices = valid.reshape(-1).nonzero(as_tuple=False).squeeze(-1)
    lengths = valid.sum(dim=-1)
    cu_seqlens = torch.zeros(bs + 1, dtype=torch.int32, device=input_ids.device)
    cu_seqlens[1:] = lengths.cumsum(0).to(torch.int32)
    # Position of each valid token within its own sequence: the running count of valid tokens in its row, minus 1.
    positions_padded = valid.long().cumsum(dim=-1) - 1
    position_ids = positions_padded.reshape(-1)[indices]
    packed_ids = input_ids.reshape(-1)[indices]
    return PackedBatch(
        input_ids=packed_ids.unsqueeze(0),
        position_ids=position_ids.unsqueeze(0),
        indices=indices,
        cu_seqlens=cu_seqlens,
        batch_size=bs,
        seqlen=seqlen,
    )


def unpack_to_padded(packed: torch.Tensor, indices: torch.Tensor, batch_size: int, seqlen: int) -> torch.Tensor:
    """Scatter per-token values of a packed row back to the padded layout, with 0 at padded positions.

    Args:
        packed: ``[total_tokens, *feature]`` (or ``[1, total_tokens, *feature]``) values, one per packed token.
        indices: ``[total_tokens]`` flat padded index of each packed token (``PackedBatch.indices``).
        batch_size: rows of the padded batch.
        seqlen: columns of the padded batch.

    Returns:
        ``[batch_size, seqlen, *feature]`` tensor; differentiable with respect to ``packed``.
    """
    if packed.dim() >= 2 and packed.shape[0] == 1 and packed.shape[1] == indices.numel():
        packed = packed.squeeze(0)
    if packed.shape[0] != indices.numel():
        raise ValueError(
            f"unpack_to_padded: {packed.shape[0]} packed values but {indices.numel()} indices; they must match"
        )
    feature = packed.shape[1:]
    out = packed.new_zeros((batch_size * seqlen, *feature))
    out = out.index_copy(0, indices, packed)
    return out.reshape(batch_size, seqlen, *feature)


def next_token_labels(packed_input_ids: torch.Tensor) -> torch.Tensor:
    """Labels for next-token prediction in a packed row: token ``i`` is labelled with token ``i + 1``.

    The label of the last token of each sequence is the first token of the next one (and the last label wraps
    around); callers discard those positions, since a sequence's last logit predicts nothing inside it.

    Args:
        packed_input_ids: ``[1, total_tokens]`` or ``[total_tokens]``.

    Returns:
        Tensor of the same shape, rolled by one to the left.
    """
    return torch.roll(packed_input_ids, shifts=-1, dims=-1)
