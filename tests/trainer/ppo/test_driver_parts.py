"""Each part of the PPO driver works alone: built from typed config sections (no trainer, no workers, no model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from verl.data.config import DataConfig
from verl.protocol import DataProto
from verl.trainer.config.schema import ReportConfig, TrainerConfig
from verl.trainer.ppo.driver_checkpoint import DriverCheckpoints
from verl.trainer.ppo.driver_data import DriverData, balance_batch
from verl.trainer.ppo.driver_report import DriverReport
from verl.trainer.ppo.invariants import PolicyVersions, StalenessError, stamp_policy_version


class _Rows(torch.utils.data.Dataset):
    """``n`` prompt rows: ``input_ids [4]`` (the row index in each token) and ``attention_mask [4]``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.full((4,), i), "attention_mask": torch.ones(4, dtype=torch.long)}


def test_data_part_serves_epochs_and_resumes_its_position() -> None:
    trainer_cfg = TrainerConfig(total_epochs=2, total_training_steps=None)
    data = DriverData(DataConfig(train_batch_size=2, shuffle=False), trainer_cfg, _Rows(6))
    data.create_dataloaders()
    assert data.total_training_steps == 6  # 3 batches an epoch x 2 epochs
    first = [int(data.next_batch().batch["input_ids"][0, 0]) for _ in range(4)]
    assert first == [0, 2, 4, 0] and data.epoch == 1
    data.ledger.steps = 4  # four training steps ran
    state = {**data.state_dict(), "global_steps": 4}

    again = DriverData(DataConfig(train_batch_size=2, shuffle=False), trainer_cfg, _Rows(6))
    again.create_dataloaders()
    again.load_state_dict(state, "/ckpt/global_step_4", batches_per_step=1)
    assert again.epoch == 1 and int(again.next_batch().batch["input_ids"][0, 0]) == 2
    assert again.next_batch() is not None and again.next_batch() is None  # the epochs are done


def test_data_part_refuses_a_batch_larger_than_the_data() -> None:
    from verl.trainer.config.validation import ConfigError

    data = DriverData(DataConfig(train_batch_size=8), TrainerConfig(), _Rows(3))
    with pytest.raises(ConfigError, match="data.train_batch_size=8 is larger than the training set"):
        data.create_dataloaders()


def test_data_part_draws_generation_batches_of_gen_batch_size() -> None:
    """data.gen_batch_size (DAPO's generation round) sizes the loader's batches and the step count; the training
    batch (train_batch_size groups) is cut from them by dynamic sampling."""
    from verl.trainer.config.validation import ConfigError

    one_epoch = TrainerConfig(total_epochs=1, total_training_steps=None)
    data = DriverData(DataConfig(train_batch_size=2, gen_batch_size=3, shuffle=False), one_epoch, _Rows(7))
    data.create_dataloaders()
    assert data.total_training_steps == 2  # 7 rows // 3 a round, one epoch
    assert data.next_batch().batch["input_ids"][:, 0].tolist() == [0, 1, 2]
    small = DriverData(DataConfig(train_batch_size=2, gen_batch_size=8), TrainerConfig(), _Rows(7))
    with pytest.raises(ConfigError, match="data.gen_batch_size=8 is larger than the training set"):
        small.create_dataloaders()


def test_balance_batch_gives_each_rank_a_similar_token_count() -> None:
    lengths = [8, 1, 8, 1]
    mask = torch.stack([torch.cat([torch.ones(n), torch.zeros(8 - n)]) for n in lengths]).long()
    batch = DataProto.from_dict({"attention_mask": mask})
    metrics: dict = {}
    balance_batch(batch, world_size=2, metrics=metrics)
    per_rank = batch.batch["attention_mask"].sum(-1).view(2, 2).sum(-1).tolist()
    assert per_rank == [9, 9] and "global_seqlen/min" in metrics


