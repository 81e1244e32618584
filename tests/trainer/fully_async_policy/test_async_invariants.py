"""The asynchronous trainer's invariants broken on purpose, end to end with the rollouter in a second process:
a weight push corrupted in transit stops the run with WeightSyncMismatchError naming the tensor, and a schedule
that runs one batch ahead while it claims staleness 0 stops with StalenessError."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.fully_async_policy.fully_async_trainer import FullyAsyncRayPPOTrainer
from verl.trainer.ppo.invariants import StalenessError
from verl.trainer.ppo.runner import build_ppo_trainer
from verl.workers.rollout import weight_transfer
from verl.workers.rollout.weight_digest import WeightSyncMismatchError

pytestmark = pytest.mark.slow  # a rollout process each (about 20 s)

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
"""


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("async_invariants")
    train, _ = generate_arithmetic_splits(train_size=16, test_size=2, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _config(model: str, task: dict[str, str], out: Path, extra: list[str]) -> DictConfig:
    return load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={task['train']}",
            f"custom_reward_function.path={task['reward']}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            "data.max_response_length=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "trainer.total_training_steps=3",
            "trainer.val_before_train=false",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            f"trainer.default_local_dir={out}",
            "async_training.mode=fully_async",
            *extra,
        ]
    )


def _fit(cfg: DictConfig) -> None:
    trainer = build_ppo_trainer(cfg)
    trainer.init_workers()
    trainer.fit()


def test_a_push_corrupted_in_transit_stops_the_run(tiny_model_dir, task, tmp_path, monkeypatch):
    real_send = weight_transfer.WeightTransferGroup.send

    def noisy_send(self, named_tensors, meta=None):  # one tensor altered after it left the actor
        def altered():
            for name, tensor in named_tensors:
                if name == "model.layers.0.mlp.down_proj.weight":
                    tensor = tensor + 1e-3 * torch.randn_like(tensor)
                yield name, tensor

        return real_send(self, altered(), meta)

    monkeypatch.setattr(weight_transfer.WeightTransferGroup, "send", noisy_send)
    cfg = _config(tiny_model_dir, task, tmp_path, ["async_training.staleness_threshold=0"])
    with pytest.raises(
        WeightSyncMismatchError, match=r"weight push 0 .* 1 of \d+ tensors differ: model\.layers\.0\.mlp"
    ):
        _fit(cfg)


def test_a_schedule_one_batch_ahead_that_claims_staleness_zero_stops(tiny_model_dir, task, tmp_path, monkeypatch):
    """The rollouter is given one more prompt batch than staleness 0 admits (a one-step-off schedule under an
    on-policy claim): the second step consumes a batch of the previous weights and the run stops."""
    real = FullyAsyncRayPPOTrainer.admitted_batches
    monkeypatch.setattr(FullyAsyncRayPPOTrainer, "admitted_batches", lambda self: real(self) + 1)
    cfg = _config(tiny_model_dir, task, tmp_path, ["async_training.staleness_threshold=0"])
    with pytest.raises(StalenessError, match=r"step 2: .*weight version 0 .* version 1 \(staleness 1 > bound 0"):
        _fit(cfg)
