"""Rollout correction (verl.algorithms.rollout_correction): weights, rejection, veto and mismatch metrics by hand."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.core_algos import get_policy_loss_fn
from verl.algorithms.rollout_correction import (
    compute_is_weights,
    compute_mismatch_metrics,
    compute_rejection_mask,
    compute_rollout_correction,
    compute_token_veto_mask,
)

# The rollout gives every token log-prob 0, so old_log_prob is the log-ratio r: token weights 2, .5, 4 | 1.5, 3, pad.
TOKEN_W = [[2.0, 0.5, 4.0], [1.5, 3.0, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def _logs() -> tuple[torch.Tensor, torch.Tensor]:
    old = torch.tensor([[math.log(w) for w in row] for row in TOKEN_W])
    old[1, 2] = 50.0  # padding: a huge value must neither count nor overflow
    return old, torch.zeros_like(old)


def test_token_weights_are_truncated_and_zero_on_padding() -> None:
    old, rollout = _logs()
    w, m = compute_is_weights(old, rollout, MASK, "token", threshold=2.5)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 2.5], [1.5, 2.5, 0.0]]))
    assert m["rollout_is_mean"] == pytest.approx(11 / 5)  # before truncation
    assert (m["rollout_is_max"], m["rollout_is_min"]) == (pytest.approx(4.0), pytest.approx(0.5))
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(2 / 5)  # 4 and 3 truncated
    assert m["rollout_is_ratio_fraction_low"] == 0.0  # nothing below 1 / 2.5
    raw = torch.tensor([2.0, 0.5, 4.0, 1.5, 3.0])
    assert m["rollout_is_std"] == pytest.approx(raw.std(unbiased=False).item(), rel=1e-5)
    # ESS of the truncated weights: 1 / mean((w / mean w)^2) = 1.8^2 / (19 / 5)
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1.8**2 / 3.8, rel=1e-5)
    assert not w.requires_grad


def test_sequence_weights_are_the_product_of_the_token_ratios() -> None:
    old, rollout = _logs()
    w, m = compute_is_weights(old, rollout, MASK, "sequence", threshold=4.2)
    # 2 * .5 * 4 = 4 and 1.5 * 3 = 4.5 (truncated to 4.2), the same for every token of the response
    assert torch.allclose(w, torch.tensor([[4.0, 4.0, 4.0], [4.2, 4.2, 0.0]]))
    assert m["rollout_is_max"] == pytest.approx(4.5) and m["rollout_is_min"] == pytest.approx(4.0)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)  # counted per response


def test_batch_normalize_makes_the_mean_weight_one() -> None:
    old, rollout = _logs()
    w, m = compute_is_weights(old, rollout, MASK, "token", threshold=2.5, batch_normalize=True)
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(9 / 5)
    assert (w[MASK.bool()].mean()).item() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("level", "upper", "lower", "expected"),
    [
        ("token", 2.5, None, [[1, 1, 0], [1, 0, 0]]),  # 4 and 3 above 2.5; lower 0.4 keeps 0.5
        ("token", 2.5, 0.6, [[1, 0, 0], [1, 0, 0]]),  # 0.5 below 0.6 too
        ("sequence", 4.2, None, [[1, 1, 1], [0, 0, 0]]),  # 4 kept, 4.5 rejected
        ("geometric", 2.0, None, [[1, 1, 1], [0, 0, 0]]),  # 4^(1/3) = 1.59 kept, 4.5^(1/2) = 2.12 rejected
        ("geometric", 2.2, None, [[1, 1, 1], [1, 1, 0]]),
    ],
)
def test_rejection_masks(level: str, upper: float, lower: float | None, expected: list[list[int]]) -> None:
    old, rollout = _logs()
    mask, m = compute_rejection_mask(old, rollout, MASK, level, upper, lower)
    assert torch.equal(mask, torch.tensor(expected, dtype=MASK.dtype))
    rejected = 5 - sum(map(sum, expected))
    assert m["rollout_rs_masked_fraction"] == pytest.approx(rejected / 5)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(sum(any(row) for row in (MASK - mask).tolist()) / 2)


def test_geometric_statistics_are_per_response() -> None:
    old, rollout = _logs()
    _, m = compute_rejection_mask(old, rollout, MASK, "geometric", 2.0)
    assert m["rollout_rs_max"] == pytest.approx(math.sqrt(4.5), rel=1e-5)
    assert m["rollout_rs_min"] == pytest.approx(4 ** (1 / 3), rel=1e-5)
    assert m["rollout_rs_ratio_fraction_high"] == pytest.approx(0.5)


def test_token_veto_rejects_the_whole_response() -> None:
    old, rollout = _logs()
    mask, m = compute_token_veto_mask(old, rollout, MASK, threshold=0.6)
    assert torch.equal(mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert m["rollout_is_veto_fraction"] == pytest.approx(0.5)
    assert m["rollout_is_catastrophic_token_fraction"] == pytest.approx(1 / 5)


def test_mismatch_metrics_by_hand() -> None:
    old = torch.tensor([[math.log(0.5), math.log(0.25)]])
    rollout = torch.tensor([[math.log(0.25), math.log(0.25)]])
    m = compute_mismatch_metrics(old, rollout, torch.ones(1, 2))
    assert m["kl"] == pytest.approx(-math.log(2) / 2)  # k1: mean(log pi_rollout - log pi_old)
    assert m["k3_kl"] == pytest.approx((1 - math.log(2)) / 2)  # mean(exp(r) - r - 1)
    assert m["training_ppl"] == pytest.approx(math.sqrt(8))  # exp(-mean log pi_old) = (0.5 * 0.25)^(-1/2)
    assert m["rollout_ppl"] == pytest.approx(4.0)
    assert m["ppl_ratio"] == pytest.approx(math.sqrt(8) / 4)
    assert m["log_ppl_diff"] == pytest.approx(math.log(math.sqrt(8) / 4))
    assert m["chi2_token"] == pytest.approx((4 + 1) / 2 - 1)
    assert m["chi2_seq"] == pytest.approx(2**2 - 1)


def test_identical_policies_give_no_gap() -> None:
    old = torch.log(torch.rand(3, 4) * 0.9 + 0.05)
    m = compute_mismatch_metrics(old, old.clone(), torch.ones(3, 4))
    assert m["kl"] == 0.0 and m["k3_kl"] == 0.0 and m["ppl_ratio"] == pytest.approx(1.0)


def test_combined_correction_prefixes_metrics_and_intersects_masks() -> None:
    old, rollout = _logs()
    res = compute_rollout_correction(
        old,
        rollout,
        MASK,
        rollout_is="token",
        rollout_is_threshold=2.5,
        rollout_rs="geometric",
        rollout_rs_threshold=2.0,
        rollout_token_veto_threshold=0.6,
    )
    assert torch.equal(res.response_mask, torch.zeros_like(MASK))  # veto drops response 0, geometric RS response 1
    assert res.rollout_is_weights is not None
    assert res.metrics["rollout_corr/total_masked_fraction"] == pytest.approx(1.0)
    assert res.metrics["rollout_corr/rollout_is_mean"] == pytest.approx(11 / 5)
    assert "rollout_corr/k3_kl" in res.metrics and all(k.startswith("rollout_corr/") for k in res.metrics)
    only_rs = compute_rollout_correction(old, rollout, MASK, rollout_rs="token", rollout_is_threshold=2.5)
    assert only_rs.rollout_is_weights is None  # rollout_rs_threshold null: rollout_is_threshold is the bound
    assert torch.equal(only_rs.response_mask, torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))


def test_bad_levels_and_thresholds_are_named() -> None:
    old, rollout = _logs()
    with pytest.raises(ValueError, match="rollout_is='geometric'"):
        compute_is_weights(old, rollout, MASK, "geometric")
    with pytest.raises(ValueError, match="rollout_is_threshold=0.0 must be > 0"):
        compute_is_weights(old, rollout, MASK, "token", threshold=0.0)
    with pytest.raises(ValueError, match="lower <= upper"):
        compute_rejection_mask(old, rollout, MASK, "token", 2.0, 3.0)
    with pytest.raises(ValueError, match="same shape"):
        compute_is_weights(old, rollout[:, :2], MASK)


def test_weights_scale_the_policy_gradient_per_token() -> None:
    """On-policy (ratio 1) the vanilla PPO loss's gradient on token t is -A_t * w_t / N: the weights multiply it."""
    old, rollout = _logs()
    weights, _ = compute_is_weights(old, rollout, MASK, "token", threshold=2.5)
    adv = torch.tensor([[1.0, -2.0, 0.5], [3.0, 1.0, 9.0]])
    grads = []
    for w in (None, weights):
        log_prob = torch.zeros(2, 3, requires_grad=True)
        loss, _ = get_policy_loss_fn("vanilla")(
            old_log_prob=torch.zeros(2, 3),
            log_prob=log_prob,
            advantages=adv,
            response_mask=MASK,
            loss_agg_mode="token-mean",
            rollout_is_weights=w,
        )
        loss.backward()
        grads.append(log_prob.grad)
    plain, weighted = grads
    assert torch.allclose(plain, -adv * MASK / 5, atol=1e-6)
    assert torch.allclose(weighted, plain * weights, atol=1e-6)
    assert not torch.allclose(weighted, plain)


def test_rejected_tokens_get_no_gradient() -> None:
    old, rollout = _logs()
    mask, _ = compute_rejection_mask(old, rollout, MASK, "token", 2.5)
    log_prob = torch.zeros(2, 3, requires_grad=True)
    loss, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=torch.zeros(2, 3), log_prob=log_prob, advantages=torch.ones(2, 3), response_mask=mask
    )
    loss.backward()
    assert torch.equal(log_prob.grad != 0, mask.bool())
