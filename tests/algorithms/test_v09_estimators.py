"""GDPO and the optimal token baselines against hand-computed values; the driver hands them their inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.algorithms.core_algos import get_adv_estimator_fn
from verl.protocol import DataProto
from verl.trainer.ppo.batch_transforms import compute_advantage

LN = math.log


def test_gdpo_normalises_each_component_then_whitens() -> None:
    # 4 one-token responses, groups (a, a, b, b); accuracy (1, 0, 1, 1), format (1, 1, 0, 1); weights (2, 1)
    rewards = torch.zeros(4, 1)
    mask = torch.ones(4, 1)
    index = np.array(["a", "a", "b", "b"], dtype=object)
    extra = {"acc": np.array([1.0, 0.0, 1.0, 1.0]), "fmt": np.array([1.0, 1.0, 0.0, 1.0])}
    cfg = {"gdpo_reward_keys": ["acc", "fmt"], "gdpo_reward_weights": [2.0, 1.0], "norm_adv_by_std_in_grpo": True}
    adv, ret = get_adv_estimator_fn("gdpo")(
        token_level_rewards=rewards, response_mask=mask, index=index, config=cfg, non_tensor_batch=extra
    )
    # acc: group a (1, 0) -> +-0.5 / std 0.7071 = +-0.7071; group b (1, 1) -> 0. fmt: a -> 0; b (0, 1) -> -+0.7071
    # 2 * acc + fmt = (1.4142, -1.4142, -0.7071, 0.7071): mean 0, unbiased var (2*2 + 2*0.5) / 3 = 5/3
    # whitened: 1.4142 / 1.2910 = 1.0954451, 0.7071 / 1.2910 = 0.5477226
    expected = torch.tensor([[1.0954451], [-1.0954451], [-0.5477226], [0.5477226]])
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(ret, adv)


def test_gdpo_names_missing_components() -> None:
    rewards, mask = torch.zeros(2, 1), torch.ones(2, 1)
    fn = get_adv_estimator_fn("gdpo")
    with pytest.raises(KeyError, match="'fmt'"):
        fn(rewards, mask, ["a", "a"], config={"gdpo_reward_keys": ["fmt"]}, non_tensor_batch={"acc": [1, 0]})
    with pytest.raises(ValueError, match=r"\+algorithm.gdpo_reward_keys"):
        fn(rewards, mask, ["a", "a"], config={}, non_tensor_batch={"acc": [1, 0]})


def _otb_inputs(mask1: list[float], mask2: list[float]) -> dict[str, torch.Tensor]:
    # response 1: pi = 0.5, sum pi^2 = 0.5 -> w = 1 - 1 + 0.5 = 0.5; response 2: pi = 0.25, sum = 0.25 -> w = 0.75
    width = len(mask1)
    mask = torch.tensor([mask1, mask2])
    rewards = torch.zeros(2, width)
    last1 = max(i for i, m in enumerate(mask1) if m)
    rewards[0, last1] = 1.0  # response 1 scores 1, response 2 scores 0
    return {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": np.array(["p", "p"], dtype=object),
        "old_log_probs": torch.tensor([[LN(0.5)] * width, [LN(0.25)] * width]),
        "sum_pi_squared": torch.tensor([[0.5] * width, [0.25] * width]),
    }


def test_optimal_token_baseline_weighs_returns_by_path_variance() -> None:
    adv, ret = get_adv_estimator_fn("optimal_token_baseline")(**_otb_inputs([1, 1], [1, 1]))
    # W1 = (0.5, 1.0), W2 = (0.75, 1.5); G1 = (1, 1), G2 = (0, 0)
    # B_0 = 0.5 / 1.25 = 0.4, B_1 = 1.0 / 2.5 = 0.4 -> A1 = (0.6, 0.6), A2 = (-0.4, -0.4)
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6], [-0.4, -0.4]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))


def test_optimal_token_baseline_zero_tail() -> None:
    adv, _ = get_adv_estimator_fn("optimal_token_baseline")(**_otb_inputs([1, 1, 1], [1, 1, 0]))
    # position 2 is reached by response 1 only (the unique longest): its baseline there is 0, so A = G = 1
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6, 1.0], [-0.4, -0.4, 0.0]]), atol=1e-6, rtol=0)


def test_tir_optimal_token_baseline_counts_generated_tokens_only() -> None:
    inputs = _otb_inputs([1, 0, 1], [1, 1, 0])  # response 1 has a tool-output token at position 1
    adv, _ = get_adv_estimator_fn("tir_optimal_token_baseline")(**inputs)
    # compacted: W1 = (0.5, 1.0), G1 = (1, 1); W2 = (0.75, 1.5), G2 = (0, 0): the baselines of the first test,
    # scattered back to response 1's generated positions 0 and 2
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.0, 0.6], [-0.4, -0.4, 0.0]]), atol=1e-6, rtol=0)
    adv_flat, _ = get_adv_estimator_fn("optimal_token_baseline")(**inputs)
    # by absolute position instead: position 1 holds response 2 only (B_1 = G2 = 0 -> A = 0) and position 2
    # response 1 only (B_2 = G1 W1 / W1 = 1 -> A = 0)
    torch.testing.assert_close(adv_flat, torch.tensor([[0.6, 0.0, 0.0], [-0.4, 0.0, 0.0]]), atol=1e-6, rtol=0)


def test_otb_needs_sum_pi_squared() -> None:
    inputs = _otb_inputs([1, 1], [1, 1])
    del inputs["sum_pi_squared"]
    with pytest.raises(ValueError, match="calculate_sum_pi_squared=true"):
        get_adv_estimator_fn("optimal_token_baseline")(**inputs)


def test_driver_passes_the_named_inputs() -> None:
    """compute_advantage hands gdpo the non-tensor columns and the baselines the old-log-prob pass's outputs."""
    inputs = _otb_inputs([1, 1], [1, 1])
    data = DataProto.from_dict(
        tensors={
            "token_level_rewards": inputs["token_level_rewards"],
            "response_mask": inputs["response_mask"],
            "old_log_probs": inputs["old_log_probs"],
            "sum_pi_squared": inputs["sum_pi_squared"],
        },
        non_tensors={"uid": inputs["index"], "acc": np.array([1.0, 0.0]), "fmt": np.array([0.0, 1.0])},
    )
    out = compute_advantage(data, "optimal_token_baseline", config={"adv_estimator": "optimal_token_baseline"})
    torch.testing.assert_close(out.batch["advantages"], torch.tensor([[0.6, 0.6], [-0.4, -0.4]]), atol=1e-6, rtol=0)
    cfg = {"adv_estimator": "gdpo", "gdpo_reward_keys": ["acc", "fmt"]}
    out = compute_advantage(data, "gdpo", config=cfg)
    # acc (1, 0) -> (+0.7071, -0.7071); fmt (0, 1) -> (-0.7071, +0.7071): they cancel, everything is 0
    torch.testing.assert_close(out.batch["advantages"], torch.zeros(2, 2), atol=1e-4, rtol=0)


