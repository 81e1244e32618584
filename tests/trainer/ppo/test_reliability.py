"""What a machine or a user does to a PPO run does not lose it: a damaged checkpoint is named and the previous one
used, killed saves are cleaned up, no step is logged twice, SIGTERM saves and stops, a used directory is refused
under resume_mode=disable before the model loads."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from omegaconf import DictConfig

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.runner import run_ppo

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(len(solution_str) > 0)
"""


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("reliability_task")
    train, _ = generate_arithmetic_splits(train_size=32, test_size=4, seed=5)
    write_parquet(train, str(root / "train.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _config(model_dir: str, files: dict[str, str], out_dir: Path, extra: list[str]) -> DictConfig:
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        f"data.train_files={files['train']}",
        f"custom_reward_function.path={files['reward']}",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[file]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.max_actor_ckpt_to_keep=5",
        f"trainer.default_local_dir={out_dir}",
    ]
    return load_config(overrides + extra)


def _logged_steps(out_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out_dir / "logs" / "metrics.jsonl").read_text().splitlines()]


def test_damaged_checkpoint_falls_back_and_steps_are_not_repeated(tiny_model_dir, task_files, tmp_path, capsys):
    out = tmp_path / "run"
    run_ppo(_config(tiny_model_dir, task_files, out, ["trainer.total_training_steps=3", "trainer.save_freq=1"]))
    assert _logged_steps(out) == [1, 2, 3]
    # the newest checkpoint's weights partly zeroed (same size: only a checksum sees it), and a killed save's temp dir
    shard = max((out / "global_step_3" / "actor").rglob("*.safetensors"), key=os.path.getsize)  # the weights
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) // 2)
        f.write(b"\0" * 64)
    stale = out / ".tmp-global_step_4.k1ll3d"
    (stale / "actor").mkdir(parents=True)
    capsys.readouterr()
    run_ppo(_config(tiny_model_dir, task_files, out, ["trainer.total_training_steps=4", "trainer.save_freq=1"]))
    printed = capsys.readouterr()
    assert f"resumed from {out / 'global_step_2'} at step 2" in printed.out
    assert not stale.exists()
    # steps 3 and 4 ran after the resume from step 2; the old step 3 row is gone, no step appears twice
    assert _logged_steps(out) == [1, 2, 3, 4]
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "4"


def test_sigterm_finishes_the_step_saves_and_stops(tiny_model_dir, task_files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real_train_step = RayPPOTrainer.train_step
    handler_before = signal.getsignal(signal.SIGTERM)  # an earlier test (Ray) may have installed its own

    def terminated_during_step_2(self, batch):
        if self.global_steps == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler's preemption sends
        return real_train_step(self, batch)

    monkeypatch.setattr(RayPPOTrainer, "train_step", terminated_during_step_2)
    # the default save_freq=-1 would save only at the end (step 5): without the stop, nothing would be kept
    result = run_ppo(_config(tiny_model_dir, task_files, out, ["trainer.total_training_steps=5"]))
    assert result["stopped_by"] == "SIGTERM"
    assert "stopped by SIGTERM after step 2" in capsys.readouterr().err
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert _logged_steps(out) == [1, 2]  # the step finished and was flushed to the log
    assert signal.getsignal(signal.SIGTERM) is handler_before  # handlers restored
    monkeypatch.setattr(RayPPOTrainer, "train_step", real_train_step)
    result = run_ppo(_config(tiny_model_dir, task_files, out, ["trainer.total_training_steps=5"]))
    assert result["stopped_by"] is None and _logged_steps(out) == [1, 2, 3, 4, 5]


def test_disable_in_a_used_directory_is_refused_before_the_model_loads(
    tiny_model_dir, task_files, tmp_path, monkeypatch
):
    out = tmp_path / "run"
    (out / "global_step_7" / "actor").mkdir(parents=True)
    (out / "latest_checkpointed_iteration.txt").write_text("7\n")

    def must_not_load(self):
        raise AssertionError("the model was loaded before the directory check")

    monkeypatch.setattr(RayPPOTrainer, "init_workers", must_not_load)
    cfg = _config(tiny_model_dir, task_files, out, ["trainer.resume_mode=disable", "trainer.total_training_steps=1"])
    with pytest.raises(FileExistsError, match="already holds checkpoints.*overwrite_checkpoints=true"):
        run_ppo(cfg)
    assert (out / "global_step_7").is_dir()


def test_unscorable_data_source_fails_before_the_model_loads(tiny_model_dir, task_files, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from verl.trainer.config.validation import ConfigError

    table = pq.read_table(task_files["train"])
    sources = ["arithmetic"] * (table.num_rows - 1) + ["my_private_set"]
    table = table.set_column(table.schema.get_field_index("data_source"), "data_source", [sources])
    pq.write_table(table, str(tmp_path / "mixed.parquet"))
    files = {"train": str(tmp_path / "mixed.parquet"), "reward": task_files["reward"]}

    def must_not_load(self):
        raise AssertionError("the model was loaded before the data sources were checked")

    monkeypatch.setattr(RayPPOTrainer, "init_workers", must_not_load)
    # the built-in rule scorers (no custom_reward_function) know "arithmetic" but not "my_private_set"
    cfg = _config(tiny_model_dir, files, tmp_path / "run", ["trainer.total_training_steps=1"])
    cfg.custom_reward_function.path = None
    with pytest.raises(ConfigError, match=rf"data.train_files: .*mixed.parquet row {table.num_rows - 1}: "):
        run_ppo(cfg)
