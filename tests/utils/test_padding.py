"""Remove-padding helpers: packing layout, scatter back, and packed forward == padded forward on a tiny llama."""

from __future__ import annotations

import torch

from verl.utils.padding import next_token_labels, pack_padded_batch, unpack_to_padded


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
