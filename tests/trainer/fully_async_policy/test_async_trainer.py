"""The asynchronous trainers end to end on a tiny model, with the rollouter in a second process.

- staleness 0 reproduces the synchronous run on the same seed (same batches, same losses, the same validation
  figures, though validation runs on the rollouter and the trainer's ranks hold no engine) and every sample is
  stamped with the weight version the trainer holds when it trains on it (on-policy for real);
- with staleness 1 and partial rollouts every consumed sample's staleness is logged and within the bound, and a run
  resumed from its step-2 checkpoint trains on the same prompts, in the same order, as the uninterrupted run;
- one-step-off trains on batches exactly one version old, with use_rollout_log_probs on the rollouter's own
  log-probs as the old policy; a killed rollout worker stops the run with RolloutWorkerError, not a hang.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
from verl.trainer.config import load_config
from verl.trainer.ppo.runner import build_ppo_trainer

REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
"""
# measured: the losses of the two runs agree to the last bit on CPU fp32 (same seed, same weights, same kernels);
# the tolerance leaves room for summation-order noise on other hardware
LOSS_TOL = 1e-6


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("async_task")
    train, test = generate_arithmetic_splits(train_size=24, test_size=3, seed=3)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "test": str(root / "test.parquet"), "reward": str(root / "reward.py")}


def _config(model: str, task: dict[str, str], out: Path, steps: int, extra: list[str]) -> DictConfig:
    return load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={task['train']}",
            f"custom_reward_function.path={task['reward']}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            "data.max_response_length=6",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.seed=5",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            "trainer.resume_mode=auto",
            f"trainer.default_local_dir={out}",
            *extra,
        ]
    )


def _train(cfg: DictConfig):
    trainer = build_ppo_trainer(cfg)
    trainer.init_workers()
    trainer.fit()
    rows = [json.loads(line) for line in Path(trainer.metrics_path).read_text().splitlines()]
    return trainer, [r["metrics"] for r in rows if "metrics" in r]


def _validating(task: dict[str, str], test_freq: int) -> list[str]:
    return [f"data.val_files={task['test']}", "trainer.val_before_train=true", f"trainer.test_freq={test_freq}"]


def _val_core(trainer) -> list[tuple[int, dict[str, float]]]:
    return [(step, {k: v for k, v in m.items() if k.startswith("val-core/")}) for step, m in trainer.val_history]


def test_staleness_zero_reproduces_the_synchronous_run(tiny_model_dir, task, tmp_path):
    validating = _validating(task, 2)
    synchronous, sync = _train(_config(tiny_model_dir, task, tmp_path / "sync", 3, validating))
    trainer, fully = _train(
        _config(
            tiny_model_dir,
            task,
            tmp_path / "async",
            3,
            ["async_training.mode=fully_async", "async_training.staleness_threshold=0", *validating],
        )
    )
    # validated on the rollouter (the trainer's rank holds no engine) before training, after step 2 (the weights
    # pushed after it) and after step 3 (pushed for the validation): the synchronous run's figures exactly
    assert trainer.worker_roles()["actor_rollout"][1]["role"] == "actor"
    assert [step for step, _ in _val_core(trainer)] == [0, 2, 3]
    assert _val_core(trainer) == _val_core(synchronous) and all(m for _, m in _val_core(trainer))
    assert trainer.val_history[-1][1]["async/val_weight_version"] == 3
    sync, fully = ([m for m in rows if "actor/pg_loss" in m] for rows in (sync, fully))
    assert len(sync) == len(fully) == 3
    for a, b in zip(sync, fully):
        assert a["critic/score/mean"] == b["critic/score/mean"]
        assert a["response_length/mean"] == b["response_length/mean"]
        assert abs(a["actor/pg_loss"] - b["actor/pg_loss"]) <= LOSS_TOL
        assert abs(a["actor/grad_norm"] - b["actor/grad_norm"]) <= LOSS_TOL * max(1.0, abs(a["actor/grad_norm"]))
        assert b["async/staleness/max"] == 0
    # on-policy for real: the batch of step s was generated with the weights after s - 1 updates
    for record in trainer.consumed_log:
        assert set(record["versions"]) == {record["step"] - 1}


