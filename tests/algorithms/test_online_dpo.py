"""Online DPO (verl/algorithms/online_dpo.py): pairs from each group's best and worst response, DPO / IPO against
the reference's sequence log-probs, worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.core_algos import get_policy_loss_fn
from verl.algorithms.online_dpo import preference_pairs
from verl.algorithms.registry import needs_groups, needs_reference, per_response

DPO = get_policy_loss_fn("online_dpo")


def test_pairs_are_the_best_and_worst_of_each_group_and_ties_give_none() -> None:
    scores = torch.tensor([0.5, -0.5, 0.0, 0.0, 1.0, 2.0, 2.0])
    position = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    chosen, rejected = preference_pairs(scores, position, 3)
    # group 0: row 0 over row 1; group 1 tied: no pair; group 2: the first of the best (5) over row 4
    assert chosen.tolist() == [0, 5] and rejected.tolist() == [1, 4]
    assert needs_groups(DPO) and needs_reference(DPO) and per_response(DPO)


def _pair_batch():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.float64)
    policy = torch.tensor([[-0.5, -0.5, 0], [-1.0, -1.0, -1.0], [-2.0, 0, 0], [-0.25, -0.25, 0]], dtype=torch.float64)
    reference = torch.tensor([[-1.0, -1.0, 0], [-1.0, -0.5, -0.5], [-1.0, 0, 0], [-0.5, -0.5, 0]], dtype=torch.float64)
    # advantages: row 1 beats row 0 (group 7), row 2 beats row 3 (group 9)
    adv = torch.tensor([[-1.0], [1.0], [0.5], [-0.5]], dtype=torch.float64) * mask
    return policy.clone().requires_grad_(True), reference, adv, mask, torch.tensor([7, 7, 9, 9]), torch.full((4,), 2)


def test_sigmoid_loss_on_the_reference_margin() -> None:
    policy, reference, adv, mask, index, size = _pair_batch()
    cfg = {"dpo_beta": 0.5}
    loss, metrics = DPO(policy, policy, adv, mask, "token-mean", cfg, None, index, size, reference)
    # pair 1: chosen row 1 (policy -3, ref -2), rejected row 0 (policy -1, ref -2): z = (-3 + 1) - (-2 + 2) = -2
    # pair 2: chosen row 2 (policy -2, ref -1), rejected row 3 (policy -0.5, ref -1): z = (-2 + 0.5) - 0 = -1.5
    expected = (-math.log(1 / (1 + math.exp(1.0))) - math.log(1 / (1 + math.exp(0.75)))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert metrics["actor/dpo_accuracy"].item() == 0.0 and metrics["actor/dpo_tied_frac"] == 0.0
    assert metrics["actor/dpo_logits"].item() == pytest.approx((-1.0 - 0.75) / 2)
    loss.backward()
    # d l / d z = -beta sigma(-beta z) / 2 pairs; +1 on the chosen tokens, -1 on the rejected ones
    g1, g2 = -0.5 / (1 + math.exp(-1.0)) / 2, -0.5 / (1 + math.exp(-0.75)) / 2
    expected_grad = torch.tensor([[-g1, -g1, 0], [g1, g1, g1], [g2, 0, 0], [-g2, -g2, 0]], dtype=torch.float64)
    torch.testing.assert_close(policy.grad, expected_grad)


def test_ipo_label_smoothing_and_a_micro_batch_without_pairs() -> None:
    policy, reference, adv, mask, index, size = _pair_batch()
    ipo, _ = DPO(policy, policy, adv, mask, "token-mean", {"dpo_beta": 0.5, "dpo_loss_type": "ipo"}, None, index,
                 size, reference)  # fmt: skip
    assert ipo.item() == pytest.approx(((-2 - 1) ** 2 + (-1.5 - 1) ** 2) / 2)  # (z - 1 / (2 beta))^2
    smooth, _ = DPO(policy, policy, adv, mask, "token-mean", {"dpo_beta": 0.5, "dpo_label_smoothing": 0.25}, None,
                    index, size, reference)  # fmt: skip
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    terms = [-0.75 * math.log(sig(0.5 * z)) - 0.25 * math.log(sig(-0.5 * z)) for z in (-2.0, -1.5)]
    assert smooth.item() == pytest.approx(sum(terms) / 2)
    tied = torch.zeros_like(adv)
    zero, metrics = DPO(policy, policy, tied, mask, "token-mean", None, None, index, size, reference)
    assert zero.item() == 0.0 and metrics["actor/dpo_tied_frac"] == 1.0
    zero.backward()  # a zero that reaches the parameters: every rank's backward lines up
    assert policy.grad is not None and torch.count_nonzero(policy.grad) == 0


def test_needs_the_reference_and_whole_groups() -> None:
    policy, reference, adv, mask, index, size = _pair_batch()
    with pytest.raises(ValueError, match="ref_log_prob"):
        DPO(policy, policy, adv, mask, "token-mean", None, None, index, size)
    with pytest.raises(ValueError, match="holds 1 of the 2 responses"):
        DPO(policy[:3], policy[:3], adv[:3], mask[:3], "token-mean", None, None, index[:3], size[:3], reference[:3])
