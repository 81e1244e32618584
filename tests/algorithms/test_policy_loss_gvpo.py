"""GVPO's loss (verl/algorithms/policy_loss_gvpo.py) against the recipe's per-response formula, worked by hand."""

from __future__ import annotations

import pytest
import torch

from verl.algorithms.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn
from verl.algorithms.registry import needs_groups

GVPO = get_policy_loss_fn("gvpo")


def _recipe_loss(old, new, adv, mask, beta, uid, n):
    """verl-recipe's compute_policy_loss_gvpo per response: sum_i 1/2 ((r_i - mean_g r) - A_i)^2 / (n-1)."""
    r = ((new * mask).sum(-1) - (old * mask).sum(-1)) * beta
    a = (adv * mask).sum(-1) / mask.sum(-1)
    total = 0.0
    for i in range(len(r)):
        same = [j for j in range(len(r)) if uid[j] == uid[i]]
        mean = sum(float(r[j]) for j in same) / len(same)
        total += 0.5 * ((float(r[i]) - mean) - float(a[i])) ** 2
    return total / (n - 1)


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(6, 5, generator=gen, dtype=torch.float64)
    new = (old + 0.3 * torch.randn(6, 5, generator=gen, dtype=torch.float64)).requires_grad_(True)
    mask = torch.ones(6, 5, dtype=torch.float64)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    uid = [7, 7, 7, 3, 3, 3]  # two prompts, n = 3
    centred = scores - torch.tensor([1 / 3] * 3 + [1.0] * 3, dtype=torch.float64)
    adv = centred[:, None] * mask  # GRPO without the std normalisation, on the response tokens
    return old, new, adv, mask, uid


def test_registered_and_asks_for_groups() -> None:
    assert "gvpo" in POLICY_LOSS_REGISTRY
    assert needs_groups(GVPO) and not needs_groups(get_policy_loss_fn("vanilla"))


def test_matches_the_recipe_formula_and_its_scale() -> None:
    old, new, adv, mask, uid = _batch()
    index = torch.tensor(uid)
    size = torch.full((6,), 3)
    cfg = {"gvpo_beta": 0.1, "ppo_micro_batch_size_per_gpu": 6}
    loss, metrics = GVPO(old, new, adv, mask, "token-mean", cfg, None, group_index=index, group_size=size)
    # micro-batch of 6 = ppo_micro_batch_size_per_gpu: the recipe's sum over the micro-batch
    assert loss.item() == pytest.approx(_recipe_loss(old, new.detach(), adv, mask, 0.1, uid, 3), rel=1e-12)
    # another configured micro size scales it (the recipe divides the micro-batch sum by the accumulation steps)
    half, _ = GVPO(old, new, adv, mask, "token-mean", {**cfg, "ppo_micro_batch_size_per_gpu": 3}, None, index, size)
    assert half.item() == pytest.approx(loss.item() / 2, rel=1e-12)
    assert metrics["actor/gvpo_residual_rms"].item() > 0


def test_gradient_is_the_residual_per_response() -> None:
    old, new, adv, mask, uid = _batch(1)
    index, size = torch.tensor(uid), torch.full((6,), 3)
    loss, _ = GVPO(old, new, adv, mask, "token-mean", {"gvpo_beta": 0.5, "ppo_micro_batch_size_per_gpu": 6}, None,
                   group_index=index, group_size=size)  # fmt: skip
    loss.backward()
    # d/d log pi_t of response i: beta * ((r_i - mean r) - A_i) / (n - 1) on its tokens (the mean carries no gradient,
    # and would add nothing: a group's residuals sum to zero)
    r = 0.5 * ((new.detach() - old) * mask).sum(-1)
    mean = torch.stack([r[:3].mean()] * 3 + [r[3:].mean()] * 3)
    a = (adv * mask).sum(-1) / mask.sum(-1)
    expected = (0.5 * ((r - mean) - a) / 2)[:, None] * mask
    torch.testing.assert_close(new.grad, expected)


def test_zero_at_the_optimum() -> None:
    # beta * log(pi / pi_old) equal to the reward plus a per-group constant: every residual vanishes
    mask = torch.ones(4, 2, dtype=torch.float64)
    reward = torch.tensor([1.0, 0.0, 0.5, 0.25], dtype=torch.float64)
    adv = torch.stack([reward[:2] - reward[:2].mean(), reward[2:] - reward[2:].mean()]).reshape(4)[:, None] * mask
    old = torch.zeros(4, 2, dtype=torch.float64)
    new = ((reward + torch.tensor([3.0, 3.0, -1.0, -1.0], dtype=torch.float64)) / (2 * 0.1))[:, None] * mask
    loss, _ = GVPO(old, new, adv, mask, "token-mean", {"gvpo_beta": 0.1}, None, torch.tensor([0, 0, 1, 1]),
                   torch.full((4,), 2))  # fmt: skip
    assert loss.item() == pytest.approx(0.0, abs=1e-20)


def test_refuses_a_cut_group_and_importance_weights() -> None:
    old, new, adv, mask, uid = _batch()
    with pytest.raises(ValueError, match="holds 2 of the 3 responses"):
        GVPO(old[:5], new[:5], adv[:5], mask[:5], "token-mean", None, None, torch.tensor(uid[:5]), torch.full((5,), 3))
    with pytest.raises(ValueError, match="rollout_is"):
        GVPO(old, new, adv, mask, "token-mean", None, torch.ones_like(mask), torch.tensor(uid), torch.full((6,), 3))
    with pytest.raises(ValueError, match="group_index"):
        GVPO(old, new, adv, mask)
