"""Remove-padding helpers: pack the valid tokens of a padded batch into one row or a few rows, scatter results back.

A padded batch ``[bs, seqlen]`` (left-padded prompt + right-padded response) wastes compute on pad tokens. Packing
concatenates the valid tokens of the sequences into rows whose ``position_ids`` restart at 0 for each sequence.
With no attention mask, transformers (>= 4.5x, verified on 5.19 for sdpa and eager) detects the sequence
boundaries from the position ids (a position that is not the previous one + 1 starts a new sequence) and builds a
block-diagonal causal mask per row, or uses flash-attention's varlen kernel, so the packed forward equals the
padded one. The model must be called with ``use_cache=False``: a KV cache disables the detection.

Two layouts:

- one row ``[1, total_tokens]``: for flash-attention's variable-length kernels, which never compute across
  sequences;
- rows of the longest sequence's width (``into_rows``): for ``sdpa``/``eager`` attention, which computes the whole
  block-masked ``width x width`` square of a row. Sequences are placed first-fit, longest first, so there are
  fewer rows than in the padded batch and each is no wider: never more attention work than the padded rows, and
  the projections and MLPs run on the valid tokens plus the rows' tails only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def varlen_attention(model: torch.nn.Module) -> bool:
    """Whether ``model`` (a transformers model, through PEFT and FSDP2 wrappers) attends with flash-attention's
    variable-length kernels (``attn_implementation=flash_attention_2``/``_3``), which never compute across the
    sequences of one packed row."""
    attn = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return str(attn or "").startswith("flash_attention")


@dataclass
class PackedBatch:
    """The valid tokens of a padded batch, packed into rows.

    Attributes:
        input_ids: ``[rows, width]`` token ids; the tokens of each sequence are contiguous and in order.
        position_ids: ``[rows, width]`` positions restarting at 0 for each sequence.
        indices: ``[total_tokens]`` flat index (``row * seqlen + col``) of each packed token in the padded batch,
            in the padded batch's order (row by row, column by column).
        slots: ``[total_tokens]`` flat index (``row * width + col``) of the same tokens in ``input_ids``.
        cu_seqlens: ``[bs + 1]`` int32 cumulative sequence lengths (flash-attention's varlen convention; with one
            row they are the sequences' offsets in it).
        batch_size: rows of the padded batch.
        seqlen: columns of the padded batch.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    indices: torch.Tensor
    slots: torch.Tensor
    cu_seqlens: torch.Tensor
    batch_size: int
    seqlen: int

    def tokens(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token values ``[total_tokens, *feature]`` (in :attr:`indices`' order) of ``values [rows, width,
        *feature]`` computed on the packed rows; differentiable."""
        return values.flatten(0, 1).index_select(0, self.slots)


def first_fit_rows(lengths: list[int], width: int) -> list[tuple[int, int]]:
    """``(row, offset)`` of each sequence when sequences of ``lengths`` are placed, longest first, in the first
    row of ``width`` slots with room (first-fit decreasing: at most 11/9 of the optimal number of rows + 1)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    used: list[int] = []
    place = [(0, 0)] * len(lengths)
    for i in order:
        row = next((r for r, filled in enumerate(used) if filled + lengths[i] <= width), len(used))
        if row == len(used):
            used.append(0)
        place[i] = (row, used[row])
        used[row] += lengths[i]
    return place


def pack_padded_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, into_rows: bool = False) -> PackedBatch:
    """Pack the tokens where ``attention_mask`` is 1, with per-sequence positions ``0..len-1``.

    Args:
        input_ids: ``[bs, seqlen]`` token ids (any padding side; valid tokens of a row need not be contiguous, but
            they are read in column order, so the mask must mark one sequence per row).
        attention_mask: ``[bs, seqlen]`` 1 for valid tokens, 0 for padding.
        into_rows: rows as wide as the longest sequence (:func:`first_fit_rows`) instead of one row. The slots of a
            row past its last sequence hold token 0 at positions continuing the row's column index; their
            outputs are meaningless (they attend only to what precedes them, and nothing attends to them).

    Returns:
        A :class:`PackedBatch`. Rows with no valid token contribute nothing.
    """
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"pack_padded_batch expects input_ids and attention_mask of the same shape [bs, seqlen]; got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    bs, seqlen = input_ids.shape
    device = input_ids.device
    valid = attention_mask.bool()
    indices = valid.reshape(-1).nonzero(as_tuple=False).squeeze(-1)
    lengths = valid.sum(dim=-1)
    cu_seqlens = torch.zeros(bs + 1, dtype=torch.int32, device=device)
    cu_seqlens[1:] = lengths.cumsum(0).to(torch.int32)
    # Position of each valid token within its own sequence: the running count of valid tokens in its row, minus 1.
    positions = (valid.long().cumsum(dim=-1) - 1).reshape(-1)[indices]
    tokens = input_ids.reshape(-1)[indices]
    if not into_rows:
        slots = torch.arange(indices.numel(), device=device)
        return PackedBatch(tokens[None], positions[None], indices, slots, cu_seqlens, bs, seqlen)
    host_lengths = lengths.tolist()
    width = max(max(host_lengths, default=0), 1)
    place = first_fit_rows(host_lengths, width)
    rows = max((row for row, _ in place), default=0) + 1
    starts = torch.tensor([row * width + offset for row, offset in place], dtype=torch.long, device=device)
    slots = starts.repeat_interleave(lengths) + positions
    packed_ids = input_ids.new_zeros(rows * width).index_copy(0, slots, tokens)
    packed_positions = torch.arange(width, device=device).repeat(rows).index_copy(0, slots, positions)
    return PackedBatch(
        packed_ids.view(rows, width), packed_positions.view(rows, width), indices, slots, cu_seqlens, bs, seqlen
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
    """Labels for next-token prediction in packed rows: token ``i`` of a row is labelled with token ``i + 1``.

    The label of the last token of each sequence is the first token of the next one (and the last label of a row
    wraps around); callers discard those positions, since a sequence's last logit predicts nothing inside it.

    Args:
        packed_input_ids: ``[rows, width]`` or ``[total_tokens]``.

    Returns:
        Tensor of the same shape, each row rolled by one to the left.
    """
    return torch.roll(packed_input_ids, shifts=-1, dims=-1)
