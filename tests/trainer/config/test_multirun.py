"""``-m`` sweeps: expansion as Hydra's basic sweeper does it, every job validated before the first runs, one
directory per job, a summary, the exit code; and a comma value without ``-m`` is an error as in Hydra 1.3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.loader import load_config
from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.sweep import expand, override_dirname, parse_sweep
from verl.trainer.config.validation import ConfigError

DATA = "data.train_files=/d/train.parquet"


def _run(argv: list[str], run_fn) -> int:
    return run_entrypoint(
        argv, prog="p", description="d", config_name="ppo_trainer", schema=PPOConfig, load_run_fn=lambda: run_fn
    )


def test_expansion_order_range_choice_and_values_that_are_not_sweeps() -> None:
    jobs = expand(["a=1,2", "b=x", "+c=range(3,5)"])
    assert jobs == [["a=1", "b=x", "+c=3"], ["a=1", "b=x", "+c=4"], ["a=2", "b=x", "+c=3"], ["a=2", "b=x", "+c=4"]]
    assert parse_sweep("k=choice('x y',z)").values == ('"x y"', "z")
    for text in ["k=[1,2]", "k='a,b'", "k={a: 1, b: 2}", "k=${oc.env:HOME,/tmp}", "~k", "k=1e-5"]:
        assert parse_sweep(text) is None, text
    assert parse_sweep("data.train_files=~/a.parquet,~/b.parquet").values == ("~/a.parquet", "~/b.parquet")
    assert override_dirname(["b=1", "a=x"], kv_sep=":") == "a:x,b:1"
    # a YAML's hydra.sweeper.params go first; the command line's sweep of the same key replaces it
    assert expand(["a=5,6"], {"a": "1,2", "b": "7,8"}) == [
        ["b=7", "a=5"],
        ["b=7", "a=6"],
        ["b=8", "a=5"],
        ["b=8", "a=6"],
    ]


def test_comma_value_without_multirun_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"ambiguous value: write trainer.logger=\[console,file\] for a list"):
        load_config([DATA, "trainer.logger=console,file"])
    with pytest.raises(ConfigError, match=r"'data.seed=range\(1,3\)': a sweep needs -m/--multirun"):
        load_config([DATA, "data.seed=range(1,3)"])
    assert load_config([DATA, "trainer.logger=[console,file]"]).trainer.logger == ["console", "file"]
    assert _run(["--cfg", "job", DATA, "trainer.seed=1,2"], lambda cfg: None) == 2
    assert "add -m/--multirun" in capsys.readouterr().err


def test_every_job_is_validated_before_the_first_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    calls: list[DictConfig] = []
    code = _run(["-m", DATA, "data.train_batch_size=16,abc", "trainer.seed=1,2"], calls.append)
    assert code == 2 and calls == []
    err = capsys.readouterr().err
    assert "job #2 (data.train_files=/d/train.parquet data.train_batch_size=abc trainer.seed=1)" in err
    assert "data.train_batch_size: expected int, got 'abc'" in err
    assert not (tmp_path / "multirun").exists()
    assert _run(["-m", DATA, "trainer.seed=1,2", "trainer.default_local_dir=/tmp/same"], calls.append) == 2
    assert "would both write trainer.default_local_dir=/tmp/same" in capsys.readouterr().err
    assert _run(["-m", DATA, "hydra.job.chdir=true,false"], calls.append) == 2
    assert "sweeping over Hydra's own configuration is not supported" in capsys.readouterr().err


def test_jobs_run_in_order_each_in_its_own_dir_and_failures_are_summarised(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    seen: list[tuple[int, str]] = []

    def run(cfg: DictConfig) -> None:
        seen.append((cfg.trainer.seed, cfg.trainer.default_local_dir))
        if cfg.trainer.seed == 2:
            raise RuntimeError("job two broke")

    code = _run(["-m", DATA, "trainer.seed=1,2,3", "hydra.sweep.dir=sweep"], run)
    assert code == 1
    assert [s for s, _ in seen] == [1, 2, 3]
    assert [home for _, home in seen] == [str(tmp_path / "sweep" / str(i)) for i in range(3)]
    for i in range(3):
        record = tmp_path / "sweep" / str(i) / ".hydra"
        assert yaml.safe_load((record / "overrides.yaml").read_text())[1] == f"trainer.seed={i + 1}"
        hydra = yaml.safe_load((record / "hydra.yaml").read_text())["hydra"]
        assert (hydra["mode"], hydra["job"]["num"]) == ("MULTIRUN", i)
    err = capsys.readouterr().err
    assert "[multirun] job #1 (2/3): trainer.seed=2 -> sweep/1" in err
    assert "RuntimeError: job two broke" in err
    assert "#1 failed (exit 1)" in err and "2 of 3 jobs succeeded" in err


def test_yaml_sweeper_params_and_mode_and_cfg_job(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    exp = tmp_path / "sweep.yaml"
    exp.write_text(
        "hydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      trainer.seed: 1,2\n"
        "  sweep:\n    subdir: ${hydra.job.override_dirname}\n"
        "data:\n  train_files: /d/train.parquet\n"
    )
    assert _run(["--config", str(exp), "--cfg", "job", "data.seed=5"], lambda cfg: None) == 0
    docs = [yaml.safe_load(d) for d in capsys.readouterr().out.split("---\n")]
    assert [(d["trainer"]["seed"], d["data"]["seed"]) for d in docs] == [(1, 5), (2, 5)]
    assert docs[0]["trainer"]["default_local_dir"].endswith("data.seed=5,trainer.seed=1")


def test_sft_entry_point_takes_the_same_command_line(tmp_path: Path, capsys) -> None:
    from verl.trainer import main_sft

    exp = tmp_path / "sft.yaml"
    exp.write_text("defaults:\n  - sft_trainer\n  - _self_\nhydra:\n  run:\n    dir: /r/sft\nmodel:\n  lora_rank: 4\n")
    assert main_sft.main(["--config", str(exp), "--cfg", "job", "-m", "optim.lr=1e-5,2e-5"]) == 0
    docs = [yaml.safe_load(d) for d in capsys.readouterr().out.split("---\n")]
    assert [d["optim"]["lr"] for d in docs] == [1e-5, 2e-5] and docs[0]["model"]["lora_rank"] == 4
    assert main_sft.main(["--cfg", "job", "hydra.run.dri=x"]) == 2
    assert "did you mean hydra.run.dir?" in capsys.readouterr().err


def test_two_tiny_training_jobs(tiny_model_dir: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """The one real sweep: two 1-step GRPO runs on the tiny model, each checkpointing into its own job directory."""
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.trainer import main_ppo

    monkeypatch.chdir(tmp_path)
    train, _ = generate_arithmetic_splits(train_size=4, test_size=2, seed=1)
    write_parquet(train, str(tmp_path / "train.parquet"))
    argv = [
        "-m",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        f"data.train_files={tmp_path / 'train.parquet'}",
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=2",
        "data.max_prompt_length=128",
        "data.max_response_length=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.logger=[file]",
        "trainer.export_hf=false",
        "trainer.plot=false",
        "trainer.torch_threads=1",
        "hydra.sweep.dir=sw",
        "actor_rollout_ref.actor.optim.lr=1e-5,1e-4",
    ]
    assert main_ppo.main(argv) == 0, capsys.readouterr().err[-3000:]
    for i, lr in enumerate([1e-5, 1e-4]):
        job = tmp_path / "sw" / str(i)
        config = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == lr
        metrics = [json.loads(line) for line in (job / "logs" / "metrics.jsonl").read_text().splitlines()]
        assert any(r.get("step") == 1 for r in metrics)
    assert "2 of 2 jobs succeeded" in capsys.readouterr().err
