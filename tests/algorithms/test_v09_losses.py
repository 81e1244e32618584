"""Upstream verl v0.9's policy losses and aggregation against hand-computed values (numbers worked out in comments)."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.core_algos import POLICY_LOSS_REGISTRY, agg_loss, get_policy_loss_fn
from verl.algorithms.policy_loss_bypass import compute_policy_loss_bypass_mode

LN = math.log


def _t(rows: list[list[float]], grad: bool = False) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64, requires_grad=grad)


def test_registered_under_upstream_names() -> None:
    for name in ("dppo_tv", "dppo_kl", "dro", "sapo", "bypass_mode"):
        assert name in POLICY_LOSS_REGISTRY


def test_token_sum_and_loss_scale_factor() -> None:
    loss = _t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = _t([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # token-sum: 1 + 2 + 4 = 7 (no normalisation)
    assert agg_loss(loss, mask, "token-sum").item() == pytest.approx(7.0)
    # seq-mean-token-sum-norm: row sums (3, 4), mean 3.5, / response_len 3 or / loss_scale_factor 4
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(3.5 / 3)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=4).item() == pytest.approx(0.875)


def test_dppo_tv_keeps_tokens_inside_the_probability_band() -> None:
    # p_old = 0.5 everywhere; p = 0.8, 0.6 (A = +1) and 0.3, 0.4 (A = -1); TV thresholds 0.15
    old = _t([[LN(0.5)] * 4])
    new = _t([[LN(0.8), LN(0.6), LN(0.3), LN(0.4)]], grad=True)
    adv = _t([[1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.float64)
    cfg = {"clip_ratio": 0.15, "clip_ratio_c": 10000.0}
    loss, metrics = get_policy_loss_fn("dppo_tv")(old, new, adv, mask, "token-mean", cfg)
    # kept: token 2 (d = +0.1 <= 0.15): -1 * 1.2 * ln 0.6 = 0.6129907; token 4 (d = -0.1 >= -0.15): 0.8 * ln 0.4
    # = -0.7330326; tokens 1 (d = +0.3) and 3 (d = -0.2) are outside: 0. Mean over 4: -0.1200419 / 4
    assert loss.item() == pytest.approx(-0.0300105, abs=1e-6)
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(0.5)
    loss.backward()
    # the ratio is a constant (stop-gradient): d/d log pi = -A * r / 4 on kept tokens, 0 outside
    torch.testing.assert_close(new.grad, _t([[0.0, -0.3, 0.0, 0.2]]))
    # clip_ratio_c truncates the (detached) ratio: token 2 weighs 1.1 instead of 1.2
    loss_c, metrics_c = get_policy_loss_fn("dppo_tv")(
        old, new.detach(), adv, mask, "token-mean", {**cfg, "clip_ratio_c": 1.1}
    )
    assert loss_c.item() == pytest.approx((-1.1 * LN(0.6) + 0.8 * LN(0.4)) / 4, abs=1e-9)
    assert metrics_c["actor/pg_clipfrac_lower"].item() == pytest.approx(0.25)


def test_dppo_kl_uses_the_binary_kl_and_lets_the_other_direction_through() -> None:
    # A = +1 on all three; p_old = 0.5; p = 0.6, 0.8, 0.1; threshold 0.05
    old = _t([[LN(0.5)] * 3])
    new = _t([[LN(0.6), LN(0.8), LN(0.1)]])
    adv = torch.ones(1, 3, dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    loss, metrics = get_policy_loss_fn("dppo_kl")(old, new, adv, mask, "token-mean", {"clip_ratio": 0.05})
    # D(0.5 -> 0.6) = 0.5 ln(0.5/0.6) + 0.5 ln(0.5/0.4) = 0.0204110 <= 0.05: kept, l = -1.2 ln 0.6 = 0.6129907
    # D(0.5 -> 0.8) = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2) = 0.2231436 > 0.05 and p > p_old: dropped
    # p = 0.1 <= p_old: kept whatever D, l = -0.2 ln 0.1 = 0.4605170. Mean: 1.0735077 / 3
    assert loss.item() == pytest.approx(0.3578359, abs=1e-6)
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(1 / 3)


def test_dro_value_and_gradient() -> None:
    old = _t([[LN(0.25)]])
    new = _t([[LN(0.5)]], grad=True)
    adv = _t([[2.0]])
    mask = torch.ones(1, 1, dtype=torch.float64)
    cfg = {"policy_loss": {"dro_beta": 0.5}}
    loss, _ = get_policy_loss_fn("dro")(old, new, adv, mask, "token-mean", cfg)
    # -(2 ln 0.5 - 0.25 (ln 2)^2) = 1.3862944 + 0.1201133
    assert loss.item() == pytest.approx(1.5064077, abs=1e-6)
    loss.backward()
    # d/d log pi = -(A - beta (log pi - log pi_old)) = -(2 - 0.5 ln 2)
    assert new.grad.item() == pytest.approx(-1.6534264, abs=1e-6)
    with pytest.raises(ValueError, match="dro_beta=None"):
        get_policy_loss_fn("dro")(old, new, adv, mask, "token-mean", {})


def test_sapo_gate() -> None:
    # ratios 1, 1, 2 with A = +1, -1, +1; tau_pos 1, tau_neg 2
    old = _t([[0.0, 0.0, 0.0]])
    new = _t([[0.0, 0.0, LN(2.0)]])
    adv = _t([[1.0, -1.0, 1.0]])
    mask = torch.ones(1, 3, dtype=torch.float64)
    loss, _ = get_policy_loss_fn("sapo")(old, new, adv, mask, "token-mean", {"tau_pos": 1.0, "tau_neg": 2.0})
    # g = (4/tau) sigmoid(tau (r - 1)): 4 * 0.5 = 2; 2 * 0.5 = 1; 4 * sigmoid(1) = 2.9242344
    # l = -g A: -2, +1, -2.9242344; seq-mean-token-mean of one row: -3.9242344 / 3
    assert loss.item() == pytest.approx(-1.3080781, abs=1e-6)
    # +policy_loss.tau_neg (upstream's SAPO scripts write it there) wins over actor.tau_neg: tau_neg = 4 gives the
    # A < 0 token g = (4/4) * 0.5 = 0.5, l = +0.5: (-2 + 0.5 - 2.9242344) / 3
    cfg = {"tau_pos": 1.0, "tau_neg": 2.0, "policy_loss": {"tau_neg": 4.0}}
    loss, _ = get_policy_loss_fn("sapo")(old, new, adv, mask, "token-mean", cfg)
    assert loss.item() == pytest.approx(-4.4242344 / 3, abs=1e-6)


def _bypass_inputs() -> tuple[torch.Tensor, ...]:
    # rollout probs 0.25, 0.1; current 0.5, 0.3: weights pi/pi_rollout = 2, 3; A = 1
    rollout = _t([[LN(0.25), LN(0.1)]])
    current = _t([[LN(0.5), LN(0.3)]])
    return rollout, current, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)


def test_bypass_reinforce_with_truncated_weights() -> None:
    rollout, current, adv, mask = _bypass_inputs()
    rc = {"rollout_is": "token", "rollout_is_threshold": 2.0, "loss_type": "reinforce"}
    loss, metrics = compute_policy_loss_bypass_mode(
        rollout, current, adv, mask, "token-mean", {}, rollout_correction=rc
    )
    # weights min(2, 2) = 2 and min(3, 2) = 2; l = -A w log pi: -2 ln 0.5 = 1.3862944, -2 ln 0.3 = 2.4079456
    assert loss.item() == pytest.approx(1.8971200, abs=1e-6)
    assert "rollout_corr/rollout_is_mean" in metrics


def test_bypass_reinforce_with_icepop_and_token_rejection() -> None:
    rollout, current, adv, mask = _bypass_inputs()
    icepop = {"rollout_is": "token", "rollout_is_threshold": "0.5_2.5", "loss_type": "reinforce"}
    loss, metrics = compute_policy_loss_bypass_mode(
        rollout, current, adv, mask, "token-mean", {}, rollout_correction=icepop
    )
    # IcePop: w = 3 is outside [0.5, 2.5] -> 0 (the token stays in the mask); w = 2 kept untruncated
    # (1.3862944 + 0) / 2 tokens
    assert loss.item() == pytest.approx(0.6931472, abs=1e-6)
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(0.5)
    rejected = {**icepop, "rollout_is_threshold": 2.0, "rollout_rs": "token_k1", "rollout_rs_threshold": "0.4_2.5"}
    loss_rs, _ = compute_policy_loss_bypass_mode(
        rollout, current, adv, mask, "token-mean", {}, rollout_correction=rejected
    )
    # token_k1 = -ln w: -0.693 (in [ln 0.4, ln 2.5] = [-0.916, 0.916]) kept; -1.099 rejected (mask 0):
    # only token 1 remains: -2 ln 0.5 / 1
    assert loss_rs.item() == pytest.approx(1.3862944, abs=1e-6)


def test_bypass_ppo_clip_does_not_apply_the_weights() -> None:
    rollout, current, adv, mask = _bypass_inputs()
    rc = {"rollout_is": "token", "rollout_is_threshold": 2.0, "loss_type": "ppo_clip"}
    loss, _ = compute_policy_loss_bypass_mode(
        rollout, current, adv, mask, "token-mean", {"clip_ratio": 0.2}, rollout_correction=rc
    )
    # ratios 2 and 3 against the rollout, clipped at 1.2: max(-A r, -A 1.2) = -1.2 each
    assert loss.item() == pytest.approx(-1.2)


def test_bypass_loss_needs_its_settings() -> None:
    rollout, current, adv, mask = _bypass_inputs()
    with pytest.raises(ValueError, match="bypass_mode=true"):
        compute_policy_loss_bypass_mode(rollout, current, adv, mask, "token-mean", {})


def test_value_loss_takes_the_loss_scale_factor() -> None:
    from verl.algorithms.core_algos import compute_value_loss

    ones = torch.ones(1, 2, dtype=torch.float64)
    # (V - R)^2 = 1 on both tokens (no clipping: V = V_old); 0.5 * (1 + 1) / loss_scale_factor 4
    loss, _ = compute_value_loss(ones, 0 * ones, ones, ones, 0.5, "seq-mean-token-sum-norm", loss_scale_factor=4)
    assert loss.item() == pytest.approx(0.25)