@pytest.mark.slow
def test_staleness_bound_logged_and_resume_keeps_the_data_order(tiny_model_dir, task, tmp_path):
    extra = [
        "async_training.mode=fully_async",
        "async_training.staleness_threshold=1",
        "async_training.partial_rollout=true",
        # validation after step 2, with a batch in flight on the rollouter: answered after it, order kept
        f"data.val_files={task['test']}",
        "trainer.test_freq=2",
    ]
    full, metrics = _train(_config(tiny_model_dir, task, tmp_path / "full", 4, extra))
    assert [step for step, _ in full.val_history] == [2, 4]
    metrics = [m for m in metrics if "async/staleness/max" in m]
    staleness = [m["async/staleness/max"] for m in metrics]
    assert len(staleness) == 4 and max(staleness) <= 1
    # one version ahead: the rollouter used its allowance (a batch it had not started before a push would be 0)
    assert staleness[0] == 0 and 1 in staleness[1:]
    for record in full.consumed_log:
        assert all(record["step"] - 1 - v <= 1 for v in record["versions"])

    # the same run stopped after a checkpoint at step 2 (two batches still in flight) and resumed
    first, _ = _train(_config(tiny_model_dir, task, tmp_path / "cut", 2, [*extra, "trainer.save_freq=1"]))
    resumed, _ = _train(_config(tiny_model_dir, task, tmp_path / "cut", 4, [*extra, "trainer.save_freq=1"]))
    assert [r["step"] for r in resumed.consumed_log] == [3, 4]
    order = [r["prompts"] for r in first.consumed_log + resumed.consumed_log]
    assert order == [r["prompts"] for r in full.consumed_log]


def test_one_step_off_and_a_killed_rollout_worker(tiny_model_dir, task, tmp_path):
    from verl.trainer.fully_async_policy.rollouter import RolloutWorkerError

    cfg = _config(
        tiny_model_dir,
        task,
        tmp_path / "osop",
        5,
        [
            "async_training.mode=one_step_off",
            "async_training.use_rollout_log_probs=true",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
        ],
    )
    trainer = build_ppo_trainer(cfg)
    trainer.init_workers()
    seen: list[float] = []
    old_is_rollout: list[bool] = []

    def kill_after_two(step: int, metrics: dict[str, float]) -> None:
        seen.append(metrics["async/staleness/max"])
        # use_rollout_log_probs: the old policy of the update is the rollouter's own log-probs (bypass mode)
        batch = trainer.last_batch.batch
        old_is_rollout.append(bool(torch.equal(batch["old_log_probs"], batch["rollout_log_probs"])))
        if step == 2:
            os.kill(trainer.rollouter.pid, signal.SIGKILL)

    trainer.step_hooks.append(kill_after_two)
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            trainer.fit()
        except BaseException as err:  # noqa: BLE001 - examined below
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the trainer hung after its rollout worker was killed"
    assert isinstance(outcome.get("error"), RolloutWorkerError)
    assert "exited with code -9" in str(outcome["error"])
    assert seen == [0, 1]  # batch 1 from the initial weights, batch 2 one version old
    assert old_is_rollout == [True, True]


@pytest.mark.slow
def test_two_trainer_ranks_and_a_rollout_pool_on_two_nodes(tiny_model_dir, task, tmp_path, monkeypatch):
    """Fully asynchronous training with the trainer's two ranks as Ray actors (FSDP across them) and a rollout pool
    of two Ray actors, one on each of two rollout "nodes" (a placement group each; one machine here): batches
    alternate between the replicas, rank 0's one push per version reaches both, and after every push each engine
    holds exactly what was sent (rollout.check_weight_sync compares the digests, else the run raises)."""
    import ray

    from verl.trainer.fully_async_policy.rollouter import Rollouter

    served: list[list[int]] = []
    real_close = Rollouter.close

    def close(self: Rollouter) -> None:
        served.append(list(self.served))
        real_close(self)

    monkeypatch.setattr(Rollouter, "close", close)
    # trainer.device=cpu sets VERL_DEVICE in this process for the workers to inherit; undone after the test
    monkeypatch.setenv("VERL_DEVICE", "cpu")
    if ray.is_initialized():
        ray.shutdown()  # this run starts its own local Ray, with logical CPUs for 2 ranks and 2 replicas
    extra = [
        "async_training.mode=fully_async",
        "async_training.staleness_threshold=1",
        "trainer.n_gpus_per_node=2",
        "rollout.nnodes=2",
        "rollout.n_gpus_per_node=1",
        "ray_kwargs.ray_init.num_cpus=4",
        "trainer.device=cpu",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.check_weight_sync=true",
        # validation split over the two replicas, after step 1 with step 2's batch in flight on one of them
        f"data.val_files={task['test']}",
        "trainer.test_freq=1",
    ]
    try:
        trainer, metrics = _train(_config(tiny_model_dir, task, tmp_path / "out", 2, extra))
    finally:
        ray.shutdown()
    assert trainer.actor_rollout_wg.world_size == 2
    assert len(metrics) == 2 and metrics[-1]["async/weight_version"] == 1  # step 2 trained after a push
    assert [m["async/val_weight_version"] for m in metrics] == [1, 2]  # the last step's weights pushed to validate
    assert all(any(k.startswith("val-core/") for k in m) for m in metrics)
    assert any(m.get("async/param_sync_bytes", 0) > 0 for m in metrics)
    assert len(served) == 1 and len(served[0]) == 2 and min(served[0]) >= 1  # both replicas generated
    assert [type(r).__name__ for r in trainer.rollouter.replicas] == ["RayReplica", "RayReplica"]
    assert {r.pid for r in trainer.rollouter.replicas}.isdisjoint({os.getpid()})
