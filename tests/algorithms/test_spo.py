"""SPO's formulas and value tracker (verl/algorithms/spo.py) against verl-recipe spo's trainer arithmetic."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from verl.algorithms import core_algos
from verl.algorithms.spo import (
    SPOValueTracker,
    compute_spo_advantage,
    kl_discount,
    load_offline_scores,
    policy_drift,
    priority_weights,
)


def test_priority_is_the_outcome_deviation_plus_exploration():
    w = priority_weights(np.array([0.0, 0.5, 1.0, 0.2]))
    assert w == pytest.approx([0.05, 0.55, 0.05, math.sqrt(0.16) + 0.05])


def test_advantage_is_the_recipes_batch_normalised_reward_minus_value():
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    values = torch.tensor([0.2, 0.7, 0.9, 0.1])
    adv, ret = compute_spo_advantage(rewards, mask, spo_values=values)
    a = torch.tensor([1.0, 0.0, 1.0, 0.0]) - values  # the recipe: (a - a.mean()) / (a.std() + 1e-8)
    expect = (a - a.mean()) / (a.std() + 1e-8)
    assert torch.allclose(adv, expect.unsqueeze(-1) * mask, atol=1e-6)
    assert ret is adv
    assert core_algos.get_adv_estimator_fn("spo") is compute_spo_advantage


def test_padding_rows_take_no_part_in_the_normalisation():
    rewards = torch.tensor([[1.0], [0.0], [0.0]])
    mask = torch.tensor([[1.0], [1.0], [0.0]])  # the third row is padding
    adv, _ = compute_spo_advantage(rewards, mask, spo_values=torch.tensor([0.5, 0.5, 0.5]))
    a = torch.tensor([0.5, -0.5])
    assert torch.allclose(adv[:2, 0], (a - a.mean()) / (a.std() + 1e-8), atol=1e-6)
    assert adv[2, 0] == 0


def test_advantage_without_the_driver_column_says_so():
    with pytest.raises(ValueError, match="spo_values"):
        compute_spo_advantage(torch.zeros(2, 2), torch.ones(2, 2))


def test_offline_prior_matches_the_recipe_with_full_score_lists():
    scores = {"p": [1, 0, 1, 1, 0, 0, 0, 1], "q": [0.3] * 8}  # > 0 counts as a success
    tracker = SPOValueTracker.from_offline(scores, offline_n=8, clip_lower=0.875)
    n_init = 1 / (1 - 0.875)  # the recipe: N_init * (sum + 0.5) / (Neff + 1)
    alpha, beta = tracker.posterior(["p", "q", "never"])
    assert alpha == pytest.approx([n_init * 4.5 / 9, n_init * 8.5 / 9, 0.5])
    assert beta == pytest.approx([n_init * 4.5 / 9, n_init * 0.5 / 9, 0.5])


def test_offline_prior_subsamples_long_lists_and_counts_short_ones_as_they_are():
    tracker = SPOValueTracker.from_offline({"long": [1] * 20, "short": [1, 1]}, offline_n=8, clip_lower=0.875)
    alpha, beta = tracker.posterior(["long", "short"])
    assert alpha + beta == pytest.approx([8.0, 8.0])  # N_init outcomes of evidence each
    assert tracker.values(["short"])[0] == pytest.approx(2.5 / 3)  # not biased by the missing six
    assert len(SPOValueTracker.from_offline({"p": [1]}, offline_n=0, clip_lower=0.875)) == 0


def test_update_discounts_then_adds_each_prompts_outcomes():
    tracker = SPOValueTracker()
    tracker.update(["a", "b", "a"], [1.0, 0.0, 0.5], {"a": 0.9, "b": 0.5})
    alpha, beta = tracker.posterior(["a", "b"])
    assert alpha == pytest.approx([0.9 * 0.5 + 1.5, 0.5 * 0.5])
    assert beta == pytest.approx([0.9 * 0.5 + 0.5, 0.5 * 0.5 + 1.0])
    assert tracker.visits == {"a": 1, "b": 1}
    restored = SPOValueTracker()
    restored.load_state_dict(json.loads(json.dumps(tracker.state_dict())))
    assert np.array_equal(np.stack(restored.posterior(["a", "b"])), np.stack(tracker.posterior(["a", "b"])))
    assert restored.visits == tracker.visits


def test_a_reward_outside_zero_one_is_refused_naming_the_row():
    with pytest.raises(ValueError, match=r"row 1 .* scored -1.0"):
        SPOValueTracker().update(["a", "b"], [1.0, -1.0], {"a": 0.9, "b": 0.9})


def test_kl_discount_halves_every_0_06_of_drift_within_its_clip():
    then = torch.tensor([[0.0, 0.0, 9.0], [-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    now = torch.tensor([[-0.06, 0.06, 0.0], [-1.0, -1.0, 0.0], [-0.006, -0.006, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 0]])  # the third token is masked out of D
    drift = policy_drift(then, now, mask).numpy()
    assert drift == pytest.approx([0.06, 0.0, 0.006])
    raw, rho = kl_discount(drift, clip_lower=0.875)
    assert raw == pytest.approx([0.5, 1.0, 2**-0.1])
    assert rho == pytest.approx([0.875, 0.96, 2**-0.1])  # floor, ceiling, in between


def test_offline_values_file_errors_name_the_file_and_prompt(tmp_path):
    good = tmp_path / "v.json"
    good.write_text(json.dumps({" What is 2+2? ": [1, 0]}))
    assert load_offline_scores(str(good)) == {"What is 2+2?": [1.0, 0.0]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"q": "1,0"}))
    with pytest.raises(ValueError, match=r"bad.json: prompt 'q'"):
        load_offline_scores(str(bad))
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_offline_scores(str(tmp_path / "missing.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_offline_scores(str(tmp_path / "list.json"))
