"""``trainer.resource_pool_spec`` / ``resource_pool_mapping`` validation and ``ray_kwargs.ray_init`` -> ray.init."""

from __future__ import annotations

import pytest

from verl.trainer.config.loader import load_config
from verl.trainer.config.validation import ConfigError


def test_critic_and_reward_model_pools_are_accepted_on_ray() -> None:
    cfg = load_config(
        [
            "trainer.backend=ray",
            "trainer.resource_pool_spec.critic_pool=[2, 2]",
            "trainer.resource_pool_spec.reward_pool=[1]",
            "trainer.resource_pool_mapping.critic=critic_pool",
            "trainer.resource_pool_mapping.rm=reward_pool",
        ]
    )
    assert cfg.trainer.resource_pool_spec.critic_pool == [2, 2]
    assert cfg.trainer.resource_pool_mapping.rm == "reward_pool"


def test_judge_pool_is_accepted_with_the_worker_backend() -> None:
    cfg = load_config(
        [
            "trainer.backend=ray",
            "trainer.resource_pool_spec.judge_pool=[1]",
            "trainer.resource_pool_mapping.judge=judge_pool",
            "reward_model.reward_manager=judge",
            "reward_model.judge.backend=worker",
            "reward_model.judge.model=/models/judge",
        ]
    )
    assert cfg.trainer.resource_pool_mapping.judge == "judge_pool"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.resource_pool_mapping.critic=nope"], "trainer.resource_pool_mapping.critic='nope': no such pool"),
        (
            ["trainer.resource_pool_mapping.verifier=global_pool"],
            "trainer.resource_pool_mapping.verifier: unknown role",
        ),
        (
            [
                "trainer.backend=ray",
                "trainer.resource_pool_spec.judge_pool=[1]",
                "trainer.resource_pool_mapping.judge=judge_pool",
            ],
            "trainer.resource_pool_mapping.judge='judge_pool': only a judge worker group is placed on a pool",
        ),
        (["trainer.resource_pool_spec.critic_pool=[0]"], "trainer.resource_pool_spec.critic_pool=[0]: ranks per"),
        (["trainer.resource_pool_spec.critic_pool=[]"], "trainer.resource_pool_spec.critic_pool=[]: give ranks"),
        (["trainer.resource_pool_spec.global_pool=[2]"], "global_pool is [n_gpus_per_node] x nnodes"),
        (
            [
                "trainer.backend=ray",
                "trainer.resource_pool_spec.p=[1]",
                "trainer.resource_pool_mapping.actor_rollout=p",
            ],
            "actor_rollout='p': the actor/rollout/ref role lives on global_pool",
        ),
        (
            ["trainer.resource_pool_spec.critic_pool=[2]", "trainer.resource_pool_mapping.critic=critic_pool"],
            "pools of more than one rank need separate processes; set trainer.backend=ray",
        ),
    ],
)
def test_bad_pool_settings_are_config_errors_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert message in str(err.value)


def test_ray_init_kwargs_new_local_cluster_and_join(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo.runner import ray_init_kwargs

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("VERL_DEVICE", "cpu")
    local = ray_init_kwargs(
        load_config(["ray_kwargs.ray_init.num_cpus=4", "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS=2"])
    )
    assert "address" not in local and local["num_cpus"] == 4  # nulls left out: ray.init starts a local cluster
    assert local["runtime_env"]["env_vars"] == {
        "TOKENIZERS_PARALLELISM": "false",
        "VERL_DEVICE": "cpu",
        "OMP_NUM_THREADS": "2",
    }
    # joining a running cluster: resources are the cluster's, so ray.init must not get num_cpus
    join = ray_init_kwargs(load_config(["ray_kwargs.ray_init.address=auto", "ray_kwargs.ray_init.num_cpus=4"]))
    assert join["address"] == "auto" and "num_cpus" not in join
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # Ray itself reads it; verl only drops local-only args
    from_env = ray_init_kwargs(load_config(["ray_kwargs.ray_init.num_cpus=4"]))
    assert "address" not in from_env and "num_cpus" not in from_env
