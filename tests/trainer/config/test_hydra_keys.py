"""``hydra.*`` keys: the same on the command line and in a YAML's ``hydra:`` section, checked with a did-you-mean,
never part of the trainer's config, and doing what Hydra does (run record, log file, chdir, env, verbose)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig

from verl.trainer.config.entrypoint import run_entrypoint
from verl.trainer.config.loader import build_config
from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.validation import ConfigError

DATA = "data.train_files=/d/train.parquet"


def _run(argv: list[str], run_fn, schema: type = PPOConfig) -> int:
    return run_entrypoint(
        argv, prog="p", description="d", config_name=schema.config_name, schema=schema, load_run_fn=lambda: run_fn
    )


def test_cli_and_yaml_hydra_keys_mean_the_same_and_stay_out_of_the_config(tmp_path: Path) -> None:
    cli = build_config([DATA, "hydra.run.dir=/r/x", "hydra.job.chdir=true", "hydra/job_logging=disabled"])
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "hydra:\n  run:\n    dir: /r/x\n  job:\n    chdir: true\n"
        "defaults:\n  - ppo_trainer\n  - override hydra/job_logging: disabled\n  - _self_\n"
    )
    from_yaml = build_config([DATA], config_file=str(exp))
    for built in (cli, from_yaml):
        assert "hydra" not in built.cfg
        assert built.hydra.run.dir == "/r/x" and built.hydra.job.chdir is True
        assert built.hydra.runtime.choices["hydra/job_logging"] == "disabled"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("hydra.run.dirr=x", "hydra.run.dirr: unknown Hydra key; did you mean hydra.run.dir?"),
        ("hydra.job.chdr=true", "hydra.job.chdir?"),
        ("++hydra.outputs_subdir=x", "did you mean hydra.output_subdir?"),
    ],
)
def test_unknown_hydra_key_on_the_command_line(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("?", r"\?")):
        build_config([DATA, override])


def test_unknown_hydra_key_in_a_yaml_and_free_form_sections(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text("hydra:\n  job:\n    chdirr: true\n")
    with pytest.raises(ConfigError, match=rf"config file {exp}: hydra.job.chdirr: unknown Hydra key; did you mean"):
        build_config([DATA], config_file=str(exp))
    exp.write_text(
        "hydra:\n  job:\n    env_set:\n      MY_FLAG: '1'\n  job_logging:\n    root:\n      level: WARNING\n"
    )
    assert build_config([DATA], config_file=str(exp)).hydra.job.env_set.MY_FLAG == "1"
    with pytest.raises(ConfigError, match=r"no option 'nope' in group|hydra/job_logging"):
        build_config([DATA, "hydra/job_logging=nope"])


def test_run_record_log_file_chdir_env_and_verbose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    seen: dict = {}

    def run(cfg: DictConfig) -> None:
        seen.update(cwd=os.getcwd(), home=cfg.trainer.default_local_dir, env=os.environ.get("VERL_TEST_FLAG"))
        seen["debug"] = logging.getLogger("verl.sweep_test").isEnabledFor(logging.DEBUG)
        logging.getLogger("verl.sweep_test").info("inside the job")

    argv = [
        DATA,
        "trainer.experiment_name=exp",
        "hydra.run.dir=runs/${trainer.experiment_name}",
        "hydra.job.chdir=true",
        "hydra.job.name=ppo_job",
        "+hydra.job.env_set.VERL_TEST_FLAG=on",
        "hydra.verbose=[verl.sweep_test]",
    ]
    assert _run(argv, run) == 0
    run_dir = tmp_path / "runs" / "exp"
    assert seen == {
        "cwd": str(run_dir),
        "home": str(tmp_path / "outputs" / "verl" / "exp"),  # made absolute: chdir must not nest the checkpoints
        "env": "on",
        "debug": True,
    }
    assert os.getcwd() == str(tmp_path) and "VERL_TEST_FLAG" not in os.environ
    assert not logging.getLogger("verl.sweep_test").isEnabledFor(logging.DEBUG)
    record = run_dir / ".hydra"
    assert yaml.safe_load((record / "overrides.yaml").read_text()) == argv
    config = yaml.safe_load((record / "config.yaml").read_text())
    assert config["trainer"]["experiment_name"] == "exp" and "hydra" not in config
    hydra = yaml.safe_load((record / "hydra.yaml").read_text())["hydra"]
    assert hydra["job"]["name"] == "ppo_job" and hydra["runtime"]["output_dir"] == str(run_dir)
    assert "inside the job" in (run_dir / "ppo_job.log").read_text()


def test_default_record_goes_next_to_the_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run([DATA, "trainer.experiment_name=e1"], lambda cfg: None) == 0
    home = tmp_path / "outputs" / "verl" / "e1"
    assert (home / ".hydra" / "config.yaml").is_file() and (home / "p.log").is_file()
    assert _run([DATA, "trainer.experiment_name=e2", "hydra.output_subdir=null"], lambda cfg: None) == 0
    assert not (tmp_path / "outputs" / "verl" / "e2" / ".hydra").exists()
    assert _run([DATA, "trainer.experiment_name=e3", "--cfg", "job"], lambda cfg: None) == 0
    assert not (tmp_path / "outputs" / "verl" / "e3").exists()  # --cfg job writes nothing, as in Hydra


def test_eval_writes_no_record_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.main_eval import EvalConfig

    monkeypatch.chdir(tmp_path)
    args = ["data.path=/d/gen.parquet"]
    assert _run(args, lambda cfg: None, EvalConfig) == 0
    assert list(tmp_path.iterdir()) == []
    assert _run([*args, "hydra.run.dir=evals/one"], lambda cfg: None, EvalConfig) == 0
    assert (tmp_path / "evals" / "one" / ".hydra" / "overrides.yaml").is_file()


def test_a_run_the_trainer_refuses_leaves_no_new_directory_and_keeps_an_old_one(tmp_path: Path) -> None:
    def refuse(cfg: DictConfig) -> None:
        logging.getLogger("verl.test").warning("about to refuse")
        raise ConfigError("data.train_files: no such file")

    new = tmp_path / "a" / "b" / "run"
    assert _run([DATA, f"trainer.default_local_dir={new}"], refuse) == 2
    assert not (tmp_path / "a").exists()  # every directory the refused run made is gone

    old = tmp_path / "old"
    (old / "global_step_3").mkdir(parents=True)
    assert _run([DATA, f"trainer.default_local_dir={old}"], refuse) == 2
    assert (old / "global_step_3").is_dir()  # a run directory that was there stays, with what it held
    assert (old / ".hydra" / "config.yaml").is_file()
