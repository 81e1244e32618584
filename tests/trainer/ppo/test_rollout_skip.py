"""skip.rollout (upstream verl v0.9's SkipManager role): a step's rollouts are dumped, and a later run of the same
step replays the dump instead of generating; the replayed step trains on exactly the dumped batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.protocol import DataProto
from verl.trainer.config import load_config
from verl.trainer.ppo.rollout_skip import RolloutSkip
from verl.trainer.ppo.runner import build_ppo_trainer


def _cfg(model: str, train: str, out: Path, dump: Path, extra: list[str]):
    return load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={train}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            "trainer.save_freq=0",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={out}",
            "skip.rollout.enable=true",
            f"skip.rollout.dump_dir={dump}",
            "skip.rollout.steps=[1]",
            *extra,
        ]
    )


@pytest.mark.slow
def test_a_replayed_step_trains_on_the_dumped_batch(tiny_model_dir, tmp_path, monkeypatch) -> None:
    train, _ = generate_arithmetic_splits(train_size=8, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    dump = tmp_path / "dump"
    first = build_ppo_trainer(_cfg(tiny_model_dir, str(tmp_path / "train.parquet"), tmp_path / "a", dump, []))
    first.init_workers()
    first.fit()
    skip = first.rollout_skip
    assert skip is not None and skip.dumped_steps() == [1]
    assert (Path(skip.step_dir(1)) / "gen_batch.dp").is_file()
    dumped = DataProto.load_from_disk(Path(skip.step_dir(1)) / "gen_batch.dp")

    # the second run (another data seed, so its own generation would differ) must not generate at step 1
    second = build_ppo_trainer(
        _cfg(tiny_model_dir, str(tmp_path / "train.parquet"), tmp_path / "b", dump, ["data.seed=7"])
    )
    second.init_workers()

    def no_generation(*args, **kwargs):
        raise AssertionError("step 1 generated although its rollouts were dumped")

    monkeypatch.setattr(second, "generate_groups", no_generation)
    second.fit()
    trained = second.last_batch
    assert trained.meta_info["skip_replayed_step"] == 1
    assert torch.equal(trained.batch["responses"], dumped.batch["responses"])
    assert torch.equal(trained.batch["prompts"], dumped.batch["prompts"])
    assert np.array_equal(trained.non_tensor_batch["uid"], dumped.non_tensor_batch["uid"])


def test_repeat_picks_the_nearest_dumped_step(tmp_path) -> None:
    cfg = load_config(
        [
            "skip.rollout.enable=true",
            f"skip.rollout.dump_dir={tmp_path}",
            "skip.rollout.steps=[1,2,3,4,5]",
            "skip.rollout.action=repeat",
        ]
    )
    skip = RolloutSkip.from_config(cfg)
    assert Path(skip.root).parent.name == f"{cfg.trainer.experiment_name}_{cfg.trainer.project_name}"
    batch = DataProto.from_dict({"responses": torch.arange(4).view(2, 2)})
    skip.dump(2, batch)
    skip.dump(4, batch)
    assert skip.dumped_steps() == [2, 4]
    # the step itself, else the largest below, else the smallest above; unlisted steps generate
    assert [skip.source_step(s) for s in (1, 2, 3, 5, 6)] == [2, 2, 2, 4, None]
    cache = RolloutSkip.from_config(load_config(["skip.rollout.enable=true", f"skip.rollout.dump_dir={tmp_path}",
                                                 "skip.rollout.steps=[1,2,3]"]))  # fmt: skip
    assert [cache.source_step(s) for s in (1, 2, 3)] == [None, 2, None]
    assert torch.equal(cache.load(2).batch["responses"], batch.batch["responses"])
    assert RolloutSkip.from_config(load_config([])) is None
    with pytest.raises(Exception, match="skip.rollout.enable=true replays the synchronous"):
        load_config(["skip.rollout.enable=true", "trainer.v1.trainer_mode=colocate_async"])
    with pytest.raises(Exception, match="skip.async_rollout.enable=true replays the rollouter"):
        load_config(["skip.async_rollout.enable=true"])


@pytest.mark.slow
def test_async_rollout_replays_without_the_rollouter(tiny_model_dir, tmp_path, monkeypatch) -> None:
    from verl.experimental.fully_async_policy.rollouter import Rollouter

    train, _ = generate_arithmetic_splits(train_size=8, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    dump = tmp_path / "dump"
    extra = [
        "skip.rollout.enable=false",
        "skip.async_rollout.enable=true",
        f"skip.async_rollout.dump_dir={dump}",
        "skip.async_rollout.steps=[1]",
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.num_warmup_batches=0",  # one batch in flight: only feed index 1 is drawn
    ]
    first = build_ppo_trainer(_cfg(tiny_model_dir, str(tmp_path / "train.parquet"), tmp_path / "a", dump, extra))
    first.init_workers()
    first.fit()
    assert first.async_skip.dumped_steps() == [1]
    dumped = DataProto.load_from_disk(Path(first.async_skip.step_dir(1)) / "gen_batch.dp")

    def no_submit(self, *args, **kwargs):
        raise AssertionError("feed index 1 went to the rollouter although it was dumped")

    monkeypatch.setattr(Rollouter, "submit", no_submit)
    cfg = _cfg(tiny_model_dir, str(tmp_path / "train.parquet"), tmp_path / "b", dump, [*extra, "data.seed=7"])
    second = build_ppo_trainer(cfg)
    second.init_workers()
    second.fit()
    trained = second.last_batch
    assert trained.meta_info["skip_replayed_step"] == 1
    assert torch.equal(trained.batch["responses"], dumped.batch["responses"])
    # restamped as generated with the trainer's current weights: staleness 0
    assert set(int(v) for v in trained.non_tensor_batch["rollout_staleness"]) == {0}
