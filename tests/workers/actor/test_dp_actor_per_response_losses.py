"""The actor's update with the losses of one term per response: ``gvpo`` (rows ordered group by group, whole groups
per micro-batch, the recipe's scale) and ``sppo``; both weigh micro-batches by rows, as their recipes do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.workers.actor.test_dp_actor import actor_config as base_config
from tests.workers.actor.test_dp_actor import make_data, sgd_update, with_old_log_probs
from verl.models.tiny import make_tiny_causal_lm
from verl.workers.actor.dp_actor import DataParallelPPOActor

GVPO = {"policy_loss.loss_mode": "gvpo", "gvpo_beta": 0.5, "ppo_mini_batch_size": 8}


@pytest.fixture(scope="module")
def model():
    return make_tiny_causal_lm()


def gvpo_data(model) -> tuple:
    """Eight rows of four prompts (n = 2) whose groups interleave (a b c d a b c d), old log-probs shifted so the
    implicit rewards differ, and GRPO-style advantages per group."""
    data = make_data(bs=8, seed=3)
    data = with_old_log_probs(DataParallelPPOActor(base_config(), model), data)
    gen = torch.Generator().manual_seed(5)
    data.batch["old_log_probs"] = data.batch["old_log_probs"] + 0.2 * torch.randn(8, 5, generator=gen)
    uid = np.array(["a", "b", "c", "d"] * 2, dtype=object)
    score = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    mean = {u: score[uid == u].mean() for u in "abcd"}
    adv = torch.stack([score[i] - mean[uid[i]] for i in range(8)])
    data.batch["advantages"] = adv[:, None] * data.batch["response_mask"]
    data.non_tensor_batch["uid"] = uid
    return data, uid, adv


def recipe_losses(model, data, uid, beta: float) -> torch.Tensor:
    """verl-recipe's per-response GVPO loss, from the current log-probs: 1/2 ((r_i - mean_g r) - A_i)^2 / (n - 1)."""
    lp, _ = DataParallelPPOActor(base_config(), model).compute_log_prob(data)
    mask = data.batch["response_mask"].float()
    r = beta * ((lp - data.batch["old_log_probs"]) * mask).sum(-1)
    a = (data.batch["advantages"] * mask).sum(-1) / mask.sum(-1)
    mean = torch.stack([r[torch.tensor(uid == u)].mean() for u in uid])
    return 0.5 * ((r - mean) - a) ** 2


def test_update_orders_groups_and_scales_as_the_recipe(model) -> None:
    data, uid, _ = gvpo_data(model)
    per_response = recipe_losses(model, data, uid, beta=0.5)
    m4, d4 = sgd_update(model, data, **GVPO, ppo_micro_batch_size_per_gpu=4)
    m8, d8 = sgd_update(model, data, **GVPO, ppo_micro_batch_size_per_gpu=8)
    # the recipe: each micro-batch's sum, averaged over the micro-batches = micro size x the mean
    assert m4["actor/pg_loss"][0] == pytest.approx(4 * per_response.mean().item(), rel=1e-4)
    assert m8["actor/pg_loss"][0] == pytest.approx(8 * per_response.mean().item(), rel=1e-4)
    assert any(d.abs().max() > 1e-4 for d in d8.values())
    for name in d4:  # whole groups in each micro-batch of 4: the same gradient, at half the scale
        torch.testing.assert_close(d4[name], d8[name] / 2, atol=1e-5, rtol=1e-4)


def test_a_micro_batch_that_cuts_a_group_is_refused(model) -> None:
    data, _, _ = gvpo_data(model)
    with pytest.raises(ValueError, match="micro-batches must hold whole groups"):
        sgd_update(model, data, **GVPO, ppo_micro_batch_size_per_gpu=3)
    del data.non_tensor_batch["uid"]
    with pytest.raises(KeyError, match="uid"):
        sgd_update(model, data, **GVPO, ppo_micro_batch_size_per_gpu=4)


def test_sppo_weighs_micro_batches_by_rows_not_tokens(model) -> None:
    """The per-response mean is the same however the rows are split, though the rows hold different token counts
    (token weighting, ``loss_agg_mode=token-mean``'s, would change the gradient)."""
    data, _, adv = gvpo_data(model)
    sppo = {"policy_loss.loss_mode": "sppo", "sppo_eta": 0.5, "ppo_mini_batch_size": 8}
    lp, _ = DataParallelPPOActor(base_config(), model).compute_log_prob(data)
    mask = data.batch["response_mask"].float()
    log_ratio = ((lp - data.batch["old_log_probs"]) * mask).sum(-1)
    expected = (log_ratio - 0.5 * adv).pow(2).mean().item()
    m8, d8 = sgd_update(model, data, **sppo, ppo_micro_batch_size_per_gpu=8)
    m2, d2 = sgd_update(model, data, **sppo, ppo_micro_batch_size_per_gpu=2)
    assert m8["actor/pg_loss"][0] == pytest.approx(expected, rel=1e-4)
    assert m2["actor/pg_loss"][0] == pytest.approx(expected, rel=1e-4)
    assert any(d.abs().max() > 1e-4 for d in d8.values())
    for name in d8:
        torch.testing.assert_close(d2[name], d8[name], atol=1e-5, rtol=1e-4)
