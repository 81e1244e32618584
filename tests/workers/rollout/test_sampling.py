"""The rollout engines' sampler draws from softmax(logits): frequencies match, excluded tokens never appear."""

from __future__ import annotations

import math

import torch

from verl.workers.rollout.base import sample_from_logits


def test_frequencies_match_the_softmax_and_excluded_tokens_never_appear() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([2.0, 1.0, float("-inf"), 0.0, -1.0])
    expected = [math.exp(x) for x in (2.0, 1.0, 0.0, 0.0, -1.0)]
    expected[2] = 0.0
    total = sum(expected)
    expected = [e / total for e in expected]  # 0.6439, 0.2369, 0, 0.0871, 0.0321
    n = 200_000
    draws = sample_from_logits(logits.expand(n, -1).contiguous())
    counts = torch.bincount(draws, minlength=5).double() / n
    assert counts[2].item() == 0.0
    for got, want in zip(counts.tolist(), expected):
        # 5 standard errors of a binomial proportion
        assert abs(got - want) <= 5 * math.sqrt(want * (1 - want) / n) + 1e-12


def test_rows_are_independent_and_one_hot_logits_are_deterministic() -> None:
    torch.manual_seed(1)
    logits = torch.full((3, 4), float("-inf"))
    logits[0, 3] = 0.0
    logits[1, 0] = 5.0
    logits[2, 2] = -3.0
    assert sample_from_logits(logits).tolist() == [3, 0, 2]


def test_seeded_draws_are_reproducible() -> None:
    logits = torch.randn(8, 50)
    torch.manual_seed(7)
    a = sample_from_logits(logits)
    torch.manual_seed(7)
    b = sample_from_logits(logits)
    assert torch.equal(a, b)


def test_one_sampler_for_every_decode_loop() -> None:
    """choose_tokens: argmax when greedy; with uniforms a fixed draw (the same tokens whatever else is in the batch);
    top-k 1 samples the argmax; token_log_probs reads log softmax(logits / T) at the tokens."""
    from verl.workers.rollout.sampling import choose_tokens, token_log_probs

    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
    assert choose_tokens(logits, greedy=True).tolist() == [1, 0]
    assert choose_tokens(logits, greedy=False, top_k=1, uniforms=torch.rand(2, 1)).tolist() == [1, 0]
    u = torch.tensor([[0.999], [0.0]])
    both = choose_tokens(logits, greedy=False, temperature=2.0, uniforms=u)
    alone = choose_tokens(logits[1:], greedy=False, temperature=2.0, uniforms=u[1:])
    assert both[1] == alone[0] == 0 and both[0] == 2  # u=0 picks the first token; u->1 the last with mass
    expected = torch.log_softmax(logits / 2.0, dim=-1)[[0, 1], [1, 2]]
    assert torch.allclose(token_log_probs(logits, torch.tensor([1, 2]), 2.0), expected)
