"""Policy losses, loss aggregation, value and entropy losses of verl.trainer.ppo.core_algos (numbers by hand)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos

# Four real tokens and one masked token whose huge log-prob must neither overflow nor count.
RATIOS = [1.5, 0.5, 0.5, 5.0]
ADVS = [1.0, 1.0, -1.0, -1.0, 7.0]
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])


def _vanilla_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    old = torch.zeros(1, 5)
    log_prob = torch.tensor([[*(math.log(r) for r in RATIOS), 100.0]], requires_grad=True)
    adv = torch.tensor([ADVS])
    return old, log_prob, adv


@dataclass
class _PolicyLossCfg:
    clip_cov_ratio: float = 0.0002


@dataclass
class _ActorCfg:
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    policy_loss: _PolicyLossCfg = field(default_factory=_PolicyLossCfg)


@pytest.mark.parametrize(
    "config",
    [
        None,
        {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 3.0},
        OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 3.0}),
        _ActorCfg(),
    ],
)
def test_vanilla_ppo_by_hand(config) -> None:
    old, log_prob, adv = _vanilla_inputs()
    loss, metrics = core_algos.get_policy_loss_fn("vanilla")(old, log_prob, adv, MASK, "token-mean", config)
    # r=1.5,A=+1: max(-1.5, -1.2) = -1.2 (clipped)   r=0.5,A=+1: max(-0.5, -0.8) = -0.5
    # r=0.5,A=-1: max(0.5, 0.8) = 0.8 (clipped)      r=5,A=-1: max(5, 1.2) = 5 -> dual clip min(5, 3) = 3
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0) / 4, abs=1e-6)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.5)
    assert float(metrics["actor/pg_clipfrac_lower"]) == pytest.approx(0.25)
    assert float(metrics["actor/ppo_kl"]) == pytest.approx(-sum(math.log(r) for r in RATIOS) / 4, abs=1e-6)
    loss.backward()
    # only the unclipped token 2 carries gradient: d(-A r)/dlogp = -A r = -0.5, over 4 tokens.
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, -0.125, 0.0, 0.0, 0.0]]))


def test_vanilla_clip_higher_and_is_weights() -> None:
    old, log_prob, adv = _vanilla_inputs()
    cfg = {"clip_ratio": 0.2, "clip_ratio_high": 0.6}
    loss, metrics = core_algos.compute_policy_loss_vanilla(old, log_prob, adv, MASK, config=cfg)
    # clip range [0.8, 1.6]: token 1 is no longer clipped (-1.5).
    assert loss.item() == pytest.approx((-1.5 - 0.5 + 0.8 + 3.0) / 4, abs=1e-6)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.25)
    weights = torch.tensor([[2.0, 1.0, 1.0, 0.5, 1.0]])
    loss, _ = core_algos.compute_policy_loss_vanilla(old, log_prob, adv, MASK, config=None, rollout_is_weights=weights)
    assert loss.item() == pytest.approx((-2.4 - 0.5 + 0.8 + 1.5) / 4, abs=1e-6)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        core_algos.compute_policy_loss_vanilla(old, log_prob, adv, MASK, config={"clip_ratio_c": 1.0})


def test_legacy_compute_policy_loss() -> None:
    old, log_prob, adv = _vanilla_inputs()
    pg_loss, clipfrac, ppo_kl, clipfrac_lower = core_algos.compute_policy_loss(
        old, log_prob, adv, MASK, cliprange=0.2, clip_ratio_c=3.0
    )
    assert pg_loss.item() == pytest.approx(2.1 / 4, abs=1e-6)
    assert float(clipfrac) == pytest.approx(0.5) and float(clipfrac_lower) == pytest.approx(0.25)
    assert float(ppo_kl) == pytest.approx(-sum(math.log(r) for r in RATIOS) / 4, abs=1e-6)


def test_agg_loss_modes_by_hand() -> None:
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert core_algos.agg_loss(loss_mat, mask, "token-mean").item() == pytest.approx(7 / 3)
    assert core_algos.agg_loss(loss_mat, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert core_algos.agg_loss(loss_mat, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)
    assert core_algos.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx(3.5 / 3)
    with pytest.raises(ValueError, match="token-avg"):
        core_algos.agg_loss(loss_mat, mask, "token-avg")


def test_gspo_sequence_ratio() -> None:
    old = torch.zeros(2, 3)
    log_prob = torch.tensor([[math.log(1.1), math.log(1.3), 0.0], [math.log(2.0), math.log(2.0), 0.0]])
    log_prob.requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    loss, metrics = core_algos.get_policy_loss_fn("gspo")(old, log_prob, adv, mask, "token-mean", None)
    s1 = math.sqrt(1.1 * 1.3)  # geometric mean of the token ratios, inside [0.8, 1.2]
    s2 = 2.0  # A<0: max(2, 1.2) = 2, no dual clip in GSPO
    assert loss.item() == pytest.approx((-s1 + s2) / 2, abs=1e-6)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.0)
    loss.backward()
    # d/dlogp_t of -A s_i averaged over 2 tokens and 2 sequences: -A s_i / 4.
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-s1 / 4, -s1 / 4, 0.0], [0.5, 0.5, 0.0]]))


def test_gpg_loss() -> None:
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, -4.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = core_algos.compute_policy_loss_gpg(torch.zeros(2, 2), log_prob, adv, mask)
    assert loss.item() == pytest.approx((1.0 + 2.0 - 1.0) / 3)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1 / 3, -1 / 3], [2 / 3, 0.0]]))


def test_cispo_clipped_stopgrad_weight() -> None:
    log_prob = torch.tensor([[math.log(1.5), math.log(0.5), math.log(1.1)]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -2.0]])
    loss, metrics = core_algos.compute_policy_loss_cispo(torch.zeros(1, 3), log_prob, adv, torch.ones(1, 3))
    # weights clip(r, 0.8, 1.2) = [1.2, 0.8, 1.1]; l = -w A log pi.
    w = [1.2, 0.8, 1.1]
    expected = -(w[0] * math.log(1.5) + w[1] * math.log(0.5) - 2 * w[2] * math.log(1.1)) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(2 / 3)
    assert float(metrics["actor/pg_clipfrac_lower"]) == pytest.approx(1 / 3)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.2 / 3, -0.8 / 3, 2.2 / 3]]))


def test_geo_mean_by_hand() -> None:
    log_prob = torch.tensor([[0.1, 0.5], [-0.6, 0.2]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    cfg = {"clip_ratio": 0.4}
    loss, metrics = core_algos.compute_policy_loss_geo_mean(
        torch.zeros(2, 2), log_prob, adv, torch.ones(2, 2), config=cfg
    )
    # A>0 row: log ratios clipped above at 0.4 -> [0.1, 0.4], R = exp(0.25), l = -R
    # A<0 row: clipped below at -0.4 -> [-0.4, 0.2], R = exp(-0.1), l = +R
    assert loss.item() == pytest.approx((-math.exp(0.25) + math.exp(-0.1)) / 2, abs=1e-6)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.25)
    assert float(metrics["actor/pg_clipfrac_lower"]) == pytest.approx(0.25)
    loss.backward()
    expected_grad = torch.tensor([[-math.exp(0.25) / 4, 0.0], [0.0, math.exp(-0.1) / 4]])
    torch.testing.assert_close(log_prob.grad, expected_grad)


def _cov_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # centred A = [3, -1, -1, -1]; centred log pi = [1, 0, 0, -1] -> covariance [3, 0, 0, 1]
    log_prob = torch.tensor([[0.0, -1.0, -1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[3.0, -1.0, -1.0, -1.0]])
    return log_prob, adv, torch.ones(1, 4)


def test_clip_cov_drops_high_covariance_tokens() -> None:
    log_prob, adv, mask = _cov_inputs()
    cfg = OmegaConf.create(
        {"clip_ratio": 0.2, "policy_loss": {"clip_cov_ratio": 0.5, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}}
    )
    old = log_prob.detach().clone()  # ratio 1: PPO clips nothing
    loss, metrics = core_algos.compute_policy_loss_clip_cov(old, log_prob, adv, mask, config=cfg)
    # only token 0 has covariance in (1, 5); it is removed: mean of [0, 1, 1, 1].
    assert loss.item() == pytest.approx(0.75)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.25)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, 0.25, 0.25, 0.25]]))


def test_kl_cov_penalises_top_covariance_token() -> None:
    log_prob, adv, mask = _cov_inputs()
    old = log_prob.detach() - torch.tensor([[0.1, 0.2, 0.0, 0.0]])
    cfg = {"policy_loss": {"kl_cov_ratio": 0.25, "ppo_kl_coef": 0.5}}
    loss, metrics = core_algos.compute_policy_loss_kl_cov(old, log_prob, adv, mask, config=cfg)
    # unclipped -A r for all; token 0 (largest covariance) also gets 0.5 * |0.1|.
    expected = (-3 * math.exp(0.1) + 0.05 + math.exp(0.2) + 1 + 1) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert float(metrics["actor/ppo_kl"]) == pytest.approx(-0.3 / 4, abs=1e-6)
    loss.backward()
    expected_grad = torch.tensor([[(-3 * math.exp(0.1) + 0.5) / 4, math.exp(0.2) / 4, 0.25, 0.25]])
    torch.testing.assert_close(log_prob.grad, expected_grad)


@pytest.mark.parametrize("name", ["vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "cispo", "geo_mean"])
def test_every_loss_is_finite_on_extreme_log_ratios(name: str) -> None:
    old = torch.tensor([[0.0, -200.0, 0.0]])
    log_prob = torch.tensor([[-200.0, 0.0, -1.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, 0.5]])
    loss, metrics = core_algos.get_policy_loss_fn(name)(
        old, log_prob, adv, torch.ones(1, 3), "token-mean", None, torch.ones(1, 3)
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(log_prob.grad).all()
    assert "actor/ppo_kl" in metrics


def test_value_loss_by_hand() -> None:
    vpreds = torch.tensor([[1.0, 2.0, 50.0]])
    values = torch.tensor([[0.5, 0.5, 0.0]])
    returns = torch.tensor([[2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    vf_loss, clipfrac = core_algos.compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.2)
    # clipped preds [0.7, 0.7]; errors unclipped [1, 4], clipped [1.69, 0.49]; max [1.69, 4].
    assert vf_loss.item() == pytest.approx(0.5 * (1.69 + 4.0) / 2, abs=1e-6)
    assert clipfrac.item() == pytest.approx(0.5)


def test_entropy_loss_uniform() -> None:
    logits = torch.zeros(2, 3, 8)
    logits[1, 2] = torch.tensor([100.0, 0, 0, 0, 0, 0, 0, 0])  # near-zero entropy, but masked out
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert core_algos.compute_entropy_loss(logits, mask).item() == pytest.approx(math.log(8), abs=1e-6)
