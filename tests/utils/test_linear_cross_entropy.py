"""The chunked LM-head log-probs/entropy (verl/utils/kernel/linear_cross_entropy.py) against the naive path that
materialises the logits: values and gradients, fp32 tight and bf16 loose, with temperature, entropy in the loss,
a bias and tied embeddings."""

from __future__ import annotations

import pytest
import torch

from verl.utils.kernel.linear_cross_entropy import linear_cross_entropy, linear_logprobs_entropy


def _naive(hidden, weight, labels, temperature, bias=None):
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logits = logits.float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy, logp_all.exp().square().sum(-1)


def _inputs(n=13, h=8, v=37, dtype=torch.float32, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g).to(dtype).requires_grad_(True)
    weight = (torch.randn(v, h, generator=g) * 0.7).to(dtype).requires_grad_(True)
    b = (torch.randn(v, generator=g) * 0.3).to(dtype).requires_grad_(True) if bias else None
    labels = torch.randint(0, v, (n,), generator=g)
    return hidden, weight, b, labels


def _grads(loss, tensors):
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("chunk_size,vocab_chunk", [(1, None), (5, 8), (None, 37), (None, None), (4, 1)])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy_coeff", [0.0, 0.3])
def test_fp32_values_and_grads_match_naive(chunk_size, vocab_chunk, temperature, entropy_coeff) -> None:
    hidden, weight, bias, labels = _inputs(bias=True)
    g_out = torch.randn(labels.shape)
    logp, ent, sq = linear_logprobs_entropy(
        hidden, weight, labels, temperature, bias, chunk_size, with_sum_pi_squared=True, vocab_chunk_size=vocab_chunk
    )
    ref_logp, ref_ent, ref_sq = _naive(hidden, weight, labels, temperature, bias)
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sq, ref_sq, atol=1e-6, rtol=1e-5)
    loss = (logp * g_out).sum() - entropy_coeff * ent.sum()
    ref_loss = (ref_logp * g_out).sum() - entropy_coeff * ref_ent.sum()
    for got, want in zip(_grads(loss, (hidden, weight, bias)), _grads(ref_loss, (hidden, weight, bias))):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_entropy_only_loss_and_detached_entropy() -> None:
    hidden, weight, _, labels = _inputs(seed=1)
    _, ent, _ = linear_logprobs_entropy(hidden, weight, labels, 1.3, chunk_size=4, vocab_chunk_size=10)
    _, ref_ent, _ = _naive(hidden, weight, labels, 1.3)
    for got, want in zip(_grads(ent.sum(), (hidden, weight)), _grads(ref_ent.sum(), (hidden, weight))):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the entropy left out of the loss adds nothing (its gradient is None, not zeros times something)
    logp, ent, _ = linear_logprobs_entropy(hidden, weight, labels, 1.3, chunk_size=4)
    ref_logp, _, _ = _naive(hidden, weight, labels, 1.3)
    for got, want in zip(_grads(logp.sum(), (hidden, weight)), _grads(ref_logp.sum(), (hidden, weight))):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_bf16_close_to_naive() -> None:
    hidden, weight, _, labels = _inputs(n=20, h=16, v=64, dtype=torch.bfloat16, seed=2)
    g_out = torch.randn(labels.shape)
    logp, ent, _ = linear_logprobs_entropy(hidden, weight, labels, 0.9, chunk_size=6, vocab_chunk_size=16)
    assert logp.dtype == torch.float32 and ent.dtype == torch.float32
    ref_logp, ref_ent, _ = _naive(hidden, weight, labels, 0.9)
    torch.testing.assert_close(logp, ref_logp, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(ent, ref_ent, atol=2e-2, rtol=2e-2)
    got = _grads((logp * g_out).sum() + 0.1 * ent.sum(), (hidden, weight))
    want = _grads((ref_logp * g_out).sum() + 0.1 * ref_ent.sum(), (hidden, weight))
    for a, b in zip(got, want):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.float(), b.float(), atol=5e-2, rtol=5e-2)


def test_autocast_matmul_matches_linear_under_autocast() -> None:
    hidden, weight, _, labels = _inputs(n=9, h=16, v=40, seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, _, _ = linear_logprobs_entropy(hidden, weight, labels, 1.0, chunk_size=4, vocab_chunk_size=9)
        logits = torch.nn.functional.linear(hidden, weight)  # bf16 under autocast, as the naive head
    ref = torch.log_softmax(logits.float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(logp, ref, atol=1e-6, rtol=1e-6)
    (gh,) = torch.autograd.grad(logp.sum(), [hidden])
    assert gh.dtype == torch.float32 and torch.isfinite(gh).all()


def test_tied_embedding_grads_accumulate() -> None:
    """The head weight is the input embedding: its gradient is the sum of both uses."""
    torch.manual_seed(4)
    vocab, h = 23, 8
    emb = torch.nn.Embedding(vocab, h)
    proj = torch.nn.Linear(h, h)
    ids = torch.randint(0, vocab, (2, 6))
    labels = torch.randint(0, vocab, (2, 6))

    def run(fused: bool) -> list[torch.Tensor]:
        hidden = torch.tanh(proj(emb(ids)))
        if fused:
            logp, ent, _ = linear_logprobs_entropy(hidden, emb.weight, labels, 0.8, chunk_size=5, vocab_chunk_size=7)
        else:
            logp, ent, _ = _naive(hidden.reshape(-1, h), emb.weight, labels.reshape(-1), 0.8)
        loss = -logp.sum() - 0.2 * ent.sum()
        return list(torch.autograd.grad(loss, [emb.weight, proj.weight, proj.bias]))

    for got, want in zip(run(True), run(False)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_upstream_name_and_bad_inputs() -> None:
    hidden, weight, _, labels = _inputs(seed=5)
    logp, ent = linear_cross_entropy(hidden.reshape(1, 13, 8), weight, labels.reshape(1, 13), 2.0)
    ref_logp, ref_ent, _ = _naive(hidden, weight, labels, 2.0)
    torch.testing.assert_close(logp[0], ref_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent[0], ref_ent, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(hidden, weight, labels, 1.0, reduction="mean")
    with pytest.raises(ValueError, match="weight"):
        linear_logprobs_entropy(hidden, weight.T, labels)
    with pytest.raises(ValueError, match="temperature"):
        linear_logprobs_entropy(hidden, weight, labels, 0.0)
