"""Scale-out on a real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: two raylets on
127.0.0.1, each with its own 2 logical CPUs).

* GRPO with FSDP2 over 4 ranks (2 per node) updates the actor exactly like 1 rank on the same batch;
* PPO's critic placed on its own resource pool lands on the other node and trains;
* a run that cannot get its resources stops at once (or after the placement timeout) saying what it asked for;
* a worker SIGKILLed in the middle of a step, or in the middle of a checkpoint save, stops the driver quickly with
  an error naming role, rank and node, and ``resume_mode=auto`` continues from the last complete checkpoint.

There is no local multi-process backend (the local backend runs one rank inside the driver), so the fault tests
run on Ray only.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")

# Measured (2-core AMD EPYC, fp32, gloo): 4-rank vs 1-rank old log-probs and first-step loss agree exactly (0.0),
# the parameter changes (up to 0.12, see the eps = lr trick below) differ by at most 1.5e-8 (reduction order of
# the reduce-scatter). The bounds leave room for other CPUs' summation orders.
LOSS_ATOL = 1e-6
PARAM_ATOL = 5e-7
RESPONSE_LEN = 6
PROMPT_LEN = 5
BATCH = 8  # 4 prompts x 2 responses (GRPO groups); 2 rows per rank on 4 ranks
RESPONSE_LENGTHS = [1, 2, 1, 2, 6, 6, 5, 6]
# written by a worker just before it SIGKILLs itself (a module global: pickled by value into the workers)
KILL_STAMP = os.path.join(tempfile.gettempdir(), f"verl_test_kill_{os.getpid()}.txt")


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """Two Ray nodes on 127.0.0.1 with 2 CPUs each; the driver joins by address (as on a real cluster)."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # a local Ray left by another module: this module needs its own two-node cluster
        ray.shutdown()
    old_device = os.environ.get("VERL_DEVICE")
    os.environ["VERL_DEVICE"] = "cpu"
    # Ray's memory monitor kills workers when the *machine* is 95% full; on a shared test machine that is other
    # people's memory, and a killed worker here would be a false failure (the raylets inherit this variable)
    old_monitor = os.environ.get("RAY_memory_monitor_refresh_ms")
    os.environ["RAY_memory_monitor_refresh_ms"] = "0"
    # the workers at the driver's priority, as a local Ray verl starts (Ray's default niceness 15 starves them on
    # a busy test machine)
    old_niceness = os.environ.get("RAY_worker_niceness")
    os.environ["RAY_worker_niceness"] = "0"
    from verl.single_controller.ray import keep_ray_on_loopback

    # both raylets and the GCS on 127.0.0.1 only, as a single-machine run (the variable reaches the raylets)
    assert keep_ray_on_loopback()
    two_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0})
    two_nodes.add_node(num_cpus=2, num_gpus=0)
    two_nodes.wait_for_nodes()
    # the driver joins through the config key a run uses (ray_kwargs.ray_init.address), not a bare ray.init
    from verl.trainer.config.loader import load_config
    from verl.trainer.ppo.runner import init_ray

    init_ray(
        load_config(
            [
                f"ray_kwargs.ray_init.address={two_nodes.address}",
                "ray_kwargs.ray_init.num_cpus=64",  # dropped when joining: the cluster's resources are fixed
                "+ray_kwargs.ray_init.log_to_driver=false",
                "+ray_kwargs.ray_init.configure_logging=false",
                "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS=1",
                "+ray_kwargs.ray_init.runtime_env.env_vars.MKL_NUM_THREADS=1",
            ]
        )
    )
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2 and ray.cluster_resources()["CPU"] == 4
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield two_nodes
    ray.shutdown()
    two_nodes.shutdown()
    if old_niceness is None:
        os.environ.pop("RAY_worker_niceness", None)
    else:
        os.environ["RAY_worker_niceness"] = old_niceness
    if old_monitor is None:
        os.environ.pop("RAY_memory_monitor_refresh_ms", None)
    else:
        os.environ["RAY_memory_monitor_refresh_ms"] = old_monitor
    if old_device is None:
        os.environ.pop("VERL_DEVICE", None)
    else:
        os.environ["VERL_DEVICE"] = old_device


