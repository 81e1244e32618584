"""A rollout replica as a Ray actor (verl/trainer/fully_async_policy/replicas.py): a replica whose loop fails reports
its traceback, one whose actor dies is named as dead instead of waited for, and a pool the cluster cannot hold is
refused naming the rollout keys."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

ray = pytest.importorskip("ray")

from verl.trainer.fully_async_policy.placement import rollout_pool  # noqa: E402
from verl.trainer.fully_async_policy.replicas import RayReplica, RolloutWorkerError  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    from verl.single_controller.ray import start_or_join_ray

    if ray.is_initialized():
        ray.shutdown()
    start_or_join_ray(num_cpus=2)
    yield
    ray.shutdown()


def _pool_config(nnodes: int, per_node: int) -> object:
    return OmegaConf.create({"trainer": {"device": "cpu"}, "rollout": {"nnodes": nnodes, "n_gpus_per_node": per_node}})


def _start(pool, container: dict) -> RayReplica:
    replica = RayReplica(0, max_outstanding=2, check_weight_sync=False, pool=pool)
    replica.start(container, ("127.0.0.1", 1, "gloo", 1, 1), False, 0, 0)
    return replica


def _container(model: str) -> dict:
    from verl.trainer.config import load_config

    cfg = load_config([f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=hf"])
    return OmegaConf.to_container(cfg, resolve=True)


def test_a_failing_replica_reports_its_traceback_and_a_killed_one_is_named(local_ray, tiny_model_dir, tmp_path):
    pool = rollout_pool(_pool_config(1, 1))
    try:
        # no such model: the loop fails while loading it and reports why, naming the replica and its node
        failing = _start(pool, _container(str(tmp_path / "missing")))
        with pytest.raises(RolloutWorkerError, match=r"rollout worker 0 \(pid \d+ on node [\d.]+\) failed:\n.*Trace"):
            failing.get("waiting for it to load the model")
        failing.close()
        # loaded, then waiting for the trainer's weight-transfer store (none here): a replica whose actor is gone
        # (killed, out of memory, node lost) is an error at the next read, not a hang
        killed = _start(pool, _container(tiny_model_dir))
        assert killed.get("waiting for it to load the model") == "ready"
        ray.kill(killed.actor)
        with pytest.raises(RolloutWorkerError, match=r"rollout worker 0 .* died \(\w+\) while the trainer was wait"):
            killed.get("waiting for rollouts")
        assert not killed.alive()
        killed.close()
    finally:
        pool.remove()


def test_a_rollout_pool_the_cluster_cannot_hold_names_the_rollout_keys(local_ray) -> None:
    with pytest.raises(RuntimeError, match=r"rollout pool \(rollout.nnodes=1 x rollout.n_gpus_per_node=64.*can never"):
        rollout_pool(_pool_config(1, 64))
