"""KL penalties and KL controllers of verl.trainer.ppo.core_algos."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos

# log pi = log 0.5, log pi_ref = log 0.25: d = log pi - log pi_ref = log 2.
D = math.log(2.0)
EXPECTED = {
    "kl": D,
    "k1": D,
    "abs": D,
    "mse": 0.5 * D * D,
    "k2": 0.5 * D * D,
    "low_var_kl": 0.5 + D - 1.0,  # r = pi_ref/pi = 0.5: (r - 1) - log r
    "k3": 0.5 + D - 1.0,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kl_estimators_by_hand(name: str) -> None:
    value = core_algos.kl_penalty(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]), name)
    assert value.item() == pytest.approx(EXPECTED[name], abs=1e-6)


def test_low_var_kl_is_clamped() -> None:
    value = core_algos.kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl")
    assert value.item() == 10.0


@pytest.mark.parametrize(("name", "base"), [("k1+", "k1"), ("k3+", "k3")])
def test_straight_through_value_and_k2_gradient(name: str, base: str) -> None:
    logp = torch.tensor([-0.3, -2.0, -1.0], requires_grad=True)
    ref = torch.tensor([-1.0, -0.5, -1.0])
    value = core_algos.kl_penalty(logp, ref, name)
    torch.testing.assert_close(value, core_algos.kl_penalty(logp.detach(), ref, base))
    value.sum().backward()
    # gradient of k2 = 0.5 (logp - ref)^2 is logp - ref.
    torch.testing.assert_close(logp.grad, torch.tensor([0.7, -1.5, 0.0]))


def test_unknown_kl_penalty() -> None:
    with pytest.raises(ValueError, match="'k9'"):
        core_algos.kl_penalty(torch.zeros(1), torch.zeros(1), "k9")


def test_compute_rewards() -> None:
    scores = torch.tensor([[0.0, 1.0]])
    out = core_algos.compute_rewards(scores, torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]]), 0.1)
    torch.testing.assert_close(out, torch.tensor([[-0.05, 1.1]]))


def test_adaptive_kl_controller_by_hand() -> None:
    ctrl = core_algos.AdaptiveKLController(init_kl_coef=0.2, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=0.15, n_steps=10)  # error clip(0.5) = 0.2 -> x(1 + 0.2*10/100) = x1.02
    assert ctrl.value == pytest.approx(0.204)
    ctrl.update(current_kl=0.09, n_steps=10)  # error -0.1 -> x0.99
    assert ctrl.value == pytest.approx(0.204 * 0.99)
    ctrl.update(current_kl=0.0, n_steps=50)  # error clipped to -0.2 -> x0.9
    assert ctrl.value == pytest.approx(0.204 * 0.99 * 0.9)


def test_get_kl_controller_from_config() -> None:
    fixed = core_algos.get_kl_controller(OmegaConf.create({"type": "fixed", "kl_coef": 0.001}))
    fixed.update(5.0, 100)
    assert isinstance(fixed, core_algos.FixedKLController) and fixed.value == 0.001
    cfg = OmegaConf.create({"type": "adaptive", "kl_coef": 0.05, "target_kl": 0.1, "horizon": 10000})
    adaptive = core_algos.get_kl_controller(cfg)
    assert isinstance(adaptive, core_algos.AdaptiveKLController)
    assert (adaptive.value, adaptive.target, adaptive.horizon) == (0.05, 0.1, 10000)
    with pytest.raises(ValueError, match="'pid'"):
        core_algos.get_kl_controller({"type": "pid"})
    with pytest.raises(ValueError, match="horizon"):
        core_algos.get_kl_controller({"type": "adaptive", "horizon": 0})
