"""``python -m verl.trainer.main_ppo trainer.v1.trainer_mode=separate_async`` trains with the asynchronous trainer."""

from __future__ import annotations

import json

import pytest

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.main_ppo import main


@pytest.mark.slow
def test_separate_async_through_main_ppo_runs_the_fully_async_trainer(tiny_model_dir, tmp_path) -> None:
    train, _ = generate_arithmetic_splits(train_size=8, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    out = tmp_path / "run"
    rc = main(
        [
            "trainer.use_v1=true",
            "trainer.v1.trainer_mode=separate_async",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
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
            f"trainer.default_local_dir={out}",
        ]
    )
    assert rc == 0
    rows = [json.loads(line) for line in next(out.rglob("metrics.jsonl")).read_text().splitlines()]
    metrics = [r["metrics"] for r in rows if "metrics" in r]
    assert len(metrics) == 1
    # the asynchronous trainer's own metrics: the rows came from the rollouter, stamped with their weight version
    assert metrics[0]["async/weight_version"] == 0.0 and metrics[0]["async/staleness/max"] == 0.0
    assert metrics[0]["async/dropped_stale_groups"] == 0.0
