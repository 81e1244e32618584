"""A tensor-parallel rollout replica of the fully asynchronous trainer: one vLLM engine over a Ray worker group of two
ranks (CPU, gloo), driven by its replica actor through the agent loops (``rollout.mode=async``, as upstream v0.9's
async scripts run it), which also validates the last step's weights.

On-policy (``staleness_threshold=0``, a push every step) the rollout's log-probs must equal the trainer's to
float32 noise at every step: measured 6e-7 (``rollout_corr/k3_kl``) when every push reaches both ranks' shards,
0.09 when the engine keeps the previous version's weights (a push one step late), so the bound between them
catches a push that did not land on either rank.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]

ray = pytest.importorskip("ray")

GAP_BOUND = 1e-4  # k3 KL between rollout and trainer log-probs: 6e-7 measured on-policy, 0.09 one version stale


def test_a_tensor_parallel_replica_follows_every_push(tmp_path, monkeypatch) -> None:
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet
    from verl.models.tiny import TinyModelSpec, make_tiny_model_dir
    from verl.trainer.config import load_config
    from verl.trainer.ppo.runner import build_ppo_trainer

    train, test = generate_arithmetic_splits(train_size=16, test_size=2, seed=3)
    write_parquet(train, str(tmp_path / "train.parquet"))
    write_parquet(test, str(tmp_path / "test.parquet"))
    (tmp_path / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return float(len(solution_str))\n"
    )
    # vLLM's CPU attention kernels need head_dim >= 32; two heads split over the two ranks
    spec = TinyModelSpec(arch="qwen2", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    model = make_tiny_model_dir(str(tmp_path / "model"), spec=spec)
    monkeypatch.setenv("VERL_DEVICE", "cpu")  # trainer.device=cpu sets it for the workers; undone after the test
    if ray.is_initialized():
        ray.shutdown()  # a local Ray of its own, with logical CPUs for 2 trainer ranks and 2 engine ranks
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            f"reward.custom_reward_function.path={tmp_path / 'reward.py'}",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "data.max_prompt_length=128",
            "data.max_response_length=6",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.mode=async",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            "async_training.mode=fully_async",
            "async_training.staleness_threshold=0",
            "trainer.device=cpu",
            "trainer.n_gpus_per_node=2",
            "rollout.n_gpus_per_node=2",
            "ray_kwargs.ray_init.num_cpus=4",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            # validated on the replica (through its agent loops) after the last step; the trainer holds no engine
            f"data.val_files={tmp_path / 'test.parquet'}",
            "trainer.test_freq=2",
            "trainer.save_freq=0",
            "trainer.logger=[file]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.report.enable=false",
            f"trainer.default_local_dir={tmp_path / 'out'}",
        ]
    )
    try:
        trainer = build_ppo_trainer(cfg)
        trainer.init_workers()
        trainer.fit()
    finally:
        ray.shutdown()
    (replica,) = trainer.rollouter.replicas
    assert (type(replica).__name__, replica.ranks, trainer.rollouter.served) == ("RayReplica", 2, [2])
    rows = [json.loads(line) for line in Path(trainer.metrics_path).read_text().splitlines()]
    metrics = [r["metrics"] for r in rows if "metrics" in r]
    assert [m["async/weight_version"] for m in metrics] == [0, 1]
    gaps = [m["rollout_corr/k3_kl"] for m in metrics]
    assert all(0 <= gap < GAP_BOUND for gap in gaps), gaps
    assert trainer.worker_roles()["actor_rollout"][1]["role"] == "actor"
    assert metrics[-1]["async/val_weight_version"] == 2 and any(k.startswith("val-core/") for k in metrics[-1])
    # the replica stopped its engine before its ranks were killed: no CPU shared memory of a dead group is left
    from verl.workers.rollout.vllm_cpu_shm import remove_dead_segments

    assert remove_dead_segments() == []
