"""SPO's config (verl/trainer/config/spo_checks.py): verl-recipe spo's ``trainer.spo`` keys land in
``algorithm.spo``, its ``adv_estimator=grpo`` becomes ``spo``, the generation batch stays what SPO samples from, and
what SPO cannot run with is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl.trainer.config import load_config
from verl.trainer.config.validation import ConfigError, ConfigWarning
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

DATA = ["data.train_files=train.parquet"]

# verl-recipe spo's config/spo_trainer.yaml, as the recipe ships it
SPO_TRAINER_YAML = """\
hydra:
  searchpath:
    - file://verl/trainer/config

defaults:
  - ppo_trainer
  - _self_

trainer:
  debug: false
  spo:
    enable: False
    offline_values: null
    offline_N: 8
    rho:
      type: "kl"
      value: 0.875
      clip_lower: 0.875
"""

# the overrides of the recipe's train.sh with METHOD=SPO that matter here
SCRIPT = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=8",
    "+data.gen_batch_size=32",  # the key January's verl lacked: a set (upstream_plus.py)
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.rollout.n=1",
    "trainer.spo.enable=True",
    "trainer.spo.offline_values=",
    "trainer.debug=False",
]


def _recipe(tmp_path: Path, *overrides: str):
    path = tmp_path / "spo_trainer.yaml"
    path.write_text(SPO_TRAINER_YAML)
    return load_config([*DATA, *overrides], config_file=str(path))


def test_the_recipes_script_runs_spo_with_its_generation_batch(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match="adv_estimator is spo"):
        cfg = _recipe(tmp_path, *SCRIPT)
    assert cfg.algorithm.adv_estimator == "spo" and cfg.algorithm.spo.enable
    assert cfg.algorithm.spo.rho.type == "kl" and cfg.algorithm.spo.offline_N == 8
    assert cfg.algorithm.spo.offline_values is None  # the script's unset $OFFLINE_VALUES
    assert cfg.data.train_batch_size == 8 and cfg.data.gen_batch_size == 32  # sampled from, not trained whole
    assert cfg.data.return_raw_chat  # the prompts' text keys their values
    assert "spo" not in cfg.trainer


def test_a_plus_on_a_key_both_upstream_configs_hold_is_still_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data.train_batch_size already exists"):
        _recipe(tmp_path, "+data.train_batch_size=8")


def test_the_recipes_grpo_method_stays_grpo(tmp_path: Path) -> None:
    cfg = _recipe(tmp_path, "algorithm.adv_estimator=grpo", "trainer.spo.enable=False")
    assert cfg.algorithm.adv_estimator == "grpo" and not cfg.algorithm.spo.enable


def test_adv_estimator_spo_alone_turns_spo_on() -> None:
    cfg = load_config([*DATA, "algorithm.adv_estimator=spo", "data.gen_batch_size=16", "data.train_batch_size=4",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=4"])  # fmt: skip
    assert cfg.algorithm.spo.enable and cfg.data.train_batch_size == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator=gae with algorithm.spo.enable=true"),
        (["data.return_raw_chat=false"], "data.return_raw_chat=false: SPO keys"),
        (["algorithm.filter_groups.enable=true"], "use one of them"),
        (["async_training.mode=fully_async"], "drop async_training.mode"),
        (["algorithm.spo.rho.clip_lower=0.97"], "algorithm.spo.rho.clip_lower=0.97 must lie in"),
        (["algorithm.spo.rho.type=constant", "algorithm.spo.rho.value=0"], "algorithm.spo.rho.value=0"),
        (["algorithm.spo.offline_N=-1"], "algorithm.spo.offline_N=-1"),
    ],
)
def test_what_spo_cannot_run_with_is_refused_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config([*DATA, "algorithm.spo.enable=true", "data.gen_batch_size=16", "data.train_batch_size=4",
                     "actor_rollout_ref.actor.ppo_mini_batch_size=4", *overrides])  # fmt: skip


def test_without_a_larger_generation_batch_the_draw_changes_nothing_and_says_so() -> None:
    with pytest.warns(ConfigWarning, match="the priority sampling changes nothing"):
        load_config([*DATA, "algorithm.adv_estimator=spo"])


def test_trainer_debug_turns_on_rays_debugger_in_the_workers() -> None:
    assert get_ppo_ray_runtime_env(load_config([*DATA, "trainer.debug=true"]))["env_vars"]["RAY_DEBUG"] == "legacy"
    assert "RAY_DEBUG" not in get_ppo_ray_runtime_env(load_config(DATA))["env_vars"]
