"""Upstream verl v0.9 keys with no setting here: accepted at upstream's default, refused otherwise in one line
(verl/trainer/config/v09_inert_keys.py and its table upstream_data/v09_inert_keys.yaml)."""

from __future__ import annotations

import os

import pytest
import yaml
from omegaconf import OmegaConf

from verl.trainer.config import load_config
from verl.trainer.config.schema import PPOConfig
from verl.trainer.config.v09_inert_keys import _schema_has, inert_keys
from verl.trainer.config.validation import ConfigError

DATA = ["data.train_files=train.parquet"]


def _cfg(*overrides: str):
    return load_config([*DATA, *overrides])


def _yaml_value(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def test_no_table_key_hides_a_key_of_ours() -> None:
    table = inert_keys()
    assert len(table) > 250
    ours = [k for k in table if _schema_has(PPOConfig, k.split("."))]
    assert ours == []
    assert all(entry.why and not entry.why.endswith(".") for entry in table.values())


@pytest.mark.parametrize(
    "key",
    [
        "transfer_queue.enable",
        "actor_rollout_ref.rollout.prometheus.port",
        "actor_rollout_ref.model.mtp.speculative_num_steps",
        "reward.reward_model.rollout.enforce_eager",
        "distillation.teacher_models.teacher_model.inference.max_num_seqs",
        "trainer.del_local_ckpt_after_load",
    ],
)
def test_a_key_at_upstreams_default_is_dropped(key: str) -> None:
    """(On the command line, another engine's section is refused by name whatever its value, upstream_engines.py;
    in a YAML file it is accepted at upstream's default, as below.)"""
    default = inert_keys()[key].default
    cfg = _cfg(f"+{key}={_yaml_value(default)}")
    assert OmegaConf.select(cfg, key, default="absent") == "absent"
    assert "transfer_queue" not in cfg  # an emptied section of upstream's own goes with its keys


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("+transfer_queue.enable=true", "transfer_queue.enable=True: the TransferQueue data system is not"),
        ("+trainer.del_local_ckpt_after_load=true", "would lose the only copy"),
        ("+actor_rollout_ref.model.mtp.enable=true", "multi-token prediction"),
        ("+reward.reward_model.rollout.enforce_eager=false", "reward-model server setting"),
        ("+actor_rollout_ref.actor.fsdp_config.seed=7", "set trainer.seed instead"),
    ],
)
def test_another_value_is_refused_naming_key_value_and_default(override: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(override)
    (line,) = err.value.problems
    assert says in line and "upstream's default" in line and line.startswith(override.lstrip("+").split("=")[0])


def test_a_copy_of_another_key_is_accepted_only_as_that_copy() -> None:
    cfg = _cfg(
        "actor_rollout_ref.rollout.n=4",
        "+actor_rollout_ref.ref.rollout_n=4",
        "+critic.forward_max_token_len_per_gpu=32768",
    )
    assert "rollout_n" not in cfg.actor_rollout_ref.ref
    with pytest.raises(
        ConfigError, match=r"actor_rollout_ref\.ref\.rollout_n=2: .*actor_rollout_ref\.rollout\.n's value, 4"
    ):
        _cfg("actor_rollout_ref.rollout.n=4", "+actor_rollout_ref.ref.rollout_n=2")


def test_a_key_that_changes_nothing_here_takes_either_value() -> None:
    for value in ("true", "false"):
        assert "use_torch_compile" not in _cfg(f"+critic.fsdp.use_torch_compile={value}").critic.fsdp_config


def _nested(flat: dict) -> dict:
    tree: dict = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def test_a_yaml_with_every_upstream_default_and_the_legacy_nulls_loads(tmp_path) -> None:
    """A user's YAML copied from upstream's generated config: every table key at its default (copies as the
    interpolations upstream writes), upstream's legacy reward keys as null, reward.reward_model.rollout.name ???."""
    flat = {}
    for key, entry in inert_keys().items():
        flat[key] = f"${{oc.select:{entry.follows},null}}" if entry.follows else entry.default
    for key in ("reward_model.enable", "reward_model.reward_manager", "reward_model.nnodes", "reward_model.model.path",
                "reward_model.rollout.dtype", "custom_reward_function.name", "reward_model.num_workers"):  # fmt: skip
        flat[key] = None
    flat["reward.reward_model.rollout.name"] = "???"
    flat["reward.reward_model.rollout.tensor_model_parallel_size"] = 2  # upstream's default; no reward model served
    flat["data.seed"] = None
    flat["data.train_files"] = "train.parquet"
    path = os.path.join(tmp_path, "my_trainer.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(_nested(flat), f)
    cfg = load_config(config_file=path)
    assert "transfer_queue" not in cfg and "turbo_config" not in cfg.actor_rollout_ref.actor.fsdp_config
    assert cfg.reward_model.enable is False and cfg.reward.reward_model.enable is False  # null: not given
    assert cfg.reward_model.reward_manager == cfg.reward.reward_manager.name == "naive"
    assert cfg.data.seed == cfg.trainer.seed  # upstream's unseeded null: the run's seed here


def test_full_determinism_is_trainer_deterministic() -> None:
    cfg = _cfg("+actor_rollout_ref.actor.fsdp_config.full_determinism=true")
    assert cfg.trainer.deterministic is True and "full_determinism" not in cfg.actor_rollout_ref.actor.fsdp_config
    assert _cfg("+critic.fsdp.full_determinism=false").trainer.deterministic is False
    with pytest.raises(ConfigError, match="one setting here"):
        _cfg("+actor_rollout_ref.rollout.full_determinism=true", "trainer.deterministic=false")


def test_engine_dtype_and_strategy_are_the_workers_keys() -> None:
    cfg = _cfg("+actor_rollout_ref.actor.fsdp_config.dtype=float32", "+critic.fsdp.dtype=bfloat16",
               "+critic.fsdp.strategy=fsdp2")  # fmt: skip
    assert cfg.actor_rollout_ref.actor.dtype == "float32"
    assert cfg.critic.dtype == "bfloat16" and cfg.critic.strategy == "fsdp2"


def test_legacy_null_reward_keys_are_not_given() -> None:
    cfg = _cfg("reward.reward_model.enable=false", "reward_model.enable=null", "reward_model.reward_manager=null")
    assert cfg.reward_model.enable is False and cfg.reward_model.reward_manager == "naive"


def test_ray_timeline_needs_the_ray_backend() -> None:
    assert _cfg("trainer.backend=ray", "ray_kwargs.timeline_json_file=t.json").ray_kwargs.timeline_json_file
    with pytest.raises(ConfigError, match=r"ray_kwargs\.timeline_json_file=t\.json: this run does not use Ray"):
        _cfg("trainer.backend=local", "ray_kwargs.timeline_json_file=t.json")


def test_januarys_defaults_and_sections_are_accepted_too() -> None:
    """verl's January config: its own defaults of a few keys, its top-level reward_manager section (v0.9's
    reward.reward_manager), the legacy reward-model worker's keys and a null micro-batch size when none is served."""
    cfg = _cfg("+actor_rollout_ref.model.mtp.speculative_num_steps=2", "+reward_model.reward_loop_source=register",
               "+reward_manager.name=dapo", "+actor_rollout_ref.rollout.skip_rollout=false",
               "+reward_model.strategy=fsdp", "reward_model.micro_batch_size_per_gpu=null",
               "reward_model.model.fsdp_config.fsdp_size=-1")  # fmt: skip
    assert cfg.reward.reward_manager.name == "dapo" == cfg.reward_model.reward_manager
    assert cfg.reward_model.micro_batch_size_per_gpu == 16 and "skip_rollout" not in cfg.actor_rollout_ref.rollout
    with pytest.raises(ConfigError, match=r"skip_rollout=True: January's rollout dump is v0\.9's skip section"):
        _cfg("+actor_rollout_ref.rollout.skip_rollout=true")
    with pytest.raises(ConfigError, match="the reward model is not sharded here"):
        _cfg("reward_model.model.fsdp_config.fsdp_size=2")


def test_use_liger_turns_the_chunked_head_on_and_critic_remote_code_is_a_security_switch(model_dir_with_code) -> None:
    assert _cfg("actor_rollout_ref.model.use_liger=true").actor_rollout_ref.model.use_fused_kernels is True
    assert _cfg().actor_rollout_ref.model.use_fused_kernels is False
    critic = [f"critic.model.path={model_dir_with_code}", "critic.model.trust_remote_code=true"]
    with pytest.raises(ConfigError, match=r"critic\.model\.trust_remote_code=true runs Python files"):
        _cfg(*critic)
    assert _cfg(*critic, "trainer.allow_unsafe_operations=true").critic.model
    assert _cfg("critic.model.trust_remote_code=true").critic.model.trust_remote_code  # the demo model has no code
