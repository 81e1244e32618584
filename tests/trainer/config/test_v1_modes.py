"""Upstream verl v0.9's V1 trainer modes (trainer.use_v1, trainer.v1.*) resolve onto our trainers and their keys."""

from __future__ import annotations

import pytest

from verl.trainer.config import ConfigError, load_config
from verl.trainer.ppo.runner import async_trainer_cls

BATCH = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]


def _trainer_name(overrides: list[str]) -> str | None:
    cls = async_trainer_cls(load_config(overrides))
    return None if cls is None else cls.__name__


def test_sync_is_the_synchronous_driver_and_the_default() -> None:
    cfg = load_config([])
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "sync"
    assert cfg.async_training.mode is None
    assert async_trainer_cls(cfg) is None
    assert _trainer_name(["trainer.use_v1=false"]) is None
    # the legacy entry points' key still works under the default sync mode
    assert _trainer_name(["async_training.mode=fully_async"]) == "FullyAsyncRayPPOTrainer"


def test_colocate_async_is_one_step_off_or_a_longer_lead() -> None:
    assert _trainer_name(["trainer.v1.trainer_mode=colocate_async"]) == "OneStepOffRayPPOTrainer"
    cfg = load_config(["trainer.v1.trainer_mode=colocate_async", "trainer.v1.colocate_async.num_warmup_batches=3"])
    assert async_trainer_cls(cfg).__name__ == "FullyAsyncRayPPOTrainer"
    assert cfg.async_training.staleness_threshold == 3.0 and cfg.async_training.trigger_parameter_sync_step == 1
    # wait: the rollouter never runs further ahead than max_off_policy_threshold
    cfg = load_config(
        [
            "trainer.v1.trainer_mode=colocate_async",
            "trainer.v1.colocate_async.num_warmup_batches=3",
            "trainer.v1.sampler.max_off_policy_threshold=2",
            "trainer.v1.sampler.max_off_policy_strategy=wait",
        ]
    )
    assert cfg.async_training.staleness_threshold == 2.0


def test_separate_async_is_fully_async_with_upstreams_sync_invariant() -> None:
    cfg = load_config(["trainer.v1.trainer_mode=separate_async", *BATCH])
    assert async_trainer_cls(cfg).__name__ == "FullyAsyncRayPPOTrainer"
    at = cfg.async_training
    assert (at.mode, at.staleness_threshold, at.trigger_parameter_sync_step, at.partial_rollout) == (
        "fully_async",
        1.0,
        1,
        True,
    )
    # unset parameter_sync_step follows train_batch_size / ppo_mini_batch_size (one push per step)
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 2
    with pytest.raises(ConfigError, match=r"parameter_sync_step=3.*data.train_batch_size \(8\)"):
        load_config(
            ["trainer.v1.trainer_mode=separate_async", "trainer.v1.separate_async.parameter_sync_step=3", *BATCH]
        )
    # an explicit partial_rollout=false is kept
    cfg = load_config(["trainer.v1.trainer_mode=separate_async", "async_training.partial_rollout=false", *BATCH])
    assert cfg.async_training.partial_rollout is False


def test_separate_async_rollout_pool_is_the_top_level_rollout_section() -> None:
    """Upstream's e2e script sizes the standalone pool with actor_rollout_ref.rollout.nnodes / n_gpus_per_node."""
    sep = ["trainer.v1.trainer_mode=separate_async", *BATCH]
    cfg = load_config([*sep, "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1"])
    assert (cfg.rollout.nnodes, cfg.rollout.n_gpus_per_node) == (1, 1)
    assert "nnodes" not in cfg.actor_rollout_ref.rollout
    # unset per-node count: upstream's default, the trainer's; the pool is then checked as the asynchronous
    # trainers' (processes on the driver's machine: one node)
    cfg = load_config([*sep, "actor_rollout_ref.rollout.nnodes=1", "trainer.n_gpus_per_node=8"])
    assert (cfg.rollout.nnodes, cfg.rollout.n_gpus_per_node) == (1, 8)
    # a pool across machines is Ray actors beside a trainer on Ray: refused beside one rank in the driver
    with pytest.raises(ConfigError, match=r"rollout.nnodes=2: a rollout pool across machines .* set trainer.backend"):
        load_config([*sep, "actor_rollout_ref.rollout.nnodes=2"])
    assert load_config([*sep, "actor_rollout_ref.rollout.nnodes=2", "trainer.backend=ray"]).rollout.nnodes == 2
    with pytest.raises(ConfigError, match="both size the rollout pool of separate_async"):
        load_config([*sep, "actor_rollout_ref.rollout.nnodes=2", "rollout.nnodes=1"])
    # the synchronous trainer has no standalone pool: refused as before
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.nnodes=1: a standalone rollout pool"):
        load_config(["actor_rollout_ref.rollout.nnodes=1"])


def test_conflicts_and_refusals_are_one_line_each() -> None:
    with pytest.raises(ConfigError, match=r"async_training.mode=one_step_off conflicts with trainer.v1.trainer_mode"):
        load_config(["trainer.v1.trainer_mode=separate_async", "async_training.mode=one_step_off", *BATCH])
    with pytest.raises(ConfigError, match=r"trainer.v1.trainer_mode=sync conflicts with async_training.mode"):
        load_config(["trainer.v1.trainer_mode=sync", "async_training.mode=fully_async"])
    with pytest.raises(ConfigError, match=r"needs trainer.use_v1=true"):
        load_config(["trainer.use_v1=false", "trainer.v1.trainer_mode=separate_async"])
    refused = {
        "trainer.v1.separate_async.hybrid_rollout.enable_switch=true": "enable_switch=true",
        "trainer.v1.sampler.custom_sampler.path=x.py": "custom_sampler",
        "trainer.v1.sampler.sync_refill_failed_groups=true": "sync_refill_failed_groups",
        "trainer.v1.sampler.max_off_policy_threshold=0": "max_off_policy_threshold=0",
    }
    for override, needle in refused.items():
        with pytest.raises(ConfigError) as err:
            load_config(["trainer.v1.trainer_mode=separate_async", override, *BATCH])
        assert len(err.value.problems) == 1 and needle in err.value.problems[0]