@pytest.mark.parametrize("keep_groups", [False, True])
def test_balance_batch_keeps_uid_groups_on_one_rank_for_the_prefix_grouper(keep_groups: bool) -> None:
    lengths = [8, 8, 1, 1, 6, 6, 1, 1]  # groups a (16 tokens), b (2), c (12), d (2), two rows each
    mask = torch.stack([torch.cat([torch.ones(n), torch.zeros(8 - n)]) for n in lengths]).long()
    uids = np.array(["a", "a", "b", "b", "c", "c", "d", "d"], dtype=object)
    batch = DataProto.from_dict({"attention_mask": mask}, non_tensors={"uid": uids})
    balance_batch(batch, world_size=2, metrics={}, keep_groups=keep_groups)
    ranks = [set(batch.non_tensor_batch["uid"][:4]), set(batch.non_tensor_batch["uid"][4:])]
    per_rank = batch.batch["attention_mask"].sum(-1).view(2, 4).sum(-1).tolist()
    if keep_groups:
        assert sorted(per_rank) == [14, 18] and ranks[0].isdisjoint(ranks[1])
    else:  # rows balanced on their own split the groups: 16 tokens each
        assert per_rank == [16, 16] and not ranks[0].isdisjoint(ranks[1])


@pytest.mark.parametrize(
    ("loss_mode", "grouper", "whole"), [("vanilla", False, False), ("vanilla", True, True), ("gvpo", False, True)]
)
def test_the_trainer_keeps_groups_whole_for_the_prefix_grouper_and_a_group_loss(loss_mode, grouper, whole) -> None:
    """``_balance_batch`` keeps uid groups on one rank when the loss centres over groups (gvpo), as the recipe's
    trainer does, or for the prefix grouper; otherwise it balances rows."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from verl.trainer.ppo.verl_surface import VerlTrainerSurface

    actor = {"use_prefix_grouper": grouper, "policy_loss": {"loss_mode": loss_mode}}
    trainer = SimpleNamespace(
        config=OmegaConf.create({"actor_rollout_ref": {"actor": actor}}),
        workers=SimpleNamespace(actor=SimpleNamespace(world_size=2)),
    )
    lengths = [8, 8, 1, 1, 6, 6, 1, 1]
    mask = torch.stack([torch.cat([torch.ones(n), torch.zeros(8 - n)]) for n in lengths]).long()
    uids = np.array(["a", "a", "b", "b", "c", "c", "d", "d"], dtype=object)
    batch = DataProto.from_dict({"attention_mask": mask}, non_tensors={"uid": uids})
    VerlTrainerSurface._balance_batch(trainer, batch, {})
    ranks = [set(batch.non_tensor_batch["uid"][:4]), set(batch.non_tensor_batch["uid"][4:])]
    assert ranks[0].isdisjoint(ranks[1]) == whole


class _Group:
    """A worker group that writes and reads one file per checkpoint."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def save_checkpoint(self, path: str, step: int, save_contents=None) -> None:
        os.makedirs(path, exist_ok=True)
        Path(path, "weights.txt").write_text(str(step))

    def load_checkpoint(self, path: str) -> None:
        self.loaded.append(Path(path, "weights.txt").read_text())


def test_checkpoint_part_saves_finds_and_loads_without_a_trainer(tmp_path: Path, capsys) -> None:
    cfg = TrainerConfig(save_freq=2, max_actor_ckpt_to_keep=1, resume_mode="auto")
    parts = DriverCheckpoints(cfg, str(tmp_path), identity_source=lambda: {"model": "tiny"})
    assert parts.due(2, is_last=False, stop_requested=False) and not parts.due(3, False, False)
    assert parts.due(3, is_last=True, stop_requested=False)
    group = _Group()
    for step in (1, 2):
        parts.save(step, {"actor": group}, lambda step=step: {"global_steps": step, "epoch": 0})
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert not (tmp_path / "global_step_1" / "actor").exists()  # max_actor_ckpt_to_keep=1

    found = DriverCheckpoints(cfg, str(tmp_path), identity_source=lambda: {"model": "tiny"}).find()
    assert found is not None and found[0] == str(tmp_path / "global_step_2") and found[1]["global_steps"] == 2
    parts.load_workers(found[0], {"actor": group})
    parts.mark_resumed(found[0], found[1], epoch=0)
    assert group.loaded == ["2"] and parts.resumed_from == found[0]
    assert "resumed from" in capsys.readouterr().out
    fresh = DriverCheckpoints(TrainerConfig(resume_mode="disable"), str(tmp_path / "empty"))
    assert fresh.find() is None


