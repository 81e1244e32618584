"""verl.utils.torch_functional's v0.9 helpers calculate_sum_pi_squared_from_logits and expand_as_nested, against
hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from verl.utils.torch_functional import calculate_sum_pi_squared_from_logits, expand_as_nested


def test_sum_pi_squared_by_hand() -> None:
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: 4 * (1/4)^2 = 0.25
            [0.0, math.log(3.0), -math.inf, -math.inf],  # pi = (1/4, 3/4, 0, 0): 1/16 + 9/16 = 0.625
            [5.0, -math.inf, -math.inf, -math.inf],  # one-hot: 1
        ],
        dtype=torch.float64,
    )
    out = calculate_sum_pi_squared_from_logits(logits)
    assert out.shape == (3,)
    torch.testing.assert_close(out, torch.tensor([0.25, 0.625, 1.0], dtype=torch.float64))


def test_sum_pi_squared_large_logits_stay_finite() -> None:
    # the same (1/4, 3/4) distribution shifted by 1000: exp(1000) overflows, the log-sum-exp form does not
    logits = torch.tensor([[1000.0, 1000.0 + math.log(3.0)], [-1000.0, -1000.0 + math.log(3.0)]], dtype=torch.float64)
    out = calculate_sum_pi_squared_from_logits(logits)
    torch.testing.assert_close(out, torch.tensor([0.625, 0.625], dtype=torch.float64))


def test_sum_pi_squared_gradient() -> None:
    # d/dz_k sum_v pi_v^2 = 2 pi_k (pi_k - sum_v pi_v^2); for pi = (1/4, 3/4): 2/4 (1/4 - 5/8), 6/4 (3/4 - 5/8)
    logits = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64, requires_grad=True)
    calculate_sum_pi_squared_from_logits(logits).backward()
    torch.testing.assert_close(logits.grad, torch.tensor([-0.1875, 0.1875], dtype=torch.float64))


def test_expand_as_nested_repeats_each_value_over_its_row() -> None:
    nested = torch.nested.as_nested_tensor([torch.zeros(2), torch.zeros(3), torch.zeros(1)], layout=torch.jagged)
    out = expand_as_nested(torch.tensor([7.5, -1.0, 2.0]), nested)
    assert out.is_nested
    assert out.values().tolist() == [7.5, 7.5, -1.0, -1.0, -1.0, 2.0]
    assert out.offsets().tolist() == [0, 2, 5, 6]
    assert [row.tolist() for row in out.unbind()] == [[7.5, 7.5], [-1.0, -1.0, -1.0], [2.0]]


def test_expand_as_nested_rejects_bad_shapes() -> None:
    nested = torch.nested.as_nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    with pytest.raises(AssertionError, match="must be a nested tensor"):
        expand_as_nested(torch.tensor([1, 2]), torch.zeros(2, 3))
    with pytest.raises(AssertionError, match="3 values for a batch of 2"):
        expand_as_nested(torch.tensor([1, 2, 3]), nested)
    with pytest.raises(AssertionError, match="must be 1-D"):
        expand_as_nested(torch.tensor([[1, 2]]), nested)
    with pytest.raises(AssertionError, match="must be \\[batch, j\\]"):
        expand_as_nested(torch.tensor([1, 2]), nested.unsqueeze(-1))
