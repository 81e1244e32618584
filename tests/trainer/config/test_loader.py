"""load_config: packaged defaults, user YAML, key=value overrides, +keys, deletion, interpolation."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import DictConfig

from verl.trainer.config.loader import load_config, parse_override, parse_value
from verl.trainer.config.validation import ConfigError


def _write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


# ------------------------------------------------------------------------------------------------ value parsing
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("32", 32),
        ("-1", -1),
        ("0.25", 0.25),
        ("1e-5", 1e-5),
        ("3.0e-6", 3.0e-6),
        ("true", True),
        ("false", False),
        ("null", None),
        ("[a,b]", ["a", "b"]),
        ("[1, 2.5]", [1, 2.5]),
        ("[]", []),
        ("{attn_implementation: eager}", {"attn_implementation": "eager"}),
        ("'123'", "123"),
        ('"true"', "true"),
        ("hello world", "hello world"),
        ("http://localhost:8000/score", "http://localhost:8000/score"),
        ("/tmp/a=b.parquet", "/tmp/a=b.parquet"),
        ("", ""),
    ],
)
def test_parse_value_reads_yaml_scalars_and_lists(raw: str, expected: object) -> None:
    value = parse_value(raw)
    assert value == expected
    assert type(value) is type(expected)


def test_parse_override_prefixes() -> None:
    assert parse_override("data.seed=3").op == "set"
    add = parse_override("+data.new_key=x=y")
    assert (add.op, add.key, add.value) == ("add", "data.new_key", "x=y")
    assert parse_override("++data.seed=3").op == "force_add"
    delete = parse_override("~data.seed")
    assert (delete.op, delete.key) == ("delete", "data.seed")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("data.seed", "expected key=value"),
        ("data..seed=1", "is not a dotted key"),
        ("=3", "is not a dotted key"),
        ("data.seed=[1,", "cannot parse '[1,'"),
        ("~data.seed=1", "a deletion takes no value"),
    ],
)
def test_malformed_overrides_name_the_override(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config([text])
    assert fragment in str(e.value)
    assert repr(text) in str(e.value)


# ----------------------------------------------------------------------------------------------------- overrides
def test_defaults_load_resolved_and_valid() -> None:
    cfg = load_config()
    assert isinstance(cfg, DictConfig)
    assert cfg.data.train_batch_size == 8
    assert cfg.actor_rollout_ref.rollout.response_length == 16
    assert cfg.trainer.default_local_dir == "outputs/verl/demo"


def test_overrides_of_each_value_type() -> None:
    cfg = load_config(
        [
            "data.train_batch_size=32",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.optim.lr=3e-6",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
            "data.shuffle=false",
            "data.val_batch_size=null",
            "trainer.torch_threads=2",
            "trainer.logger=[console,file]",
            "actor_rollout_ref.actor.optim.betas=[0.9,0.95]",
            "trainer.experiment_name='007'",
            "data.train_files=[a.parquet,b.parquet]",
            "actor_rollout_ref.model.override_config={attn_implementation: eager}",
        ]
    )
    assert cfg.data.train_batch_size == 32
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-6)
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == pytest.approx(0.28)
    assert cfg.data.shuffle is False
    assert cfg.data.val_batch_size is None
    assert cfg.trainer.torch_threads == 2
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert list(cfg.actor_rollout_ref.actor.optim.betas) == [0.9, 0.95]
    assert cfg.trainer.experiment_name == "007"
    assert list(cfg.data.train_files) == ["a.parquet", "b.parquet"]
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "eager"
    # the critic's mini-batch follows the actor's through ${...}
    assert cfg.critic.ppo_mini_batch_size == 8


def test_later_override_wins() -> None:
    cfg = load_config(["data.seed=1", "data.seed=2"])
    assert cfg.data.seed == 2


def test_plus_adds_new_keys_that_stay_accessible() -> None:
    cfg = load_config(
        ["+data.my_custom_flag=true", "+trainer.notes.owner=alice", "+my_section.alpha=0.5"],
    )
    assert cfg.data.my_custom_flag is True
    assert cfg.trainer.notes.owner == "alice"
    assert cfg.my_section.alpha == 0.5


def test_plus_on_an_existing_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"data.seed already exists; drop the \+"):
        load_config(["+data.seed=3"])


def test_plus_plus_sets_or_adds() -> None:
    cfg = load_config(["++data.seed=3", "++data.brand_new=1"])
    assert cfg.data.seed == 3
    assert cfg.data.brand_new == 1


def test_delete_an_added_key_and_deleting_missing_is_an_error() -> None:
    cfg = load_config(["+data.tmp=1", "~data.tmp"])
    assert "tmp" not in cfg.data
    with pytest.raises(ConfigError, match="data.nope does not exist"):
        load_config(["~data.nope"])


def test_override_through_a_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match="data.train_batch_size is a value, not a section"):
        load_config(["data.train_batch_size.x=1"])


def test_every_bad_override_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(["+data.seed=1", "~data.nope", "oops"])
    assert len(e.value.problems) == 3


# ------------------------------------------------------------------------------------------------- interpolation
def test_response_length_follows_max_response_length() -> None:
    cfg = load_config(["data.max_response_length=48", "data.max_prompt_length=100"])
    assert cfg.actor_rollout_ref.rollout.response_length == 48
    assert cfg.actor_rollout_ref.rollout.prompt_length == 100


def test_interpolations_follow_overrides_and_are_resolved() -> None:
    cfg = load_config(
        [
            "trainer.project_name=proj",
            "trainer.experiment_name=run1",
            "actor_rollout_ref.model.path=/models/m",
            "actor_rollout_ref.rollout.n=8",
        ]
    )
    assert cfg.trainer.default_local_dir == "outputs/proj/run1"
    assert cfg.critic.model.path == "/models/m"
    assert cfg.critic.rollout_n == 8
    # resolved in place: no ${...} left in the returned config
    assert "${" not in str(cfg)


def test_an_explicit_value_breaks_the_link() -> None:
    cfg = load_config(["data.max_response_length=48", "actor_rollout_ref.rollout.response_length=8"])
    assert cfg.actor_rollout_ref.rollout.response_length == 8


def test_interpolation_in_an_override_value() -> None:
    cfg = load_config(["trainer.validation_data_dir=${trainer.default_local_dir}/val"])
    assert cfg.trainer.validation_data_dir == "outputs/verl/demo/val"


def test_broken_interpolation_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot resolve interpolation"):
        load_config(["trainer.log_dir=${data.no_such_key}"])


# ----------------------------------------------------------------------------------------------------- user YAML
def test_user_yaml_is_merged_then_overrides_win(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "my.yaml",
        """
        defaults:            # Hydra's defaults list is ignored: the packaged defaults are always the base
          - ppo_trainer
          - _self_
        data:
          max_response_length: 24
          train_batch_size: 8
        actor_rollout_ref:
          actor:
            ppo_mini_batch_size: 4
            ppo_micro_batch_size_per_gpu: 4
        trainer:
          experiment_name: from_yaml
          total_training_steps: 3
        """,
    )
    cfg = load_config(["trainer.total_training_steps=5"], config_file=path)
    assert cfg.data.max_response_length == 24
    assert cfg.actor_rollout_ref.rollout.response_length == 24  # interpolation sees the merged value
    assert cfg.data.train_batch_size == 8
    assert cfg.data.max_prompt_length == 64  # untouched default survives the deep merge
    assert cfg.trainer.experiment_name == "from_yaml"
    assert cfg.trainer.total_training_steps == 5
    assert "defaults" not in cfg


def test_unknown_key_in_user_yaml_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "typo.yaml", "trainer:\n  total_epoch: 3\n")
    with pytest.raises(ConfigError, match=r"trainer.total_epoch: unknown key; did you mean trainer.total_epochs\?"):
        load_config(config_file=path)


def test_missing_and_invalid_user_yaml(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=f"config file {missing}: not found"):
        load_config(config_file=missing)
    bad = _write(tmp_path / "bad.yaml", "data:\n  seed: [1,\n")
    with pytest.raises(ConfigError, match=f"config file {bad}: invalid YAML"):
        load_config(config_file=bad)
    a_list = _write(tmp_path / "list.yaml", "- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(config_file=a_list)


def test_unknown_packaged_config_name() -> None:
    with pytest.raises(ConfigError, match="no packaged config 'no_such_trainer'.*available: .*ppo_trainer"):
        load_config(config_name="no_such_trainer", schema=None)


# ------------------------------------------------------------------------------------------------------- generic
@dataclass
class _ToyOptim:
    lr: float = 0.1


@dataclass
class _ToyConfig:
    name: str = "toy"
    steps: int = 3
    optim: _ToyOptim = field(default_factory=_ToyOptim)


def test_loader_is_generic_over_yaml_name_and_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "toy_cfg_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    _write(pkg / "toy_trainer.yaml", "name: toy\nsteps: 3\noptim:\n  lr: 0.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(["steps=7", "optim.lr=1"], config_name="toy_trainer", schema=_ToyConfig, package="toy_cfg_pkg")
    assert cfg.steps == 7
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    with pytest.raises(ConfigError, match="steps: expected int, got 'many'"):
        load_config(["steps=many"], config_name="toy_trainer", schema=_ToyConfig, package="toy_cfg_pkg")
