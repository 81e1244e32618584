"""verl.utils.debug.metrics.calculate_debug_metrics: the rollout-vs-actor probability gap."""

from __future__ import annotations

import math

import numpy as np
import torch

from verl import DataProto
from verl.utils.debug.metrics import calculate_debug_metrics


def test_gap_over_masked_tokens_matches_numpy():
    rollout = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.1, 0.4, 0.3]]))
    actor = torch.log(torch.tensor([[0.6, 0.2, 0.1], [0.1, 0.1, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    data = DataProto.from_dict(
        {"rollout_log_probs": rollout, "old_log_probs": actor, "response_mask": mask, "responses": torch.zeros(2, 3)}
    )
    m = calculate_debug_metrics(data)
    pa, pr = np.array([0.6, 0.2, 0.1, 0.1, 0.3]), np.array([0.5, 0.2, 0.1, 0.4, 0.3])  # the 0.9 / 0.1 pair is masked
    d = np.abs(pa - pr)
    assert m["training/rollout_probs_diff_valid"] == 1
    assert math.isclose(m["training/rollout_probs_diff_max"], d.max(), rel_tol=1e-5)
    assert math.isclose(m["training/rollout_probs_diff_mean"], d.mean(), rel_tol=1e-5)
    assert math.isclose(m["training/rollout_probs_diff_std"], d.std(ddof=1), rel_tol=1e-4)
    assert math.isclose(m["training/rollout_actor_probs_pearson_corr"], np.corrcoef(pa, pr)[0, 1], rel_tol=1e-4)


def test_no_valid_token_reports_invalid():
    data = DataProto.from_dict(
        {
            "rollout_log_probs": torch.zeros(1, 2),
            "old_log_probs": torch.zeros(1, 2),
            "attention_mask": torch.tensor([[1, 1, 0, 0]]),  # prompt 2, response 2 (all padding)
            "responses": torch.zeros(1, 2),
        }
    )
    m = calculate_debug_metrics(data)
    assert m["training/rollout_probs_diff_valid"] == 0 and math.isnan(m["training/rollout_probs_diff_mean"])