def test_report_part_logs_to_hooks_and_writes_samples(tmp_path: Path) -> None:
    cfg = TrainerConfig(logger=["file"], plot=False, report=ReportConfig(enable=True, num_samples=2), save_freq=-1)
    report = DriverReport(cfg, str(tmp_path), None, {"trainer": {"logger": ["file"]}}, about={"n_ranks": 1})
    seen: list = []
    report.step_hooks.append(lambda step, metrics: seen.append((step, metrics["x"])))
    report.begin(step=0, resumed=False, total_steps=3)
    report.log({"x": 1.0}, step=1)
    assert report.metrics_path is not None
    assert [json.loads(line)["step"] for line in Path(report.metrics_path).read_text().splitlines()] == [1]
    assert report.sample_step(1, 3) and not report.sample_step(2, 3) and report.sample_step(3, 3)
    report.end(step=1)
    assert seen == [(1, 1.0)] and not report.in_fit
    assert json.loads((tmp_path / "run_info.json").read_text())["status"] == "finished"


def test_versions_part_checks_staleness_against_the_bound_it_is_given() -> None:
    versions = PolicyVersions(check=True, log_prob_gap=True, warn_kl=0.01)
    batch = stamp_policy_version(DataProto.from_dict({"x": torch.zeros(3, 1)}), np.array([4, 4, 3]))
    metrics = versions.check_consumed(batch, current=4, bound=(1, "one step off"), step=5)
    assert metrics["training/policy_staleness/max"] == 1.0
    with pytest.raises(StalenessError, match="allowed 0..0 by synchronous training"):
        versions.check_consumed(batch, current=4, bound=(0, "synchronous training"), step=5)
    assert PolicyVersions(check=False, log_prob_gap=False).check_consumed(batch, 9, (0, "x"), 10) == {}
    assert PolicyVersions.from_trainer_config(TrainerConfig(log_prob_gap=False)).gap_watch.threshold is None


def test_the_driver_holds_the_parts_and_keeps_upstreams_names(tmp_path: Path) -> None:
    """The driver's instance state is its parts and a few run facts; verl's names read and write the parts."""
    from verl.trainer.config import load_config
    from verl.trainer.ppo.driver_workers import DriverWorkers
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    overrides = [f"trainer.default_local_dir={tmp_path}", "data.train_batch_size=2", "trainer.total_epochs=1"]
    cfg = load_config([*overrides, "trainer.total_training_steps=null"])
    driver = RayPPOTrainer(cfg, tokenizer=None)
    assert isinstance(driver.data, DriverData) and isinstance(driver.workers, DriverWorkers)
    assert isinstance(driver.checkpoints, DriverCheckpoints) and isinstance(driver.report, DriverReport)
    assert isinstance(driver.versions, PolicyVersions)
    assert len(vars(driver)) <= 30, sorted(vars(driver))  # 58 attributes over the driver and its mixins before
    driver._create_dataloader(_Rows(6), None, None, None)  # upstream's name and arguments
    assert driver.train_dataloader is driver.data.train_dataloader and driver.total_training_steps == 3
    driver.total_training_steps = 2
    assert driver.data.total_training_steps == 2
    assert driver.checkpoint_dir == driver.checkpoints.checkpoint_dir == str(tmp_path)
    assert driver.step_hooks is driver.report.step_hooks and driver.actor_rollout_wg is None


def test_validation_rows_in_a_seeded_random_order_with_validation_shuffle() -> None:
    """data.validation_shuffle (upstream v0.9): with val_max_samples, a random subset of the validation rows."""

    def first_rows(shuffle: bool, seed: int = 1) -> list[int]:
        cfg = DataConfig(train_batch_size=2, val_batch_size=4, validation_shuffle=shuffle, seed=seed)
        data = DriverData(cfg, TrainerConfig(total_epochs=1, total_training_steps=None), _Rows(4), _Rows(12))
        data.create_dataloaders()
        return next(iter(data.val_dataloader))["input_ids"][:, 0].tolist()

    assert first_rows(False) == [0, 1, 2, 3]
    assert first_rows(True) != [0, 1, 2, 3] and first_rows(True) == first_rows(True)  # seeded: the same every run
