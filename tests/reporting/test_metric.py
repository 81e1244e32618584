"""verl.reporting.metric.reduce_metrics: verl's max/min-by-name rule, weights and explicit strategies."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.reporting.metric import reduce_metrics, weighted_mean
from verl.trainer.ppo import metric_utils


def test_reduce_by_name() -> None:
    out = reduce_metrics({"loss": [1.0, 2.0, 3.0], "max_reward": [5.0, 8.0, 6.0], "min_len": np.array([3, 1, 2])})
    assert out == {"loss": 2.0, "max_reward": 8.0, "min_len": 1.0}
    assert reduce_metrics({"t": torch.tensor([1.0, 3.0]), "s": 4})["t"] == 2.0
    assert math.isnan(reduce_metrics({"empty": []})["empty"])
    assert metric_utils.reduce_metrics is reduce_metrics


def test_weights_and_strategies() -> None:
    assert weighted_mean([0.8, 0.6], [100, 200]) == pytest.approx(2 / 3)
    assert math.isnan(weighted_mean([1.0], [0]))
    out = reduce_metrics(
        {"acc": [0.8, 0.6], "tokens": [1000, 2000]}, weights={"acc": [100, 200]}, reduction_strategy={"tokens": "sum"}
    )
    assert out["acc"] == pytest.approx(2 / 3) and out["tokens"] == 3000.0
    with pytest.raises(ValueError, match=r"reduction_strategy\['acc'\] must be one of"):
        reduce_metrics({"acc": [1.0]}, reduction_strategy={"acc": "median"})
    with pytest.raises(ValueError, match="same length"):
        weighted_mean([1.0, 2.0], [1.0])
