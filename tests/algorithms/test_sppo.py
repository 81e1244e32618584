"""SPPO's estimator and loss (verl/algorithms/sppo.py) against values worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.algorithms.registry import needs_groups, per_response
from verl.algorithms.sppo import soft_mean

SPPO = get_policy_loss_fn("sppo")


def test_soft_mean_lies_between_the_mean_and_the_max() -> None:
    x = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64)
    # beta 1: log((1 + e + e^3) / 3) = 1.91893...
    assert soft_mean(x, 1.0).item() == pytest.approx(math.log((1 + math.e + math.e**3) / 3), rel=1e-12)
    assert soft_mean(x, 0.0).item() == pytest.approx(4 / 3)
    assert 4 / 3 < soft_mean(x, 0.5).item() < soft_mean(x, 1.0).item() < soft_mean(x, 50.0).item() < 3.0


def test_estimator_centres_the_batch_on_its_soft_mean() -> None:
    rewards = torch.zeros(3, 4, dtype=torch.float64)
    rewards[0, 1], rewards[1, 3], rewards[2, 0] = 0.0, 1.0, 3.0  # the score sits on a response's last token
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
    adv, ret = get_adv_estimator_fn("sppo")(token_level_rewards=rewards, response_mask=mask, config={"sppo_eta": 1.0})
    base = math.log((1 + math.e + math.e**3) / 3)
    torch.testing.assert_close(adv, torch.tensor([-base, 1 - base, 3 - base], dtype=torch.float64)[:, None] * mask)
    assert torch.equal(adv, ret)
    mean_adv, _ = get_adv_estimator_fn("sppo")(rewards, mask, config={"sppo_eta": 0.0})
    assert mean_adv[:, 0].tolist() == pytest.approx([-4 / 3, 1 - 4 / 3, 3 - 4 / 3])


def test_loss_regresses_the_log_ratio_on_the_scaled_preference() -> None:
    old = torch.zeros(3, 2, dtype=torch.float64)
    new = torch.tensor([[0.5, 0.25], [-1.0, 0.0], [2.0, 2.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]], dtype=torch.float64)  # the third row has no response
    adv = torch.tensor([[0.5], [-1.0], [9.0]], dtype=torch.float64) * mask
    loss, metrics = SPPO(old, new, adv, mask, "token-mean", {"sppo_eta": 2.0})
    # log-ratios 0.75 and -1.0; eta * A = 1.0 and -2.0: ((0.75 - 1)^2 + (-1 + 2)^2) / 2 = (0.0625 + 1) / 2
    assert loss.item() == pytest.approx(0.53125)
    assert metrics["actor/preference_mean"].item() == pytest.approx((1.0 - 2.0 + 0.0) / 3)
    loss.backward()
    # d/d log pi_t = 2 (log-ratio - eta A) / 2 on the row's tokens: -0.25 and 1.0; nothing for the empty row
    torch.testing.assert_close(new.grad, torch.tensor([[-0.25, -0.25], [1.0, 0.0], [0.0, 0.0]], dtype=torch.float64))


def test_one_term_per_response_without_groups_or_weights() -> None:
    assert per_response(SPPO) and not needs_groups(SPPO)
    assert per_response(get_policy_loss_fn("gvpo")) and not per_response(get_policy_loss_fn("vanilla"))
    ones = torch.ones(1, 2)
    with pytest.raises(ValueError, match="rollout_is"):
        SPPO(ones, ones, ones, ones, "token-mean", None, ones)
