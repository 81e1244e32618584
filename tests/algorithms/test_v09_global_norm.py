"""agg_loss / compute_value_loss with upstream v0.9's global normalisation, the rollout-correction presets, and
rollout_corr_helper's v0.9 names: hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from verl.algorithms.config import RolloutCorrectionConfig
from verl.algorithms.losses import agg_loss, compute_value_loss
from verl.algorithms.rollout_correction import compute_rollout_correction
from verl.trainer.ppo.rollout_corr_helper import (
    SUPPORTED_ROLLOUT_RS_OPTIONS,
    TOKEN_LEVEL_ROLLOUT_RS_OPTIONS,
    compute_is_metrics,
    compute_offpolicy_metrics,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # 5 tokens; row sums 3 and 9


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        ("token-mean", {"batch_num_tokens": 10, "dp_size": 2}, 12 / 10 * 2),
        ("token-sum", {"dp_size": 4}, 12 * 4),
        ("seq-mean-token-sum", {"global_batch_size": 4, "dp_size": 2}, 12 / 4 * 2),
        ("seq-mean-token-mean", {"global_batch_size": 4}, (1.5 + 3.0) / 4),
        ("seq-mean-token-sum-norm", {"global_batch_size": 4, "loss_scale_factor": 6}, 12 / 4 / 6),
    ],
)
def test_agg_loss_global_normalisation(mode: str, kwargs: dict, expected: float) -> None:
    assert agg_loss(LOSS, MASK, mode, **kwargs).item() == pytest.approx(expected)


def test_agg_loss_micro_batches_add_up_to_the_whole() -> None:
    torch.manual_seed(0)
    loss, mask = torch.rand(8, 5), (torch.rand(8, 5) > 0.3).float()
    mask[:, 0] = 1
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        kw = {"batch_num_tokens": mask.sum(), "global_batch_size": 8}
        whole = agg_loss(loss, mask, mode, **kw)
        parts = sum(agg_loss(loss[i : i + 2], mask[i : i + 2], mode, **kw) for i in range(0, 8, 2))
        torch.testing.assert_close(parts, whole)
        torch.testing.assert_close(whole, agg_loss(loss, mask, mode))  # one micro-batch: the local normalisation


def test_agg_loss_needs_global_counts_on_several_ranks() -> None:
    with pytest.raises(ValueError, match="batch_num_tokens"):
        agg_loss(LOSS, MASK, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="global_batch_size"):
        agg_loss(LOSS, MASK, "seq-mean-token-mean", dp_size=2)


def test_compute_value_loss_forwards_the_counts() -> None:
    v = torch.zeros(2, 3)
    loss, _ = compute_value_loss(v, torch.ones(2, 3), v, MASK, cliprange_value=0.5, batch_num_tokens=10, dp_size=2)
    assert loss.item() == pytest.approx(0.5 * 5 / 10 * 2)


def test_presets_set_upstreams_fields_and_run() -> None:
    cfg = RolloutCorrectionConfig.decoupled_geo_rs_seq_tis()
    assert (cfg.rollout_is, cfg.rollout_is_threshold, cfg.rollout_rs, cfg.rollout_rs_threshold, cfg.bypass_mode) == (
        "sequence",
        2.0,
        "seq_mean_k1",
        "0.999_1.001",
        False,
    )
    icepop = RolloutCorrectionConfig.bypass_pg_token_icepop(threshold=4.0, threshold_lower=0.25)
    assert (icepop.rollout_is_threshold, icepop.bypass_mode, icepop.loss_type) == ("0.25_4.0", True, "reinforce")
    assert RolloutCorrectionConfig.disabled().rollout_is is None
    old = torch.log(torch.full((2, 3), 0.5))
    for name in ("decoupled_token_is", "decoupled_seq_is_rs", "decoupled_k3_rs_token_tis", "bypass_ppo_clip_geo_rs"):
        c = getattr(RolloutCorrectionConfig, name)()
        out = compute_rollout_correction(
            old,
            old - 0.1,
            MASK,
            rollout_is=c.rollout_is,
            rollout_is_threshold=c.rollout_is_threshold,
            rollout_rs=c.rollout_rs,
            rollout_rs_threshold=c.rollout_rs_threshold,
        )
        assert out.response_mask.shape == MASK.shape, name


def test_is_metrics_hand_values() -> None:
    raw = torch.tensor([[1.0, 6.0], [0.5, 1.0]])
    applied = raw.clamp(max=2.0)
    mask = torch.ones(2, 2)
    m = compute_is_metrics(applied, raw, raw.log(), mask, "token", 2.0)
    assert m["rollout_is_mean"] == pytest.approx((1 + 2 + 0.5 + 1) / 4)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.25)  # 6 > 2 (raw)
    assert m["rollout_is_ratio_fraction_low"] == pytest.approx(0.0)  # 0.5 is not below 1/2
    assert (m["rollout_is_max"], m["rollout_is_min"]) == (2.0, 0.5)
    assert m["rollout_is_seq_fraction_high"] == pytest.approx(0.5)  # raw row means 3.5 and 0.75
    mean = 4.5 / 4
    assert m["rollout_is_std"] == pytest.approx(math.sqrt((1 + 4 + 0.25 + 1) / 4 - mean**2))
    with pytest.raises(ValueError, match="no valid token"):
        compute_is_metrics(applied, raw, raw.log(), torch.zeros(2, 2), "token", 2.0)


def test_offpolicy_metrics_without_rollout_and_option_sets() -> None:
    lp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))
    m = compute_offpolicy_metrics(lp, None, torch.ones(2, 2))
    assert set(m) == {"training_ppl", "training_log_ppl"}
    assert m["training_ppl"] == pytest.approx((math.sqrt(8) + 2) / 2)
    assert TOKEN_LEVEL_ROLLOUT_RS_OPTIONS == {"token_k1", "token_k2", "token_k3"} <= SUPPORTED_ROLLOUT_RS_OPTIONS
