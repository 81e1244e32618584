"""Tests of verl.utils.torch_functional: chunked log-probs/entropy against the naive log-softmax, masked stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.utils import torch_functional as verl_F


def _naive_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def _naive_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


@pytest.mark.parametrize("chunk_size", [1, 4, 5, None, 1000])
def test_logprobs_match_naive_values_and_grads(chunk_size: int | None) -> None:
    logits = (torch.randn(3, 7, 11) * 3).requires_grad_(True)
    labels = torch.randint(0, 11, (3, 7))
    upstream = torch.randn(3, 7)

    ref_logits = logits.detach().clone().requires_grad_(True)
    expected = _naive_logprobs(ref_logits, labels)
    (expected * upstream).sum().backward()

    got = verl_F.logprobs_from_logits(logits, labels, chunk_size=chunk_size)
    (got * upstream).sum().backward()

    assert got.shape == (3, 7) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits.grad, ref_logits.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_entropy_matches_naive_values_and_grads(chunk_size: int | None) -> None:
    logits = (torch.randn(2, 5, 9) * 2).requires_grad_(True)
    upstream = torch.randn(2, 5)
    ref_logits = logits.detach().clone().requires_grad_(True)
    expected = _naive_entropy(ref_logits)
    (expected * upstream).sum().backward()

    got = verl_F.entropy_from_logits(logits, chunk_size=chunk_size)
    (got * upstream).sum().backward()

    # lse - E[x] and -sum p log p round differently in fp32; agree to a few ulps of the O(1) entropy.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits.grad, ref_logits.grad, rtol=1e-5, atol=1e-5)


def test_uniform_logits_entropy_and_logprob_by_hand() -> None:
    logits = torch.zeros(2, 4)
    torch.testing.assert_close(verl_F.entropy_from_logits(logits), torch.full((2,), math.log(4)))
    torch.testing.assert_close(
        verl_F.logprobs_from_logits(logits, torch.tensor([0, 3])), torch.full((2,), -math.log(4))
    )


def test_gradcheck_float64() -> None:
    logits = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 6, (4,))
    assert torch.autograd.gradcheck(lambda x: verl_F.logprobs_from_logits(x, labels, chunk_size=3), (logits,))
    assert torch.autograd.gradcheck(lambda x: verl_F.entropy_from_logits(x, chunk_size=3), (logits,))


def test_bf16_logits_computed_in_fp32() -> None:
    logits = (torch.randn(6, 50) * 4).to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, 50, (6,))
    got = verl_F.logprobs_from_logits(logits, labels, chunk_size=4)
    assert got.dtype == torch.float32
    # Exactly the fp32 log-softmax of the bf16 values: the upcast happens per chunk, before any arithmetic.
    torch.testing.assert_close(got, _naive_logprobs(logits.detach(), labels), rtol=1e-6, atol=1e-6)
    got.sum().backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16
    ref = logits.detach().float().requires_grad_(True)
    _naive_logprobs(ref, labels).sum().backward()
    torch.testing.assert_close(logits.grad.float(), ref.grad, rtol=1e-2, atol=1e-2)


def test_no_full_fp32_copy_is_saved_for_backward() -> None:
    n_tokens, vocab = 16, 32
    logits = torch.randn(n_tokens, vocab).to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, vocab, (n_tokens,))
    saved: list[tuple[torch.dtype, int]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = verl_F.logprobs_from_logits(logits, labels, chunk_size=4) + verl_F.entropy_from_logits(logits)
    out.sum().backward()
    assert saved, "the hooks should have seen the saved tensors"
    assert all(not (dtype == torch.float32 and numel >= n_tokens * vocab) for dtype, numel in saved)


def test_logprobs_shape_mismatch_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="labels"):
        verl_F.logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        verl_F.logprobs_from_logits(torch.zeros(2, 5), torch.zeros(2, dtype=torch.long), chunk_size=0)


def test_masked_stats_match_numpy() -> None:
    values = torch.tensor([[1.0, 2.0, 100.0], [4.0, float("nan"), 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    kept = np.array([1.0, 2.0, 4.0, 6.0])
    assert verl_F.masked_sum(values, mask).item() == pytest.approx(kept.sum())
    assert verl_F.masked_mean(values, mask).item() == pytest.approx(kept.mean())
    torch.testing.assert_close(verl_F.masked_mean(values, mask, axis=-1), torch.tensor([1.5, 5.0]))
    assert verl_F.masked_var(values, mask).item() == pytest.approx(kept.var(ddof=1), rel=1e-6)
    assert verl_F.masked_var(values, mask, unbiased=False).item() == pytest.approx(kept.var(), rel=1e-6)

    whitened = verl_F.masked_whiten(values, mask)
    expected = (kept - kept.mean()) / math.sqrt(kept.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(whitened[mask.bool()].numpy(), expected, rtol=1e-5)
    unshifted = verl_F.masked_whiten(values, mask, shift_mean=False)
    np.testing.assert_allclose(unshifted[mask.bool()].numpy(), expected + kept.mean(), rtol=1e-5)


def test_masked_var_degenerate_masks() -> None:
    with pytest.raises(ValueError, match="no element"):
        verl_F.masked_var(torch.ones(3), torch.zeros(3))
    with pytest.raises(ValueError, match="single element"):
        verl_F.masked_var(torch.ones(3), torch.tensor([0, 1, 0]))
    assert verl_F.masked_mean(torch.ones(3), torch.zeros(3)).item() == 0.0


def test_get_response_mask_first_eos_inclusive() -> None:
    ids = torch.tensor([[5, 2, 7, 2], [1, 1, 1, 1], [2, 0, 0, 0], [3, 7, 2, 0]])
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]])
    assert torch.equal(verl_F.get_response_mask(ids, eos_token=2), expected)
    expected_multi = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    mask = verl_F.get_response_mask(ids, eos_token=[2, 7], dtype=torch.float32)
    assert mask.dtype == torch.float32 and torch.equal(mask, expected_multi.float())


def test_padding_positions_and_clip() -> None:
    x = torch.tensor([[1, 2], [3, 4]])
    assert torch.equal(verl_F.pad_sequence_to_length(x, 4, 0), torch.tensor([[1, 2, 0, 0], [3, 4, 0, 0]]))
    assert torch.equal(verl_F.pad_sequence_to_length(x, 3, 9, left_pad=True), torch.tensor([[9, 1, 2], [9, 3, 4]]))
    assert verl_F.pad_sequence_to_length(x, 2, 0) is x
    attn = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert torch.equal(verl_F.compute_position_id_with_mask(attn), torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 2, 2]]))
    clipped = verl_F.clip_by_value(torch.tensor([-1.0, 0.5, 3.0]), torch.zeros(3), torch.ones(3))
    assert torch.equal(clipped, torch.tensor([0.0, 0.5, 1.0]))


@pytest.mark.parametrize("chunk_size", [2, 3, 64])
def test_strided_slice_is_read_in_place(chunk_size: int) -> None:
    full = torch.randn(3, 6, 13, requires_grad=True)
    labels = torch.randint(0, 13, (3, 6))[:, 1:]
    ref_full = full.detach().clone().requires_grad_(True)
    upstream = torch.randn(3, 5)
    (_naive_logprobs(ref_full[:, :-1], labels) * upstream).sum().backward()
    (_naive_entropy(ref_full[:, :-1]) * upstream).sum().backward()

    storages: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 3:
            storages.append(t.untyped_storage().data_ptr())
        return t

    sliced = full[:, :-1]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        got = verl_F.logprobs_from_logits(sliced, labels, chunk_size=chunk_size)
        ent = verl_F.entropy_from_logits(sliced, chunk_size=chunk_size)
    ((got + ent) * upstream).sum().backward()
    torch.testing.assert_close(got, _naive_logprobs(sliced.detach(), labels), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent, _naive_entropy(sliced.detach()), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(full.grad, ref_full.grad, rtol=1e-5, atol=1e-5)
    # The saved logits are the caller's storage, not a contiguous copy of the slice.
    assert storages and all(ptr == full.untyped_storage().data_ptr() for ptr in storages)


def test_four_dim_logits() -> None:
    logits = torch.randn(2, 3, 4, 9)
    labels = torch.randint(0, 9, (2, 3, 4))
    got = verl_F.logprobs_from_logits(logits, labels, chunk_size=5)
    torch.testing.assert_close(got, _naive_logprobs(logits, labels))
    torch.testing.assert_close(
        verl_F.entropy_from_logits(logits, chunk_size=5), _naive_entropy(logits), atol=1e-5, rtol=1e-5
    )
