"""The offline losses on hand-computed numbers (expected values worked out with math, not with the code under test)."""

from __future__ import annotations

import math

import pytest
import torch

from verl.trainer.offline import dpo_loss, kto_kl_estimate, kto_loss, sft_loss


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


# Two pairs. Pair 0: chosen ratio -1 - (-2) = 1, rejected ratio -3 - (-2.5) = -0.5, h = 1.5.
# Pair 1: chosen ratio -4 - (-3) = -1, rejected ratio -1 - (-2) = 1, h = -2.
PC = torch.tensor([-1.0, -4.0])
PR = torch.tensor([-3.0, -1.0])
RC = torch.tensor([-2.0, -3.0])
RR = torch.tensor([-2.5, -2.0])
H = [1.5, -2.0]


def test_dpo_sigmoid_matches_hand_computation() -> None:
    beta = 0.5
    losses, chosen, rejected = dpo_loss(PC, PR, RC, RR, beta=beta, loss_type="sigmoid")
    # -log sigmoid(z) = softplus(-z)
    expected = [_softplus(-beta * h) for h in H]
    assert losses.tolist() == pytest.approx(expected, rel=1e-6)
    assert chosen.tolist() == pytest.approx([0.5 * 1.0, 0.5 * -1.0])
    assert rejected.tolist() == pytest.approx([0.5 * -0.5, 0.5 * 1.0])


def test_dpo_sigmoid_label_smoothing() -> None:
    beta, eps = 0.5, 0.2
    losses, _, _ = dpo_loss(PC, PR, RC, RR, beta=beta, loss_type="sigmoid", label_smoothing=eps)
    expected = [(1 - eps) * _softplus(-beta * h) + eps * _softplus(beta * h) for h in H]
    assert losses.tolist() == pytest.approx(expected, rel=1e-6)


def test_dpo_ipo_matches_hand_computation() -> None:
    beta = 0.25  # 1 / (2 beta) = 2
    losses, _, _ = dpo_loss(PC, PR, RC, RR, beta=beta, loss_type="ipo")
    assert losses.tolist() == pytest.approx([(1.5 - 2.0) ** 2, (-2.0 - 2.0) ** 2])


def test_dpo_hinge_matches_hand_computation() -> None:
    beta = 1.0
    losses, _, _ = dpo_loss(PC, PR, RC, RR, beta=beta, loss_type="hinge")
    assert losses.tolist() == pytest.approx([0.0, 3.0])  # relu(1 - 1.5), relu(1 + 2)


def test_dpo_gradient_pushes_chosen_up_and_rejected_down() -> None:
    pc = torch.tensor([-2.0], requires_grad=True)
    pr = torch.tensor([-2.0], requires_grad=True)
    losses, _, _ = dpo_loss(pc, pr, torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.1)
    losses.sum().backward()
    # d/dh softplus(-beta h) at h = 0 is -beta / 2.
    assert pc.grad.item() == pytest.approx(-0.05)
    assert pr.grad.item() == pytest.approx(0.05)


def test_dpo_rejects_unknown_loss_type_and_bad_beta() -> None:
    with pytest.raises(ValueError, match="unknown loss_type 'bco'"):
        dpo_loss(PC, PR, RC, RR, beta=0.1, loss_type="bco")
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo_loss(PC, PR, RC, RR, beta=0.0)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_kto_kl_estimate_is_clamped_mean() -> None:
    assert kto_kl_estimate(torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -2.5])).item() == pytest.approx(0.75)
    # A negative mean log-ratio is clamped to 0.
    assert kto_kl_estimate(torch.tensor([-3.0, -3.0]), torch.tensor([-1.0, -2.0])).item() == 0.0


def test_kto_loss_matches_hand_computation() -> None:
    policy = torch.tensor([-1.0, -3.0, -2.0])
    ref = torch.tensor([-2.0, -2.0, -2.0])  # ratios 1, -1, 0
    labels = torch.tensor([True, False, True])
    beta, z0, wd, wu = 0.5, 0.2, 1.0, 1.5
    losses, rewards = kto_loss(policy, ref, labels, z0, beta=beta, desirable_weight=wd, undesirable_weight=wu)
    expected = [
        wd * (1 - _sigmoid(beta * (1.0 - z0))),
        wu * (1 - _sigmoid(beta * (z0 - (-1.0)))),
        wd * (1 - _sigmoid(beta * (0.0 - z0))),
    ]
    assert losses.tolist() == pytest.approx(expected, rel=1e-6)
    assert rewards.tolist() == pytest.approx([0.5, -0.5, 0.0])


def test_sft_loss_masks_the_prompt() -> None:
    torch.manual_seed(0)
    vocab = 5
    logits = torch.randn(1, 4, vocab)
    input_ids = torch.tensor([[1, 2, 3, 4]])
    loss_mask = torch.tensor([[0, 0, 1, 1]])  # prompt = tokens 0, 1; response = tokens 2, 3
    # Manual: token 2 is predicted at position 1, token 3 at position 2 (position 0 predicts a prompt token).
    lp = torch.log_softmax(logits[0].double(), dim=-1)
    manual = -(lp[1, 3] + lp[2, 4]).item() / 2
    assert sft_loss(logits, input_ids, loss_mask).item() == pytest.approx(manual, rel=1e-5)
    assert sft_loss(logits, input_ids, loss_mask, reduction="sum").item() == pytest.approx(2 * manual, rel=1e-5)
    # Changing the prompt's targets does not change the loss; changing a response target does.
    changed = input_ids.clone()
    changed[0, 1] = 0
    assert sft_loss(logits, changed, loss_mask).item() == pytest.approx(manual, rel=1e-5)
    changed[0, 3] = 0
    assert sft_loss(logits, changed, loss_mask).item() != pytest.approx(manual, rel=1e-3)
