"""Upstream verl v0.9's asynchronous launch layout (verl/experimental/*/shell/*.sh): the top-level rollout pool,
hybrid_engine=false, the streaming batch and total_rollout_steps (verl/trainer/config/async_layout.py), and the
entry points' upstream default configs."""

from __future__ import annotations

import warnings

import pytest

from verl.trainer.config import load_config
from verl.trainer.config.entrypoint import with_default_config
from verl.trainer.config.validation import ConfigError
from verl.utils.errors import ConfigWarning

BASE = ["data.train_files=train.parquet", "trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
FULLY_ASYNC = [*BASE, "async_training.mode=fully_async"]


def test_the_streaming_layout_becomes_batches_of_the_mini_batch() -> None:
    with pytest.warns(ConfigWarning, match="upstream's streaming layout"):
        cfg = load_config([*FULLY_ASYNC, "data.train_batch_size=0", "data.gen_batch_size=1"])
    assert cfg.data.train_batch_size == 4 and cfg.data.gen_batch_size is None


def test_total_rollout_steps_counts_training_steps_as_upstream() -> None:
    layout = [*FULLY_ASYNC, "data.train_batch_size=4", "async_training.require_batches=2"]
    layout += ["async_training.trigger_parameter_sync_step=2", "rollout.total_rollout_steps=100"]
    # 100 prompts // (2 batches x 4 prompts x 2 steps a push) = 6 pushes of 2 steps
    assert load_config(layout).trainer.total_training_steps == 12
    assert load_config([*layout, "trainer.total_training_steps=3"]).trainer.total_training_steps == 3


def test_hybrid_engine_false_is_what_the_async_trainers_do() -> None:
    cfg = load_config([*FULLY_ASYNC, "actor_rollout_ref.hybrid_engine=False", "rollout.nnodes=1"])
    assert cfg.actor_rollout_ref.hybrid_engine is False
    with pytest.raises(ConfigError, match="hybrid_engine=false .* is what the asynchronous trainers do"):
        load_config([*BASE, "actor_rollout_ref.hybrid_engine=False"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([*FULLY_ASYNC, "rollout.nnodes=2"], r"rollout.nnodes=2: .*\(trainer.backend resolves to local\): set trainer"),
        (
            [*FULLY_ASYNC, "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "rollout.n_gpus_per_node=2"],
            r"tensor_model_parallel_size=2: a tensor-parallel rollout replica .* is a Ray worker group, and this",
        ),
        (
            [*FULLY_ASYNC, "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.backend=ray"],
            r"each replica's ranks are on one node, so rollout.n_gpus_per_node=1 must be a multiple of it",
        ),
        ([*BASE, "rollout.n_gpus_per_node=2"], "sizes the asynchronous trainers' rollouter"),
        ([*FULLY_ASYNC, "rollout.total_rollout_steps=0"], "must be >= 1"),
    ],
)
def test_a_rollout_pool_this_project_cannot_place_is_one_line(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(overrides)


def test_a_rollout_pool_of_several_devices_on_one_machine_is_accepted() -> None:
    cfg = load_config([*FULLY_ASYNC, "rollout.n_gpus_per_node=8"])
    assert cfg.rollout.n_gpus_per_node == 8


def test_tensor_parallel_replicas_are_accepted_beside_a_trainer_on_ray() -> None:
    tp = ["actor_rollout_ref.rollout.tensor_model_parallel_size=4", "trainer.n_gpus_per_node=4"]
    cfg = load_config([*FULLY_ASYNC, *tp, "rollout.nnodes=2", "rollout.n_gpus_per_node=8"])
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 4


def test_a_rollout_pool_across_machines_is_accepted_beside_a_trainer_on_ray() -> None:
    cfg = load_config([*FULLY_ASYNC, "rollout.nnodes=2", "trainer.backend=ray"])
    assert (cfg.rollout.nnodes, cfg.trainer.backend) == (2, "ray")
    assert load_config([*FULLY_ASYNC, "rollout.nnodes=4", "trainer.n_gpus_per_node=2"]).rollout.nnodes == 4


def test_the_trainers_ranks_hold_an_engine_only_to_validate_on_them() -> None:
    from verl.trainer.config.async_layout import engine_on_actor_ranks

    tp = ["actor_rollout_ref.rollout.tensor_model_parallel_size=4", "rollout.n_gpus_per_node=4"]
    layout = [*FULLY_ASYNC, *tp, "trainer.backend=ray", "trainer.n_gpus_per_node=2"]
    # the engines are the rollouter's: their size need not divide the trainer's two ranks
    assert not engine_on_actor_ranks(load_config(layout))
    with pytest.raises(ConfigError, match="tensor_model_parallel_size=4 must divide the number of actor ranks"):
        load_config([*layout, "async_training.use_trainer_do_validate=true"])
    assert engine_on_actor_ranks(load_config(BASE))  # synchronous: the hybrid engine


def test_validation_between_two_pushes_is_warned() -> None:
    layout = [*FULLY_ASYNC, "async_training.trigger_parameter_sync_step=2"]
    with pytest.warns(ConfigWarning, match="test_freq=3 is not a multiple of .*trigger_parameter_sync_step=2"):
        load_config([*layout, "trainer.test_freq=3"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config([*layout, "trainer.test_freq=4"])
        load_config([*layout, "trainer.test_freq=3", "async_training.use_trainer_do_validate=true"])


def test_the_engine_sections_strategy_is_the_workers_strategy() -> None:
    cfg = load_config(
        [*BASE, "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2", "critic.fsdp_config.strategy=fsdp2"]
    )
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and cfg.critic.strategy == "fsdp2"


def test_the_async_entry_points_start_from_upstreams_default_configs() -> None:
    assert with_default_config(["a.b=1"], "fully_async_ppo_trainer") == ["--config-name", "fully_async_ppo_trainer"]
    for named in (["--config-name=x"], ["-cn", "x"], ["--config", "f.yaml"], ["--config-path=config", "-cn=x"]):
        assert with_default_config(named, "fully_async_ppo_trainer") == []
    cfg = load_config(BASE, config_name="fully_async_ppo_trainer")
    at = cfg.async_training
    assert at.mode == "fully_async" and at.trigger_parameter_sync_step == 4 and at.partial_rollout
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs and cfg.algorithm.rollout_correction.bypass_mode
    # upstream's _mis scripts add importance weights to that bypass loss
    assert load_config([*BASE, "algorithm.rollout_correction.rollout_is=token"], config_name="fully_async_ppo_trainer")
    off = load_config(BASE, config_name="one_step_off_ppo_trainer")
    assert off.async_training.mode == "one_step_off" and not off.actor_rollout_ref.rollout.free_cache_engine


def test_verl_januarys_rollouter_keys_land_on_the_trainers() -> None:
    """verl (January 2026) fully_async scripts: rollout.total_epochs, rollout.test_freq (in weight versions) and
    async_training.compute_prox_log_prob."""
    jan = [
        *FULLY_ASYNC,
        "async_training.trigger_parameter_sync_step=4",
        "rollout.total_epochs=3",
        "rollout.test_freq=2",
    ]
    cfg = load_config([*jan, "async_training.compute_prox_log_prob=True"], config_name="fully_async_ppo_trainer")
    assert cfg.trainer.total_epochs == 3 and cfg.trainer.test_freq == 8  # 2 pushes x 4 steps
    assert cfg.algorithm.rollout_correction.bypass_mode is False  # the old log-probs are recomputed
    assert load_config([*jan, "trainer.test_freq=5"]).trainer.test_freq == 5  # the trainer's own key wins
    with pytest.raises(ConfigError, match="compute_prox_log_prob=true recomputes the old log-probs"):
        load_config(
            [*jan, "async_training.compute_prox_log_prob=True", "algorithm.rollout_correction.bypass_mode=true"]
        )
