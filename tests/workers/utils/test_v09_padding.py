"""verl.workers.utils.padding: padded <-> packed (jagged) conversions on a hand-made batch."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.workers.utils.padding import (
    build_attention_mask_from_nested,
    left_right_2_no_padding,
    no_padding_2_padding,
    response_from_nested,
    response_to_nested,
)


def _batch() -> TensorDict:
    # prompts of width 3 (left-padded), responses of width 3 (right-padded)
    attention_mask = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    input_ids = torch.arange(12).reshape(2, 6)
    return TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "response_mask": attention_mask[:, 3:],
            "prompts": input_ids[:, :3],
            "responses": input_ids[:, 3:],
        },
        batch_size=[2],
    )


def test_pack_and_slice_the_response_back() -> None:
    data = left_right_2_no_padding(_batch())
    ids = data["input_ids"]
    assert ids.is_nested and ids.offsets().tolist() == [0, 4, 10]
    assert ids.values().tolist() == [1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert data["position_ids"].values().tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    # a model output that is the packed token id itself: position t "predicts" token t + 1
    out = no_padding_2_padding(ids.values().float(), _batch())
    assert out.tolist() == [[2.0, 3.0, 0.0], [8.0, 9.0, 10.0]]  # responses 3,4 and 9,10,11, read one position early
    assert build_attention_mask_from_nested(ids).tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6]


def test_response_nested_round_trip() -> None:
    mask = torch.nested.as_nested_tensor([torch.ones(1), torch.ones(3)], layout=torch.jagged)
    nested = response_to_nested(torch.tensor([[5.0, 0.0, 0.0], [6.0, 7.0, 8.0]]), mask)
    assert [r.tolist() for r in nested.unbind()] == [[5.0], [6.0, 7.0, 8.0]]
    seq = torch.nested.as_nested_tensor([torch.arange(4.0), torch.arange(6.0)], layout=torch.jagged)
    assert [r.tolist() for r in response_from_nested(seq, mask).unbind()] == [[2.0], [2.0, 3.0, 4.0]]
