"""Registries and advantage estimators of verl.trainer.ppo.core_algos.

Expected numbers are worked out by hand (shown in comments) or by a few lines of numpy in the test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import AdvantageEstimator

EPS = 1e-6


def _outcome_batch(scores: list[float], lengths: list[int], width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rewards with each row's score on its last valid token, and the matching response mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for row, (score, length) in enumerate(zip(scores, lengths)):
        mask[row, :length] = 1
        rewards[row, length - 1] = score
    return rewards, mask


def _expand(per_row: list[float], mask: torch.Tensor) -> torch.Tensor:
    return torch.tensor(per_row, dtype=torch.float32).unsqueeze(-1) * mask


# ----------------------------------------------------------------------------------------------------- registries


def test_builtin_names_registered() -> None:
    for member in AdvantageEstimator:
        assert core_algos.get_adv_estimator_fn(member) is core_algos.get_adv_estimator_fn(member.value)
    assert AdvantageEstimator.GRPO == "grpo" and AdvantageEstimator("gae") is AdvantageEstimator.GAE
    expected = {"gae", "grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "reinforce_plus_plus"}
    expected |= {"reinforce_plus_plus_baseline", "remax", "opo", "gpg"}
    assert expected <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage
    losses = {"vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "cispo", "geo_mean"}
    assert losses <= set(core_algos.POLICY_LOSS_REGISTRY)
    assert core_algos.get_policy_loss_fn("vanilla") is core_algos.compute_policy_loss_vanilla


def test_unknown_names_list_the_registered_ones() -> None:
    # verl's wording first (its tests and recipes match on it), then the registered names
    with pytest.raises(ValueError, match=r"^Unknown advantage estimator simply: nope\..*grpo"):
        core_algos.get_adv_estimator_fn("nope")
    with pytest.raises(ValueError, match=r"^Unsupported loss mode: nope\. Supported modes are: \[.*'vanilla'"):
        core_algos.get_policy_loss_fn("nope")
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: GAE"):
        core_algos.get_adv_estimator_fn("GAE")  # case-sensitive, as verl


def test_user_estimator_and_loss_found_by_name() -> None:
    try:

        @core_algos.register_adv_est("test_constant_adv")
        def constant_adv(token_level_rewards, response_mask, config=None, **kwargs):
            adv = torch.full_like(token_level_rewards, 0.5) * response_mask
            return adv, adv

        @core_algos.register_policy_loss("test_neg_logp")
        def neg_logp(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode="token-mean",
            config=None,
            rollout_is_weights=None,
        ):
            return core_algos.agg_loss(-advantages * log_prob, response_mask, loss_agg_mode), {}

        fn = core_algos.get_adv_estimator_fn("test_constant_adv")
        adv, _ = fn(token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3), index=np.array(["a", "b"]))
        assert torch.equal(adv, torch.full((2, 3), 0.5))
        loss, _ = core_algos.get_policy_loss_fn("test_neg_logp")(
            torch.zeros(1, 2), torch.tensor([[-1.0, -3.0]]), torch.ones(1, 2), torch.ones(1, 2)
        )
        assert loss.item() == pytest.approx(2.0)

        # Estimators (as verl): the same function again is fine; a different one under a taken name is refused.
        core_algos.register_adv_est("test_constant_adv")(constant_adv)
        with pytest.raises(ValueError, match="Adv estimator test_constant_adv has already been registered"):
            core_algos.register_adv_est("test_constant_adv")(lambda **kw: None)
        with pytest.raises(ValueError, match="Adv estimator grpo has already been registered"):
            core_algos.register_adv_est(AdvantageEstimator.GRPO)(constant_adv)
        # Policy losses (as verl): a taken name is replaced, so a recipe can override a built-in loss.
        original = core_algos.POLICY_LOSS_REGISTRY["vanilla"]
        try:
            assert core_algos.register_policy_loss("vanilla")(neg_logp) is neg_logp
            assert core_algos.get_policy_loss_fn("vanilla") is neg_logp
        finally:
            core_algos.POLICY_LOSS_REGISTRY["vanilla"] = original
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("test_constant_adv", None)
        core_algos.POLICY_LOSS_REGISTRY.pop("test_neg_logp", None)


# ---------------------------------------------------------------------------------------------------------- GRPO

GROUP_INDEX = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
GROUP_SCORES = [1.0, 0.0, 2.0, 3.0, 1.0, 5.0]
GROUP_LENGTHS = [4, 2, 3, 1, 4, 2]


@pytest.mark.parametrize("name", ["grpo", "grpo_vectorized"])
def test_grpo_by_hand(name: str) -> None:
    rewards, mask = _outcome_batch(GROUP_SCORES, GROUP_LENGTHS)
    fn = core_algos.get_adv_estimator_fn(name)
    adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=GROUP_INDEX)
    # a: mean 1, unbiased std 1; b: mean 2, std sqrt(2); c alone: mean 0, std 1.
    r2 = math.sqrt(2)
    expected = [0.0, -1 / (1 + EPS), 1 / (1 + EPS), 1 / (r2 + EPS), -1 / (r2 + EPS), 5 / (1 + EPS)]
    torch.testing.assert_close(adv, _expand(expected, mask))
    torch.testing.assert_close(ret, adv)

    # Dr. GRPO: no std division.
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=GROUP_INDEX, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv, _expand([0.0, -1.0, 1.0, 1.0, -1.0, 5.0], mask))
    # The flag may come from the algorithm config when not passed explicitly.
    cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    adv_cfg, _ = fn(token_level_rewards=rewards, response_mask=mask, index=GROUP_INDEX, config=cfg)
    torch.testing.assert_close(adv_cfg, adv)


@pytest.mark.parametrize("norm", [True, False])
def test_vectorized_equals_loop_on_random_groups(norm: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        bsz, width = 37, 6
        index = np.array([f"uid-{i}" for i in torch.randint(0, 12, (bsz,), generator=gen).tolist()], dtype=object)
        rewards = torch.randn(bsz, width, generator=gen)
        mask = (torch.rand(bsz, width, generator=gen) > 0.3).float()
        kwargs = dict(token_level_rewards=rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=norm)
        loop, _ = core_algos.compute_grpo_outcome_advantage(**kwargs)
        vec, _ = core_algos.compute_grpo_vectorized_outcome_advantage(**kwargs)
        torch.testing.assert_close(vec, loop, rtol=1e-5, atol=1e-5)
        loop, _ = core_algos.compute_rloo_outcome_advantage(**kwargs)
        vec, _ = core_algos.compute_rloo_vectorized_outcome_advantage(**kwargs)
        torch.testing.assert_close(vec, loop, rtol=1e-5, atol=1e-5)
    # Integer group ids work as well as strings.
    int_index = np.array([0, 0, 7, 7, 7])
    rewards = torch.randn(5, 3, generator=gen)
    a, _ = core_algos.compute_grpo_outcome_advantage(rewards, torch.ones(5, 3), int_index)
    b, _ = core_algos.compute_grpo_vectorized_outcome_advantage(rewards, torch.ones(5, 3), int_index)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_grpo_index_errors() -> None:
    rewards, mask = _outcome_batch([1.0, 2.0], [1, 1])
    with pytest.raises(ValueError, match="index has 3 entries"):
        core_algos.compute_grpo_outcome_advantage(rewards, mask, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="index"):
        core_algos.compute_grpo_outcome_advantage(rewards, mask, None)


def test_grpo_passk_by_hand() -> None:
    rewards, mask = _outcome_batch([1.0, 3.0, 2.0, 0.0, 4.0], [2, 3, 1, 4, 2])
    index = np.array(["a", "a", "a", "b", "b"], dtype=object)
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    # a: best 3, second 2 -> +1 on row 1; b: best 4, second 0 -> +4 on row 4.
    torch.testing.assert_close(adv, _expand([0.0, 1.0, 0.0, 0.0, 4.0], mask))
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(
        rewards, mask, index, config={"norm_adv_by_std_in_grpo": True}
    )
    # std(a) = 1 (unbiased); std(b) = sqrt(8).
    torch.testing.assert_close(adv, _expand([0.0, 1 / (1 + EPS), 0.0, 0.0, 4 / (math.sqrt(8) + EPS)], mask))
    with pytest.raises(ValueError, match="group 'c'"):
        core_algos.compute_grpo_passk_outcome_advantage(rewards[:1], mask[:1], np.array(["c"]))


# ------------------------------------------------------------------------------------------------ RLOO / OPO / GPG


@pytest.mark.parametrize("name", ["rloo", "rloo_vectorized"])
def test_rloo_by_hand(name: str) -> None:
    rewards, mask = _outcome_batch(GROUP_SCORES, GROUP_LENGTHS)
    adv, ret = core_algos.get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=GROUP_INDEX)
    # a [1, 0, 2]: 1 - 1, 0 - 1.5, 2 - 0.5; b [3, 1]: 3 - 1, 1 - 3; c alone keeps its score.
    torch.testing.assert_close(adv, _expand([0.0, -1.5, 1.5, 2.0, -2.0, 5.0], mask))
    torch.testing.assert_close(ret, adv)


def test_opo_length_weighted_baseline() -> None:
    rewards, mask = _outcome_batch([1.0, 0.0, 3.0], [2, 4, 3])
    adv, _ = core_algos.compute_opo_outcome_advantage(rewards, mask, np.array([0, 0, 1]))
    # group 0: b = (2*1 + 4*0) / 6 = 1/3; group 1 alone: b = 0.
    torch.testing.assert_close(adv, _expand([2 / 3, -1 / 3, 3.0], mask))


def test_gpg_alpha_from_invalid_groups() -> None:
    rewards, mask = _outcome_batch([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [1, 2, 3, 4, 1, 1])
    index = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
    adv, _ = core_algos.compute_gpg_outcome_advantage(rewards, mask, index)
    # b and c have equal scores (4 invalid of 6): alpha = 6 / 2 = 3; a: mean 0.5 -> +-0.5 * 3.
    torch.testing.assert_close(adv, _expand([1.5, -1.5, 0.0, 0.0, 0.0, 0.0], mask))
    adv, _ = core_algos.compute_gpg_outcome_advantage(rewards, mask, index, alpha=1.0, f_norm=2.0)
    torch.testing.assert_close(adv, _expand([0.25, -0.25, 0.0, 0.0, 0.0, 0.0], mask))


# --------------------------------------------------------------------------------------------- REINFORCE++ / ReMax


def test_reinforce_plus_plus_discounted_and_whitened() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    # returns-to-go with gamma 0.5: [0.25, 0.5, 1] and [1, 2, -]
    expected_ret = torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]])
    torch.testing.assert_close(ret, expected_ret)
    kept = np.array([0.25, 0.5, 1.0, 1.0, 2.0])
    white = (kept - kept.mean()) / math.sqrt(kept.var(ddof=1) + 1e-8)
    expected_adv = torch.zeros(2, 3)
    expected_adv[mask.bool()] = torch.tensor(white, dtype=torch.float32)
    torch.testing.assert_close(adv, expected_adv)
    # gamma from the algorithm config.
    _, ret_cfg = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 0.5})
    torch.testing.assert_close(ret_cfg, expected_ret)


def test_reinforce_plus_plus_baseline() -> None:
    rewards, mask = _outcome_batch([1.0, 3.0, 2.0], [2, 1, 3], width=3)
    adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, np.array([0, 0, 1]))
    # centred scores: -1 (2 tokens), +1 (1 token), 2 alone (3 tokens); then whitened over the 6 tokens.
    kept = np.array([-1.0, -1.0, 1.0, 2.0, 2.0, 2.0])
    white = (kept - kept.mean()) / math.sqrt(kept.var(ddof=1) + 1e-8)
    expected = torch.zeros(3, 3)
    expected[mask.bool()] = torch.tensor(white, dtype=torch.float32)
    torch.testing.assert_close(adv, expected)


def test_remax_returns_minus_baseline() -> None:
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.5, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = core_algos.compute_remax_outcome_advantage(rewards, torch.tensor([1.5, 1.0]), mask)
    # row 0: G = [3, 2, 2]; row 1 (last token masked): G = [1.5, 1, -].
    torch.testing.assert_close(ret, torch.tensor([[3.0, 2.0, 2.0], [1.5, 1.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[1.5, 0.5, 0.5], [0.5, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        core_algos.compute_remax_outcome_advantage(rewards, None, mask)


# ------------------------------------------------------------------------------------------------------------ GAE


def _reference_gae(rewards: list[float], values: list[float], mask: list[int], gamma: float, lam: float):
    """Plain-Python GAE over the kept positions only (the masked ones are removed from the trajectory)."""
    kept = [t for t, m in enumerate(mask) if m]
    adv = {}
    running, next_value = 0.0, 0.0
    for t in reversed(kept):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
        next_value = values[t]
    return adv


def test_gae_with_masked_middle_token() -> None:
    gamma, lam = 0.9, 0.8
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]])
    values = torch.tensor([[0.5, 9.0, 0.2], [0.1, 0.3, 4.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=gamma, lam=lam)

    # Row 0 by hand: t=2: delta = 1 - 0.2 = 0.8 -> A2 = 0.8; t=1 skipped (value 9 unused);
    # t=0: delta = 0 + 0.9*0.2 - 0.5 = -0.32 -> A0 = -0.32 + 0.72*0.8 = 0.256.
    # Row 1: t=1: delta = 0.5 - 0.3 = 0.2 -> A1 = 0.2; t=0: delta = 0.9*0.3 - 0.1 = 0.17 -> A0 = 0.17 + 0.72*0.2.
    raw = {(0, 0): 0.256, (0, 2): 0.8, (1, 0): 0.17 + 0.72 * 0.2, (1, 1): 0.2}
    for row in range(2):
        ref = _reference_gae(rewards[row].tolist(), values[row].tolist(), mask[row].int().tolist(), gamma, lam)
        for t, a in ref.items():
            assert a == pytest.approx(raw[(row, t)], abs=1e-6)
    expected_ret = torch.zeros(2, 3)
    for (row, t), a in raw.items():
        expected_ret[row, t] = a + values[row, t]
    torch.testing.assert_close(ret, expected_ret)

    kept = np.array([raw[(0, 0)], raw[(0, 2)], raw[(1, 0)], raw[(1, 1)]])
    white = (kept - kept.mean()) / math.sqrt(kept.var(ddof=1) + 1e-8)
    expected_adv = torch.zeros(2, 3)
    for (row, t), w in zip([(0, 0), (0, 2), (1, 0), (1, 1)], white):
        expected_adv[row, t] = float(w)
    torch.testing.assert_close(adv, expected_adv, rtol=1e-5, atol=1e-5)


def test_gae_random_against_reference_and_lam_one() -> None:
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randn(4, 6, generator=gen)
    values = torch.randn(4, 6, generator=gen)
    mask = (torch.rand(4, 6, generator=gen) > 0.25).float()
    mask[:, 0] = 1
    _, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=0.95, lam=0.7)
    for row in range(4):
        ref = _reference_gae(rewards[row].tolist(), values[row].tolist(), mask[row].int().tolist(), 0.95, 0.7)
        for t, a in ref.items():
            assert ret[row, t].item() == pytest.approx(a + values[row, t].item(), abs=1e-5)
    # gamma = lam = 1 (config defaults): returns are undiscounted reward-to-go over the kept tokens.
    _, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, config={"gamma": 1.0, "lam": 1.0})
    to_go = (rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask
    torch.testing.assert_close(ret, to_go, rtol=1e-5, atol=1e-5)


def test_uniform_calling_convention_for_all_builtins() -> None:
    rewards, mask = _outcome_batch([1.0, 0.0, 2.0, 1.0], [2, 3, 4, 1])
    kwargs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["x", "x", "y", "y"], dtype=object),
        values=torch.zeros(4, 4),
        reward_baselines=torch.zeros(4),
        gamma=1.0,
        lam=1.0,
        epsilon=1e-6,
        norm_adv_by_std_in_grpo=True,
        config=OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True}),
        old_log_probs=torch.full((4, 4), -0.7),  # the optimal token baselines' inputs (others ignore them)
        sum_pi_squared=torch.full((4, 4), 0.3),
    )
    for member in AdvantageEstimator:
        adv, ret = core_algos.get_adv_estimator_fn(member)(**kwargs)
        assert adv.shape == ret.shape == (4, 4), member
        assert torch.all(adv[mask == 0] == 0), member


def test_verl_module_path_is_the_same_module_object():
    """``verl.trainer.ppo.core_algos`` (verl's path) is the algorithms floor's module itself, not a copy."""
    import verl.algorithms.core_algos as floor
    import verl.trainer.ppo.core_algos as verl_path

    assert verl_path is floor
    assert verl_path.ADV_ESTIMATOR_REGISTRY is floor.ADV_ESTIMATOR_REGISTRY