# ------------------------------------------------------------------------------------------ 4 ranks == 1 rank
def _worker_config(model_dir: str, n_per_node: int, nnodes: int):
    from verl.trainer.config.loader import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.n=2",
            f"data.train_batch_size={BATCH // 2}",
            f"data.max_response_length={RESPONSE_LEN}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH // 2}",  # one optimizer step over the whole batch
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.actor.grad_clip=0.0",
            # AdamW's first step is -lr * g / (|g| + eps): with eps = lr = 1e4 the parameter change is -g itself
            "actor_rollout_ref.actor.optim.lr=10000.0",
            "actor_rollout_ref.actor.optim.eps=10000.0",
            "actor_rollout_ref.actor.loss_agg_mode=token-mean",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            "algorithm.adv_estimator=grpo",
            f"trainer.n_gpus_per_node={n_per_node}",
            f"trainer.nnodes={nnodes}",
            "trainer.device=cpu",
        ]
    )


def _grpo_batch() -> dict[str, torch.Tensor]:
    """Fixed prompts (each twice: a GRPO group), responses of unequal lengths, outcome scores -> GRPO advantages."""
    from verl.algorithms.advantage import compute_grpo_outcome_advantage

    gen = torch.Generator().manual_seed(321)
    prompts = torch.randint(0, 256, (BATCH // 2, PROMPT_LEN), generator=gen).repeat_interleave(2, dim=0)
    responses = torch.full((BATCH, RESPONSE_LEN), 256)
    response_mask = torch.zeros(BATCH, RESPONSE_LEN, dtype=torch.long)
    for i, n in enumerate(RESPONSE_LENGTHS):
        responses[i, :n] = torch.randint(0, 256, (n,), generator=gen)
        response_mask[i, :n] = 1
    attention_mask = torch.cat([torch.ones_like(prompts), response_mask], dim=1)
    rewards = torch.zeros(BATCH, RESPONSE_LEN)
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 0.2, 0.9])
    rewards[torch.arange(BATCH), torch.tensor(RESPONSE_LENGTHS) - 1] = scores
    advantages, _ = compute_grpo_outcome_advantage(rewards, response_mask, [i // 2 for i in range(BATCH)])
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "advantages": advantages,
    }


def _proto(batch: dict[str, torch.Tensor]):
    from verl.protocol import DataProto

    return DataProto.from_dict(tensors={k: v.clone() for k, v in batch.items()}, meta_info={"global_steps": 1})


def test_grpo_four_ranks_on_two_nodes_match_one_rank(cluster, tiny_model_dir: str, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from verl.model_merger import load_full_state_dict
    from verl.single_controller import create_colocated_worker_groups
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    initial = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    batch = _grpo_batch()
    assert batch["advantages"].abs().sum() > 0
    results = {}
    for backend, n_per_node, nnodes in (("local", 1, 1), ("ray", 2, 2)):
        cfg = _worker_config(tiny_model_dir, n_per_node, nnodes)
        groups = create_colocated_worker_groups(
            backend,
            {"actor_rollout": (ActorRolloutRefWorker, {"config": cfg.actor_rollout_ref, "role": "actor_rollout"})},
            world_size=n_per_node * nnodes,
            nnodes=nnodes,
        )
        group = groups["actor_rollout"]
        try:
            if backend == "ray":  # ranks 0-1 on one node, 2-3 on the other
                nodes = [node_id for node_id, _ in group.worker_nodes]
                assert nodes[0] == nodes[1] != nodes[2] == nodes[3]
            group.init_model()
            scoring = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids", "responses")}
            old = group.compute_log_prob(_proto(scoring)).batch["old_log_probs"]
            data = _proto({**batch, "old_log_probs": old})
            metrics = group.update_actor(data).meta_info["metrics"]
            out = tmp_path / f"ckpt_{backend}"
            group.save_checkpoint(str(out))
            params = load_full_state_dict(str(out))
        finally:
            group.shutdown()
        results[backend] = (old, sum(metrics["actor/pg_loss"]) / len(metrics["actor/pg_loss"]), params)

    (old1, loss1, params1), (old4, loss4, params4) = results["local"], results["ray"]
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(old4[mask], old1[mask], atol=1e-5, rtol=0)
    # ratio 1 at the first step: the token-mean loss is minus the token-mean advantage, known without a model
    expected = -float((batch["advantages"] * batch["response_mask"]).sum() / batch["response_mask"].sum())
    assert loss1 == pytest.approx(expected, abs=LOSS_ATOL)
    assert loss4 == pytest.approx(loss1, abs=LOSS_ATOL)
    largest = 0.0
    for name, start in initial.items():
        delta1, delta4 = params1[name] - start, params4[name] - start
        largest = max(largest, float(delta1.abs().max()))
        torch.testing.assert_close(delta4, delta1, atol=PARAM_ATOL, rtol=0, msg=name)
    assert largest > 1e-3  # the update is far above the tolerance, so the comparison means something


# --------------------------------------------------------------------------------------- resources not there
def test_a_pool_the_cluster_cannot_hold_fails_at_once_naming_request_and_cluster(cluster) -> None:
    from verl.single_controller.ray import RayResourcePool

    pool = RayResourcePool(process_on_nodes=[3, 3], use_gpu=False, name_prefix="too_big", placement_timeout_s=600)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        pool.get_placement_groups()
    assert time.monotonic() - start < 10  # no waiting for resources that can never appear
    message = str(err.value)
    assert "asked for process_on_nodes=[3, 3]" in message and "'CPU': 1.0" in message
    assert "2 alive node(s)" in message and "'CPU': 2.0" in message and "the cluster can never hold it" in message


def test_a_pool_blocked_by_busy_resources_stops_after_the_placement_timeout(cluster) -> None:
    from ray.util.placement_group import placement_group, remove_placement_group

    from verl.single_controller.ray import RayResourcePool

    hog = placement_group([{"CPU": 2.0}], strategy="STRICT_PACK")  # one whole node taken by someone else
    ray.get(hog.ready())
    try:
        pool = RayResourcePool(process_on_nodes=[2, 2], use_gpu=False, name_prefix="busy", placement_timeout_s=3)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"not ready after 3s.*free"):
            pool.get_placement_groups()
        assert time.monotonic() - start < 30
    finally:
        remove_placement_group(hog)


# ------------------------------------------------------------------------------------ trainer on the cluster
REWARD_SOURCE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(1 for ch in solution_str if ch.isdigit()) / max(len(solution_str), 1)
"""


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from verl.data.arithmetic_task import generate_arithmetic_splits, write_parquet

    root = tmp_path_factory.mktemp("ray_cluster_task")
    train, test = generate_arithmetic_splits(train_size=8, test_size=2, seed=4)
    write_parquet(train, str(root / "train.parquet"))
    write_parquet(test, str(root / "test.parquet"))
    (root / "reward.py").write_text(REWARD_SOURCE)
    return {"train": str(root / "train.parquet"), "reward": str(root / "reward.py")}


def _run_config(model_dir: str, files: dict[str, str], out: Path, extra: list[str]):
    from verl.trainer.config.loader import load_config

    return load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            f"data.train_files={files['train']}",
            f"custom_reward_function.path={files['reward']}",
            "data.train_batch_size=2",
            "data.max_prompt_length=128",
            "data.max_response_length=3",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.dtype=float32",
            "actor_rollout_ref.rollout.dtype=float32",
            "trainer.val_before_train=false",
            "trainer.logger=[console]",
            "trainer.export_hf=false",
            "trainer.plot=false",
            "trainer.device=cpu",
            "trainer.backend=ray",
            f"trainer.default_local_dir={out}",
            *extra,
        ]
    )


def _shutdown(trainer) -> None:
    for group in {id(g): g for g in trainer.worker_groups.values()}.values():
        group.shutdown()


def test_ppo_critic_on_its_own_pool_lands_on_the_second_node(cluster, tiny_model_dir, task_files, tmp_path) -> None:
    from verl.trainer.ppo.runner import build_ppo_trainer

    cfg = _run_config(
        tiny_model_dir,
        task_files,
        tmp_path / "ppo",
        [
            "algorithm.adv_estimator=gae",
            f"critic.model.path={tiny_model_dir}",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "trainer.n_gpus_per_node=2",
            "trainer.resource_pool_spec.critic_pool=[2]",
            "trainer.resource_pool_mapping.critic=critic_pool",
            "trainer.total_training_steps=1",
            "trainer.save_freq=-1",
        ],
    )
    trainer = build_ppo_trainer(cfg)
    trainer.init_workers()
    try:
        actor_nodes = {node for node, _ in trainer.actor_rollout_wg.worker_nodes}
        critic_nodes = {node for node, _ in trainer.critic_wg.worker_nodes}
        assert len(actor_nodes) == 1 and len(critic_nodes) == 1 and actor_nodes != critic_nodes
        assert trainer.critic_wg.workers != trainer.actor_rollout_wg.workers  # separate processes
        steps: list[tuple[int, dict[str, float]]] = []
        trainer.step_hooks.append(lambda step, metrics: steps.append((step, metrics)))
        trainer.fit()
        assert [step for step, _ in steps] == [1]
        assert "critic/vf_loss" in steps[0][1] and "actor/pg_loss" in steps[0][1]  # both pools trained
    finally:
        _shutdown(trainer)


# --------------------------------------------------------------------------------------------------- faults
def _kill_self(where: str) -> None:
    with open(KILL_STAMP, "w") as f:
        f.write(f"{where} {time.time()}")
    os.kill(os.getpid(), 9)


def _kill_workers():
    """Worker classes whose rank 1 SIGKILLs itself at step 2: in the middle of the update (rank 0 is then blocked in
    the gradient all-reduce) or in the middle of the checkpoint save (rank 0 is writing)."""
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    class DiesInUpdate(ActorRolloutRefWorker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def update_actor(self, data):
            if self.rank == 1 and int(data.meta_info.get("global_steps", 0)) == 2:
                _kill_self("update_actor")
            return super().update_actor(data)

    class DiesInSave(ActorRolloutRefWorker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def save_checkpoint(self, local_path, global_step=0, save_contents=None):
            if self.rank == 1 and int(global_step) == 2:
                _kill_self("save_checkpoint")
            return super().save_checkpoint(local_path, global_step, save_contents)

    return DiesInUpdate, DiesInSave


def test_worker_killed_mid_step_and_mid_save_then_resume(cluster, tiny_model_dir, task_files, tmp_path) -> None:
    from verl.checkpoint.layout import require_intact
    from verl.single_controller.ray import WorkerDiedError
    from verl.trainer.ppo.runner import build_ppo_trainer

    out = tmp_path / "grpo"
    extra = [
        "algorithm.adv_estimator=grpo",
        "trainer.nnodes=2",  # one rank on each node
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=2",
        "trainer.save_freq=1",
    ]
    dies_in_update, dies_in_save = _kill_workers()
    step1 = out / "global_step_1"
    for cls, where in ((dies_in_update, "update_actor"), (dies_in_save, "save_checkpoint")):
        trainer = build_ppo_trainer(_run_config(tiny_model_dir, task_files, out, extra), {"actor_rollout": cls})
        trainer.init_workers()
        node_ips = [ip for _, ip in trainer.actor_rollout_wg.worker_nodes]
        try:
            with pytest.raises(WorkerDiedError) as err:
                trainer.fit()
            stopped = time.time()
        finally:
            _shutdown(trainer)
        stamp_where, killed_at = Path(KILL_STAMP).read_text().split()
        assert stamp_where == where
        print(f"killed in {where}: the driver stopped {stopped - float(killed_at):.1f}s later")  # shown with -s
        assert stopped - float(killed_at) < 60, f"driver took {stopped - float(killed_at):.1f}s to stop"
        assert err.value.role == "actor_rollout" and err.value.rank == 1 and err.value.node_ip == node_ips[1]
        assert f"worker 'actor_rollout' rank 1 of 2 on node {node_ips[1]}" in str(err.value)
        # the step-1 checkpoint is intact; no step-2 directory (not even a partial one) exists
        require_intact(str(step1))
        assert not (out / "global_step_2").exists()
        assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
        if where == "save_checkpoint":  # this run had resumed from step 1 before dying in its own save
            assert trainer.resumed_from == str(step1)
    os.remove(KILL_STAMP)

    trainer = build_ppo_trainer(_run_config(tiny_model_dir, task_files, out, extra))
    trainer.init_workers()
    try:
        trainer.fit()
    finally:
        _shutdown(trainer)
    assert trainer.resumed_from == str(step1)
    require_intact(str(out / "global_step_2"))
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
