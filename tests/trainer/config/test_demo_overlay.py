"""The embedded demo's quick settings apply only to a bare run; a script that names its data gets upstream's
defaults for every key it leaves out."""

from __future__ import annotations

from verl.trainer.config.loader import demo_overlay_applies, load_config
from verl.trainer.config.schema import PPOConfig
from verl.trainer.main_ppo import main

SMALL = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4"]


def test_bare_run_is_the_demo() -> None:
    cfg = load_config([])
    assert cfg.data.train_files == "bundled://arithmetic/train.parquet"
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.trainer.total_training_steps == 12
    assert cfg.data.val_max_samples == 128
    assert cfg.trainer.experiment_name == "demo"
    # the demo's keys can still be overridden
    assert load_config(["trainer.total_training_steps=3"]).trainer.total_training_steps == 3


def test_a_script_with_data_gets_upstream_defaults() -> None:
    cfg = load_config(["data.train_files=~/data/gsm8k/train.parquet", *SMALL])
    assert cfg.algorithm.adv_estimator == "gae"  # upstream's default estimator
    assert cfg.trainer.total_training_steps is None  # derived from total_epochs
    assert cfg.trainer.total_epochs == 30
    assert cfg.data.val_max_samples == -1  # every validation row
    assert cfg.trainer.test_freq == -1
    assert cfg.actor_rollout_ref.rollout.n == 1
    assert cfg.data.max_prompt_length == 512 and cfg.data.max_response_length == 512
    assert cfg.actor_rollout_ref.actor.dtype == "auto"


def test_a_user_yaml_naming_data_turns_the_demo_off(tmp_path) -> None:
    user = tmp_path / "run.yaml"
    user.write_text("data:\n  train_files: /data/train.parquet\n")
    assert not demo_overlay_applies(PPOConfig, str(user), [])
    assert demo_overlay_applies(PPOConfig, None, ["trainer.total_epochs=2"])
    assert not demo_overlay_applies(PPOConfig, None, ["data.train_files=[a.parquet,b.parquet]"])
    cfg = load_config(SMALL, config_file=str(user))
    assert cfg.trainer.total_training_steps is None and cfg.algorithm.adv_estimator == "gae"


def test_cli_says_when_it_runs_the_demo(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)  # the run's .hydra record goes to trainer.default_local_dir (relative)
    calls = []
    monkeypatch.setattr("verl.trainer.main_ppo._load_run_ppo", lambda: calls.append)
    assert main(["trainer.total_training_steps=1"]) == 0
    assert "running the embedded demo" in capsys.readouterr().err
    assert calls and calls[0].algorithm.adv_estimator == "grpo"
    assert main(["data.train_files=x.parquet", *SMALL]) == 0
    assert "embedded demo" not in capsys.readouterr().err


def test_unset_upstream_mini_batch_adapts_to_a_small_step() -> None:
    """Upstream's default mini-batch (256) never rejects a run whose step is smaller; a value the user set does."""
    import pytest

    from verl.trainer.config.validation import ConfigError

    cfg = load_config(["data.train_files=x.parquet", "data.train_batch_size=16"])
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16 and cfg.critic.ppo_mini_batch_size == 16
    cfg = load_config(
        ["data.train_files=x.parquet", "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
    )
    assert cfg.critic.ppo_mini_batch_size == 4  # follows the actor's, as the YAML interpolation says
    with pytest.raises(ConfigError, match="ppo_mini_batch_size=32 is larger than data.train_batch_size=16"):
        load_config(
            ["data.train_files=x.parquet", "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=32"]
        )
