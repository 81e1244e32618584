"""Upstream v0.9 helpers: create_random_mask, prepare/restore_dynamic_batch, get_group_balanced_partitions,
append_to_dict with Metric values, estimators reading an attribute-style config."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.algorithms.advantage import compute_reinforce_plus_plus_outcome_advantage
from verl.protocol import DataProto
from verl.reporting.metric import AggregationType, Metric, reduce_metrics
from verl.utils.model import create_random_mask
from verl.utils.py_functional import append_to_dict
from verl.utils.seqlen_balancing import (
    ceildiv,
    get_group_balanced_partitions,
    prepare_dynamic_batch,
    restore_dynamic_batch,
    roundup_divisible,
)


def test_create_random_mask_bounds() -> None:
    np.random.seed(0)
    ids = torch.zeros(50, 20, dtype=torch.long)
    mask = create_random_mask(
        ids, max_ratio_of_valid_token=0.5, max_ratio_of_left_padding=0.25, min_ratio_of_valid_token=0.2
    )
    valid = mask.sum(-1)
    assert mask.dtype == torch.int64 and valid.min() >= 4 and valid.max() <= 10
    left = (mask.cumsum(-1) == 0).sum(-1)
    assert left.max() <= 5
    # ones are contiguous: the row is 0..0 1..1 0..0
    assert bool((mask.diff(dim=-1).abs().sum(-1) <= 2).all())
    with pytest.raises(ValueError, match="exceed"):
        create_random_mask(ids, max_ratio_of_valid_token=0.9, max_ratio_of_left_padding=0.5)


def test_dynamic_batch_round_trip_keeps_non_tensors() -> None:
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4, [1] * 5 + [0], [1] * 3 + [0] * 3])
    data = DataProto.from_dict(
        tensors={"input_ids": torch.arange(24).reshape(4, 6), "attention_mask": mask},
        non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)},
        meta_info={"temperature": 1.0},
    )
    micro, idx = prepare_dynamic_batch(data, max_token_len=8)
    assert sum(len(m) for m in micro) == 4 and all(int(m.batch["attention_mask"].sum()) <= 8 for m in micro)
    for m, rows in zip(micro, idx, strict=True):
        assert list(m.non_tensor_batch["uid"]) == [["a", "b", "c", "d"][r] for r in rows]
        assert m.meta_info == {"temperature": 1.0}
    restored = restore_dynamic_batch(torch.cat([m.batch["input_ids"] for m in micro]), idx)
    torch.testing.assert_close(restored, data.batch["input_ids"])
    assert (ceildiv(7, 3), roundup_divisible(7, 4), roundup_divisible(8, 4)) == (3, 8, 8)


def test_group_balanced_partitions_keep_uids_together() -> None:
    lens = [10, 12, 100, 90, 11, 9, 95, 105]
    uids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    parts = get_group_balanced_partitions(lens, uids, k_partitions=2)
    assert sorted(i for p in parts for i in p) == list(range(8))
    for p in parts:
        assert len({uids[i] for i in p}) == 2 and len(p) == 4  # two whole groups each
        assert {uids[i] for i in p} in ({"a", "b"}, {"a", "d"}, {"c", "b"}, {"c", "d"})  # one long, one short
    with pytest.raises(ValueError, match="uid groups"):
        get_group_balanced_partitions(lens, ["a"] * 8, k_partitions=2)


def test_append_to_dict_keeps_a_metrics_aggregation() -> None:
    collected: dict = {}
    for v in (1.0, 2.0):
        append_to_dict(collected, {"loss": Metric(AggregationType.SUM, v), "x": v}, prefix="actor/")
    append_to_dict(collected, {"actor/x": [5.0]}, prefix="actor/")
    assert isinstance(collected["actor/loss"], Metric) and collected["actor/x"] == [1.0, 2.0, 5.0]
    assert reduce_metrics(collected)["actor/loss"] == pytest.approx(3.0)


def test_estimator_reads_an_attribute_config() -> None:
    rewards = torch.tensor([[0.0, 1.0]])
    mask = torch.ones(1, 2)
    adv_ns, _ = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=SimpleNamespace(gamma=0.5))
    adv_kw, _ = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(adv_ns, adv_kw)
