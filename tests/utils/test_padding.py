"""Remove-padding helpers: packing layouts (one row, rows), scatter back, and packed forward == padded forward on a
tiny llama."""

from __future__ import annotations

import pytest
import torch

from verl.utils.padding import first_fit_rows, next_token_labels, pack_padded_batch, unpack_to_padded


def _left_right_padded() -> tuple[torch.Tensor, torch.Tensor]:
    # Row 0: 2 pad, prompt [5, 6], response [7, 8]; row 1: no pad, prompt [1, 2, 3, 4], response [9, 0(pad)].
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 9, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    return ids, mask


def test_pack_layout_and_positions() -> None:
    ids, mask = _left_right_padded()
    packed = pack_padded_batch(ids, mask)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 1, 2, 3, 4, 9]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 4]]
    assert packed.indices.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert packed.cu_seqlens.tolist() == [0, 4, 9]
    assert (packed.batch_size, packed.seqlen) == (2, 6)


def test_unpack_round_trip_and_zero_fill() -> None:
    ids, mask = _left_right_padded()
    packed = pack_padded_batch(ids, mask)
    back = unpack_to_padded(packed.input_ids.float(), packed.indices, 2, 6)
    expected = (ids * mask).float()
    assert torch.equal(back, expected)
    feats = torch.arange(9 * 2, dtype=torch.float32).reshape(9, 2)
    out = unpack_to_padded(feats, packed.indices, 2, 6)
    assert out.shape == (2, 6, 2)
    assert out[0, 0].tolist() == [0.0, 0.0] and out[0, 2].tolist() == [0.0, 1.0] and out[1, 5].tolist() == [0.0, 0.0]


def test_unpack_is_differentiable() -> None:
    vals = torch.ones(3, requires_grad=True)
    out = unpack_to_padded(vals, torch.tensor([0, 2, 3]), 2, 2)
    (out * torch.tensor([[1.0, 5.0], [2.0, 3.0]])).sum().backward()
    assert vals.grad.tolist() == [1.0, 2.0, 3.0]


def test_next_token_labels() -> None:
    assert next_token_labels(torch.tensor([[1, 2, 3]])).tolist() == [[2, 3, 1]]


def test_bad_shapes_raise() -> None:
    import pytest

    with pytest.raises(ValueError, match="same shape"):
        pack_padded_batch(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4))
    with pytest.raises(ValueError, match="must match"):
        unpack_to_padded(torch.zeros(4), torch.tensor([0, 1]), 1, 2)


def test_packed_forward_equals_padded_on_tiny_llama() -> None:
    """transformers 5.19 detects packed sequences from restarting position_ids when there is no mask/cache."""
    from verl.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm().eval()
    gen = torch.Generator().manual_seed(1)
    lens = [5, 3, 8]
    seqlen = 8
    ids = torch.randint(0, 256, (3, seqlen), generator=gen)
    mask = torch.zeros(3, seqlen, dtype=torch.long)
    for i, n in enumerate(lens):
        mask[i, seqlen - n :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        packed = pack_padded_batch(ids, mask)
        out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
        restored = unpack_to_padded(out[0], packed.indices, 3, seqlen)
    valid = mask.bool()
    assert torch.allclose(restored[valid], padded[valid], atol=1e-5)


def _three_sequences() -> tuple[torch.Tensor, torch.Tensor]:
    # Lengths 4, 5 and 1: rows of width 5 hold [5] and [4, 1].
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 9, 0], [0, 0, 0, 11, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 0, 0]])
    return ids, mask


def test_first_fit_rows_places_the_longest_first() -> None:
    assert first_fit_rows([4, 5, 1], 5) == [(1, 0), (0, 0), (1, 4)]
    assert first_fit_rows([3, 3, 3, 3], 6) == [(0, 0), (0, 3), (1, 0), (1, 3)]
    assert first_fit_rows([], 1) == []


def test_pack_into_rows_layout() -> None:
    ids, mask = _three_sequences()
    packed = pack_padded_batch(ids, mask, into_rows=True)
    assert packed.input_ids.tolist() == [[1, 2, 3, 4, 9], [5, 6, 7, 8, 11]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 0]]
    assert packed.indices.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 10, 15]
    assert packed.slots.tolist() == [5, 6, 7, 8, 0, 1, 2, 3, 4, 9]
    assert torch.equal(packed.tokens(packed.input_ids), ids.flatten()[packed.indices])
    one_row = pack_padded_batch(ids, mask)
    assert one_row.slots.tolist() == list(range(10))
    assert torch.equal(one_row.tokens(one_row.input_ids), packed.tokens(packed.input_ids))


def test_rows_tail_continues_the_column_positions() -> None:
    ids = torch.tensor([[1, 2, 3, 4], [0, 0, 5, 6], [0, 0, 0, 7]])
    mask = (ids > 0).long()
    packed = pack_padded_batch(ids, mask, into_rows=True)
    assert packed.input_ids.tolist() == [[1, 2, 3, 4], [5, 6, 7, 0]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 0, 3]]  # the tail slot keeps its column: 3


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_rows_forward_equals_padded_on_tiny_llama(attn: str) -> None:
    """Several sequences in a row of the batch dimension: transformers builds a block-diagonal mask per row."""
    from verl.models.tiny import make_tiny_causal_lm

    model = make_tiny_causal_lm().eval()
    model.config._attn_implementation = attn
    gen = torch.Generator().manual_seed(2)
    lens = [9, 3, 5, 4, 1, 6]
    seqlen = 12
    ids = torch.randint(0, 256, (len(lens), seqlen), generator=gen)
    mask = torch.zeros(len(lens), seqlen, dtype=torch.long)
    for i, n in enumerate(lens):
        mask[i, 2 : 2 + n] = 1  # left and right padding
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        packed = pack_padded_batch(ids, mask, into_rows=True)
        assert packed.input_ids.shape == (4, 9)  # [9], [6, 3], [5, 4], [1]
        out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
        restored = unpack_to_padded(packed.tokens(out), packed.indices, len(lens), seqlen)
    valid = mask.bool()
    torch.testing.assert_close(restored[valid], padded[valid], atol=1e-5, rtol=1e-5)
