"""``python -m verl.trainer.main_ppo``: --cfg job, exit codes, user YAML, and the hand-off to run_ppo."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig

from verl.trainer import main_ppo
from verl.trainer.config.validation import ConfigError


def test_cfg_job_prints_the_resolved_config(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_ppo.main(["--cfg", "job", "data.max_response_length=32", "trainer.experiment_name=exp"])
    out = capsys.readouterr().out
    assert code == 0
    printed = yaml.safe_load(out)
    assert printed["data"]["max_response_length"] == 32
    assert printed["actor_rollout_ref"]["rollout"]["response_length"] == 32
    assert printed["trainer"]["default_local_dir"] == "outputs/verl/exp"
    assert set(printed) == {
        "data",
        "actor_rollout_ref",
        "critic",
        "reward_model",
        "custom_reward_function",
        "reward",
        "algorithm",
        "async_training",
        "rollout",
        "distillation",
        "model_engine",
        "trainer",
        "skip",
        "global_profiler",
        "ray_kwargs",
    }


def test_options_and_overrides_can_be_intermixed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_ppo.main(["data.seed=5", "--cfg=job", "trainer.seed=9"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["data"]["seed"], printed["trainer"]["seed"]) == (5, 9)


def test_bad_config_exits_2_with_the_message_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_ppo.main(["--cfg", "job", "data.train_batch_size=abc", "trainer.backnd=ray"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "data.train_batch_size: expected int, got 'abc'" in captured.err
    assert "trainer.backnd: unknown key; did you mean trainer.backend?" in captured.err
    assert "Traceback" not in captured.err


def test_bad_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_ppo.main(["--cfg", "everything"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_warnings_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_ppo.main(
        ["--cfg", "job", "algorithm.use_kl_in_reward=true", "actor_rollout_ref.actor.use_kl_loss=true"]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "warning: algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true" in captured.err
    assert yaml.safe_load(captured.out)["algorithm"]["use_kl_in_reward"] is True


def test_user_yaml_with_config_and_hydra_style_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.yaml").write_text(
        "defaults:\n  - ppo_trainer\n  - _self_\ntrainer:\n  experiment_name: from_file\n"
    )
    assert main_ppo.main(["--config", str(tmp_path / "exp.yaml"), "--cfg", "job", "trainer.seed=3"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["trainer"]["experiment_name"], printed["trainer"]["seed"]) == ("from_file", 3)

    assert main_ppo.main(["--config-path", str(tmp_path), "--config-name", "exp", "--cfg", "job"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["experiment_name"] == "from_file"

    assert main_ppo.main(["--config-path", str(tmp_path), "--cfg", "job"]) == 2
    assert "--config-path needs --config-name" in capsys.readouterr().err

    # a defaults list is composed (not dropped): the file's own base, and an unknown entry is a one-line error
    (tmp_path / "base.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\ntrainer:\n  seed: 11\n")
    (tmp_path / "child.yaml").write_text("defaults:\n  - base\n  - _self_\ntrainer:\n  experiment_name: child\n")
    assert main_ppo.main(["-cp", str(tmp_path), "-cn", "child", "--cfg", "job"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["trainer"]["seed"], printed["trainer"]["experiment_name"]) == (11, "child")
    (tmp_path / "bad.yaml").write_text("defaults:\n  - bsae\n  - _self_\n")
    assert main_ppo.main(["--config", str(tmp_path / "bad.yaml"), "--cfg", "job"]) == 2
    err = capsys.readouterr().err
    assert f"config file {tmp_path / 'bad.yaml'}: defaults entry 'bsae': no config 'bsae'" in err


def test_hydra_keys_on_the_command_line_are_not_trainer_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_ppo.main(["--cfg", "job", "hydra.run.dir=/tmp/x", "hydra/job_logging=disabled"]) == 0
    assert "hydra" not in yaml.safe_load(capsys.readouterr().out)
    assert main_ppo.main(["--cfg", "hydra", "hydra.job.chdir=true"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["hydra"]["job"]["chdir"] is True


def _fake_runner(monkeypatch: pytest.MonkeyPatch, run_ppo) -> None:
    fake = types.ModuleType("verl.trainer.ppo.runner")
    fake.run_ppo = run_ppo
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.runner", fake)


def test_without_cfg_the_config_goes_to_run_ppo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # the run's .hydra record goes to trainer.default_local_dir (relative)
    received: list[DictConfig] = []
    _fake_runner(monkeypatch, received.append)
    assert main_ppo.main(["trainer.total_training_steps=2", "+trainer.note=x"]) == 0
    (cfg,) = received
    assert isinstance(cfg, DictConfig)
    assert cfg.trainer.total_training_steps == 2
    assert cfg.trainer.note == "x"


def test_config_error_raised_by_the_trainer_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)

    def run_ppo(cfg: DictConfig) -> None:
        raise ConfigError("data.train_files: the dataset has 3 rows, fewer than data.train_batch_size=16")

    _fake_runner(monkeypatch, run_ppo)
    assert main_ppo.main([]) == 2
    assert "fewer than data.train_batch_size=16" in capsys.readouterr().err


def test_run_as_a_module_exit_code_and_no_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "--cfg", "job", "trainer.resume_mode=resume_path"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "trainer.resume_mode=resume_path needs trainer.resume_from_path" in proc.stderr
    assert "Traceback" not in proc.stderr