def test_pf_ppo_weights_by_hand() -> None:
    from verl.algorithms.pf_ppo import pf_ppo_weights

    scores = torch.tensor([3.0, 1.0, 2.0, -1.0], dtype=torch.float64)
    # pow 2: |s|^2 = 9, 1, 4, 1; max_min: the max (3) and the min (-1); max_random: 0.4 for the max, 0.1 else
    torch.testing.assert_close(pf_ppo_weights(scores, "pow", 2.0), torch.tensor([9.0, 1.0, 4.0, 1.0]).double() + 1e-8)
    torch.testing.assert_close(pf_ppo_weights(scores, "max_min", 2.0), torch.tensor([1.0, 0, 0, 1.0]).double() + 1e-8)
    torch.testing.assert_close(
        pf_ppo_weights(scores, "max_random", 2.0), torch.tensor([0.4, 0.1, 0.1, 0.1]).double() + 1e-8
    )
    with pytest.raises(ValueError, match="reweight_method='top'"):
        pf_ppo_weights(scores, "top", 2.0)


def test_pf_ppo_resamples_rows_together() -> None:
    from verl.algorithms.core_algos import compute_pf_ppo_reweight_data

    scores = torch.zeros(4, 2)
    scores[:, -1] = torch.tensor([3.0, 1.0, 2.0, -1.0])
    data = DataProto.from_dict(
        tensors={"token_level_scores": scores, "row": torch.arange(4)},
        non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)},
        meta_info={"global_token_num": [10, 11, 12, 13], "temperature": 1.0},
    )
    out = compute_pf_ppo_reweight_data(data, "max_min", 2.0, generator=torch.Generator().manual_seed(0))
    rows = out.batch["row"].tolist()
    assert len(rows) == 4 and set(rows) <= {0, 3}  # only the max and min rows carry weight
    assert list(out.non_tensor_batch["uid"]) == ["abcd"[r] for r in rows]
    assert out.meta_info["global_token_num"] == [10 + r for r in rows] and out.meta_info["temperature"] == 1.0
