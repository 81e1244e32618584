"""verl-recipe's configs through main_ppo: the DAPO recipe's keys (data.gen_batch_size, reward.reward_kwargs,
upstream's ``_target_`` class paths, a null filter metric), v0.9's actor.optim.clip_grad and data.train_max_samples,
and QAT refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl.trainer.config import load_config
from verl.trainer.config.validation import ConfigError, ConfigWarning

DATA = ["data.train_files=train.parquet"]

# a recipe config in verl-recipe's layout (recipe/<name>/config/<name>_trainer.yaml), written for this test
RECIPE_YAML = """\
hydra:
  searchpath:
    - file://verl/trainer/config

defaults:
  - ppo_trainer
  - _self_

data:
  gen_batch_size: ${data.train_batch_size}

reward:
  reward_manager:
    name: dapo
  reward_kwargs:
    overlong_buffer_cfg:
      enable: False
      len: 0
      penalty_factor: 0.0
      log: False
    max_resp_len: null

algorithm:
  filter_groups:
    _target_: verl.trainer.config.FilterGroupsConfig
    enable: False
    metric: null
    max_num_gen_batches: 0
"""


def _recipe(tmp_path: Path, *overrides: str):
    path = tmp_path / "recipe_trainer.yaml"
    path.write_text(RECIPE_YAML)
    return load_config([*DATA, *overrides], config_file=str(path))


def test_the_dapo_recipe_config_composes_and_its_keys_land_where_the_trainer_reads_them(tmp_path: Path) -> None:
    cfg = _recipe(
        tmp_path,
        "data.train_batch_size=4",
        "data.gen_batch_size=12",
        "algorithm.filter_groups.enable=True",
        "algorithm.filter_groups.metric=acc",
        "reward.reward_kwargs.overlong_buffer_cfg.enable=True",
        "reward.reward_kwargs.overlong_buffer_cfg.len=64",
        "reward.reward_kwargs.max_resp_len=256",
    )
    assert cfg.data.gen_batch_size == 12 and cfg.algorithm.filter_groups.metric == "acc"
    assert "_target_" not in cfg.algorithm.filter_groups  # upstream's class path: our section is typed already
    assert cfg.reward_model.reward_manager == "dapo"
    # the recipe's overlong_buffer_cfg is the overlong buffer the dapo manager reads; max_resp_len its argument
    assert cfg.reward_model.overlong_buffer.enable and cfg.reward_model.overlong_buffer.len == 64
    assert cfg.reward_model.reward_kwargs == {"max_resp_len": 256} == cfg.reward.reward_kwargs


def test_the_recipe_defaults_follow_the_training_batch(tmp_path: Path) -> None:
    cfg = _recipe(tmp_path, "data.train_batch_size=8")
    assert cfg.data.gen_batch_size == 8 and cfg.algorithm.filter_groups.metric is None
    assert not cfg.reward_model.overlong_buffer.enable


def test_a_plus_on_the_older_reward_kwargs_spelling_sets_the_existing_key() -> None:
    """verl's older scripts add the dict entry with +; at its canonical key it already exists."""
    cfg = load_config(
        [
            *DATA,
            "reward_model.reward_manager=dapo",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=16",
        ]
    )
    assert cfg.reward_model.overlong_buffer.enable and cfg.reward_model.overlong_buffer.len == 16


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["data.gen_batch_size=0", "algorithm.filter_groups.enable=true"], "must be >= 1"),
        (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=null"], "metric is null"),
        (["actor_rollout_ref.actor.fsdp_config.qat.enable=true"], "quantization-aware training"),
    ],
)
def test_dynamic_sampling_and_qat_values_we_cannot_honour_are_one_line(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config([*DATA, *overrides])


def test_an_unfiltered_generation_batch_is_trained_whole_as_upstream_does() -> None:
    """FlowRL's and two DAPO scripts set gen_batch_size = 3 x train_batch_size with dynamic sampling off: upstream's
    trainers then train on every prompt drawn."""
    with pytest.warns(ConfigWarning, match="trains on the whole generation batch of 12 prompts"):
        cfg = load_config([*DATA, "data.train_batch_size=4", "data.gen_batch_size=12"])
    assert cfg.data.train_batch_size == 12 and cfg.data.gen_batch_size == 12


def test_a_generation_batch_equal_to_the_training_batch_needs_no_dynamic_sampling() -> None:
    assert load_config([*DATA, "data.train_batch_size=4", "data.gen_batch_size=4"]).data.gen_batch_size == 4


def test_a_target_naming_another_class_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("defaults:\n  - ppo_trainer\n  - _self_\nalgorithm:\n  _target_: my_pkg.MyAlgoConfig\n")
    with pytest.raises(ConfigError, match=r"algorithm\._target_=my_pkg.MyAlgoConfig: sections here are typed"):
        load_config(DATA, config_file=str(path))


def test_v09_optim_clip_grad_is_the_workers_grad_clip() -> None:
    cfg = load_config([*DATA, "actor_rollout_ref.actor.optim.clip_grad=0.5", "critic.optim.clip_grad=2.0"])
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.5 and cfg.critic.grad_clip == 2.0


def test_train_max_samples_keeps_a_seeded_subset_or_the_first_rows(tmp_path: Path, byte_tokenizer) -> None:
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.data.config import DataConfig
    from verl.data.rl_dataset import RLHFDataset

    rows, _ = generate_arithmetic_splits(train_size=20, test_size=2, seed=0)
    path = str(tmp_path / "train.parquet")
    write_parquet(rows, path)

    def prompts(**cfg) -> list:
        data = RLHFDataset(path, byte_tokenizer, DataConfig(max_prompt_length=256, **cfg), max_samples=5)
        return [data[i]["raw_prompt_ids"] for i in range(len(data))]

    every = [
        RLHFDataset(path, byte_tokenizer, DataConfig(max_prompt_length=256))[i]["raw_prompt_ids"] for i in range(20)
    ]
    first = prompts(shuffle=False)
    assert first == every[:5]
    drawn = prompts(shuffle=True, seed=3)
    picked = [every.index(p) for p in drawn]
    assert len(drawn) == 5 and picked == sorted(picked) and drawn != first  # in file order, not the first five
    assert prompts(shuffle=True, seed=3) == drawn  # the same seed, the same rows


def test_train_max_samples_needs_a_dataset_class_that_takes_it(tmp_path: Path) -> None:
    from verl.trainer.ppo.runner import create_rl_dataset

    module = tmp_path / "fixed_dataset.py"
    module.write_text(
        "import torch\n\n\nclass Fixed(torch.utils.data.Dataset):\n"
        "    def __init__(self, data_files, tokenizer, processor, config):\n        self.n = 4\n\n"
        "    def __len__(self):\n        return self.n\n"
    )
    cfg = load_config(
        [*DATA, "data.train_max_samples=2", f"data.custom_cls.path={module}", "data.custom_cls.name=Fixed"]
    ).data
    with pytest.raises(ConfigError, match="data.train_max_samples=2: the dataset class Fixed takes no max_samples"):
        create_rl_dataset("x.parquet", cfg, tokenizer=None, is_train=True)
    assert len(create_rl_dataset("x.parquet", cfg, tokenizer=None, is_train=False)) == 4  # validation: no cap


@pytest.mark.parametrize(
    "statement",
    [
        "from verl.utils.config import validate_config",  # prime, sppo, async_flow, dapo's transfer-queue main
        "from verl.experimental.reward_loop import migrate_legacy_reward_impl",  # dapo, dynamo
    ],
)
def test_a_recipe_entry_points_upstream_internal_import_says_how_the_recipe_runs_here(statement: str) -> None:
    with pytest.raises(ImportError, match=r"--config-path recipe/<name>/config .*docs/verl_recipes.md"):
        exec(statement, {})
