"""Upstream v0.9 rollout correction: IcePop thresholds and the k1/k2/k3 rejection options, hand-computed."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.rollout_correction import (
    compute_is_weights,
    compute_rollout_correction,
    compute_rollout_correction_and_rejection_mask,
    compute_rollout_correction_weights,
)
from verl.algorithms.rollout_rejection import (
    compute_rollout_rejection_mask,
    parse_is_threshold,
    parse_rs_thresholds,
)

# log(pi_train / pi_rollout) of two 2-token responses
LOG_RATIO = torch.tensor([[0.05, -0.05], [0.3, 0.1]], dtype=torch.float64)
MASK = torch.ones(2, 2, dtype=torch.float64)


def test_threshold_specs() -> None:
    assert parse_is_threshold(2.0) == (2.0, None)
    assert parse_is_threshold("0.5_5.0") == (5.0, 0.5)
    bounds = parse_rs_thresholds(["token_k1", "seq_max_k2"], "0.6_1.6,2.5")
    assert bounds == {"token_k1": (0.6, 1.6), "seq_max_k2": (None, 2.5)}
    # one k1 number: the reciprocal is the lower bound; one entry is shared by every option
    assert parse_rs_thresholds(["seq_mean_k1", "token_k3"], 2.0) == {"seq_mean_k1": (0.5, 2.0), "token_k3": (None, 2.0)}
    with pytest.raises(ValueError, match="2 entries for 1"):
        parse_rs_thresholds(["token_k1"], "0.5_2,3")


def test_geometric_filter_seq_mean_k1() -> None:
    mask, metrics = compute_rollout_rejection_mask(LOG_RATIO, MASK, "seq_mean_k1", "0.9_1.1")
    # k1 = -log r; response means 0.0 (kept: ln 0.9 = -0.105 <= 0 <= 0.095) and -0.2 (< -0.105: rejected)
    torch.testing.assert_close(mask, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    assert metrics["rollout_rs_seq_mean_k1_mean"] == pytest.approx(-0.1)
    assert metrics["rollout_rs_seq_mean_k1_fraction_low"] == pytest.approx(0.5)
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(0.5)
    assert metrics["rollout_rs_seq_masked_fraction"] == pytest.approx(0.5)


def test_k2_k3_and_chained_options() -> None:
    # token_k3 = e^x - 1 - x: 0.00127, 0.00125, 0.04986, 0.00517; <= 0.01 rejects token (1, 0) only
    mask, _ = compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k3", 0.01)
    torch.testing.assert_close(mask, torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=torch.float64))
    # seq_max_k2 = max x^2 / 2: 0.00125 and 0.045; 0.01 rejects response 2 whole
    mask, metrics = compute_rollout_rejection_mask(LOG_RATIO, MASK, "seq_max_k2", "0.01")
    torch.testing.assert_close(mask, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    assert metrics["rollout_rs_seq_max_k2_max"] == pytest.approx(0.045)
    # seq_sum_k1 = -(0.4) for response 2 with ratio bounds 0.7_1.5 (ln 0.7 = -0.357): rejected; all options must pass
    mask, metrics = compute_rollout_rejection_mask(LOG_RATIO, MASK, "token_k3,seq_sum_k1", "0.05,0.7_1.5")
    torch.testing.assert_close(mask, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    assert metrics["rollout_rs_token_k3_masked_fraction"] == pytest.approx(0.0)
    assert metrics["rollout_rs_seq_sum_k1_masked_fraction"] == pytest.approx(0.5)


def test_icepop_zeroes_out_of_band_weights_without_truncating() -> None:
    rollout = torch.zeros(1, 3, dtype=torch.float64)
    old = torch.tensor([[math.log(0.4), math.log(3.0), math.log(6.0)]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    weights, metrics = compute_is_weights(old, rollout, mask, "token", "0.5_5.0")
    # 0.4 < 0.5 and 6 > 5 -> 0; 3 is kept as it is (TIS at 5 would also keep 3, at 2 would give 2)
    torch.testing.assert_close(weights, torch.tensor([[0.0, 3.0, 0.0]], dtype=torch.float64))
    assert metrics["rollout_is_oob_ratio"] == pytest.approx(2 / 3)
    tis, _ = compute_is_weights(old, rollout, mask, "token", 2.0)
    torch.testing.assert_close(tis, torch.tensor([[0.4, 2.0, 2.0]], dtype=torch.float64))
    # upstream's entry point from the log-ratio gives the same weights
    same, _ = compute_rollout_correction_weights(old - rollout, mask, "token", "0.5_5.0")
    torch.testing.assert_close(same, weights)


def test_sequence_icepop_and_unified_entry_point() -> None:
    # sequence weight = exp(0.05 - 0.05) = 1 and exp(0.4) = 1.4918; IcePop band [0.8, 1.25] keeps the first only
    weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
        LOG_RATIO, torch.zeros_like(LOG_RATIO), MASK, rollout_is="sequence", rollout_is_threshold="0.8_1.25"
    )
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(mask, MASK)  # IcePop leaves the response mask alone
    assert "rollout_corr/rollout_is_oob_ratio" in metrics


def test_legacy_levels_still_work_next_to_the_new_options() -> None:
    old, rollout = LOG_RATIO, torch.zeros_like(LOG_RATIO)
    legacy = compute_rollout_correction(old, rollout, MASK, rollout_rs="geometric", rollout_rs_threshold=1.1)
    new = compute_rollout_correction(old, rollout, MASK, rollout_rs="seq_mean_k1", rollout_rs_threshold=1.1)
    # geometric mean of ratios: exp(0) = 1 (kept) and exp(0.2) = 1.22 > 1.1 (rejected) in both spellings
    torch.testing.assert_close(legacy.response_mask, new.response_mask)
    torch.testing.assert_close(new.response_mask, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))


def test_offpolicy_metrics_without_rollout_log_probs() -> None:
    from verl.algorithms.rollout_correction import compute_offpolicy_metrics, compute_rollout_corr_metrics_from_logprobs

    old = torch.tensor([[math.log(0.5), math.log(0.5)]], dtype=torch.float64)
    # mean log-prob ln 0.5 -> perplexity 2, log-perplexity ln 2
    assert compute_offpolicy_metrics(old, None, torch.ones(1, 2)) == pytest.approx(
        {"training_ppl": 2.0, "training_log_ppl": math.log(2.0)}
    )
    # the same policy on both sides: k1 KL 0, ppl ratio 1
    metrics = compute_rollout_corr_metrics_from_logprobs(old, old, torch.ones(1, 2))
    assert metrics["rollout_corr/kl"] == pytest.approx(0.0) and metrics["rollout_corr/ppl_ratio"] == pytest.approx(1.0)
