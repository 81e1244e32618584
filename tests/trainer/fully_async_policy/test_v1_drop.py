"""trainer.v1.sampler.max_off_policy_strategy=drop: prompt groups staler than max_off_policy_threshold are dropped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.fully_async_policy.fully_async_trainer import FullyAsyncRayPPOTrainer, StalenessError


def _trainer(strategy: str, threshold: int) -> FullyAsyncRayPPOTrainer:
    cfg = load_config(
        [
            "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=3",
            f"trainer.v1.sampler.max_off_policy_threshold={threshold}",
            f"trainer.v1.sampler.max_off_policy_strategy={strategy}",
        ]
    )
    trainer = FullyAsyncRayPPOTrainer.__new__(FullyAsyncRayPPOTrainer)  # the drop needs only the config
    trainer.config = cfg
    trainer.global_steps = 4
    return trainer


def _rollouts() -> tuple[DataProto, np.ndarray]:
    # three groups of two rows (GRPO n=2); group "b" has one row 3 versions old, the rest are 1 or 2 old
    uids = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
    staleness = np.array([1, 2, 3, 1, 2, 2])
    data = DataProto.from_dict({"x": torch.arange(6)}, non_tensors={"uid": uids})
    return data, staleness


def test_drop_removes_whole_groups_past_the_threshold() -> None:
    trainer = _trainer("drop", threshold=2)
    assert trainer.off_policy_drop_threshold() == 2
    data, staleness = _rollouts()
    kept, dropped = trainer.drop_stale_groups(data, staleness)
    assert dropped == 1
    assert kept.batch["x"].tolist() == [0, 1, 4, 5]  # group b gone, both of its rows
    assert list(kept.non_tensor_batch["uid"]) == ["a", "a", "c", "c"]


def test_wait_and_legacy_modes_never_drop() -> None:
    data, staleness = _rollouts()
    for trainer in (_trainer("wait", threshold=2),):
        kept, dropped = trainer.drop_stale_groups(data, staleness)
        assert dropped == 0 and len(kept) == 6
    legacy = FullyAsyncRayPPOTrainer.__new__(FullyAsyncRayPPOTrainer)
    legacy.config = load_config(["async_training.mode=fully_async"])
    assert legacy.off_policy_drop_threshold() is None


def test_everything_stale_is_an_error() -> None:
    trainer = _trainer("drop", threshold=1)
    data, _ = _rollouts()
    with pytest.raises(StalenessError, match="max_off_policy_threshold=1"):
        trainer.drop_stale_groups(data, np.array([2, 2, 3, 3, 2, 2]))
