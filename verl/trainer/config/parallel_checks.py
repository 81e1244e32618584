"""Cross-field checks of how a PPO config is placed and which of verl's values this implementation runs.

* placement: ``trainer.backend`` against the number of ranks, Ulysses sequence-parallel sizes and ``fsdp_size``
  against the world size;
* implemented values: keys verl scripts set whose other values select machinery that does not exist here
  (``actor.strategy=megatron``, ``hybrid_engine=false``) are
  errors that say so, instead of being accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config.strategies import IMPLEMENTED_STRATEGIES  # noqa: F401  (importable from here as before)


def world_size(cfg: DictConfig) -> int:
    """``trainer.nnodes * trainer.n_gpus_per_node``: the number of ranks of every worker group."""
    return cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node


def resolve_backend(trainer_cfg: Mapping[str, Any]) -> str:
    """The single-controller backend a run uses: ``trainer.backend``, with ``auto`` resolved to ``local`` for one
    rank (no Ray needed) and ``ray`` for more (ranks are separate processes that form a torch.distributed group)."""
    backend = trainer_cfg.backend
    if backend != "auto":
        return backend
    ranks = trainer_cfg.nnodes * trainer_cfg.n_gpus_per_node
    return "local" if ranks == 1 else "ray"


def sp_size(section: Any) -> int:
    """``ulysses_sequence_parallel_size`` of an actor / ref / critic section (a null reads as 1: no splitting)."""
    return int(section.ulysses_sequence_parallel_size or 1)


def check_ray_timeline(cfg: DictConfig, errors: list[str]) -> None:
    """``ray_kwargs.timeline_json_file`` is Ray's record of the run's tasks: it needs the ``ray`` backend."""
    path = cfg.ray_kwargs.timeline_json_file
    if path and resolve_backend(cfg.trainer) != "ray":
        errors.append(
            f"ray_kwargs.timeline_json_file={path}: this run does not use Ray (trainer.backend resolves to "
            f"{resolve_backend(cfg.trainer)} for {cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node} rank), so there "
            "is no Ray timeline; set trainer.backend=ray, or drop it"
        )


def check_placement(cfg: DictConfig, errors: list[str]) -> None:
    """Backend versus rank count (and the Ray timeline), sequence-parallel sizes and FSDP group sizes versus the
    world size."""
    check_ray_timeline(cfg, errors)
    world = world_size(cfg)
    expr = f"trainer.nnodes * trainer.n_gpus_per_node = {cfg.trainer.nnodes} * {cfg.trainer.n_gpus_per_node}"
    if cfg.trainer.backend == "local" and world > 1:
        errors.append(
            f"trainer.backend=local runs every rank inside the driver process, where ranks cannot form a "
            f"torch.distributed group, so {expr} = {world} ranks cannot run on it; set trainer.backend=auto (or "
            f"ray) to start one process per rank, or trainer.n_gpus_per_node=1 trainer.nnodes=1"
        )
    arr = cfg.actor_rollout_ref
    for path, section in (
        ("actor_rollout_ref.actor", arr.actor),
        ("actor_rollout_ref.ref", arr.ref),
        ("critic", cfg.critic),
    ):
        sp = sp_size(section)
        if sp < 1:
            errors.append(f"{path}.ulysses_sequence_parallel_size={sp} must be >= 1 (1: no sequence parallelism)")
        elif world % sp != 0:
            errors.append(
                f"{path}.ulysses_sequence_parallel_size={sp} does not divide the world size {expr} = {world}; "
                f"sequence-parallel groups are {sp} consecutive ranks"
            )
    check_resource_pools(cfg, errors)
    for path, section in (
        ("actor_rollout_ref.actor.fsdp_config", arr.actor.fsdp_config),
        ("actor_rollout_ref.ref.fsdp_config", arr.ref.fsdp_config),
        ("critic.fsdp_config", cfg.critic.fsdp_config),
    ):
        size = int(section.fsdp_size)
        if size == -1 or size >= world:  # upstream's rule: a group of at least the world is every rank (plain FSDP)
            continue
        if size < 1 or world % size != 0:
            errors.append(
                f"{path}.fsdp_size={size} must be -1 or at least the world size (shard over all ranks) or a "
                f"positive divisor of the world size "
                f"{expr} = {world}: parameters are sharded within groups of fsdp_size ranks and replicated across "
                f"the world / fsdp_size groups"
            )


# the roles a PPO run places on resource pools (the keys of trainer.resource_pool_mapping)
POOL_ROLES = ("actor_rollout", "critic", "rm", "teacher", "judge")


def check_resource_pools(cfg: DictConfig, errors: list[str]) -> None:
    """``trainer.resource_pool_spec`` / ``resource_pool_mapping``: pool sizes, role and pool names, backend.

    The actor (with rollout and reference) stays on ``global_pool``, whose size every batch-size check uses; the
    critic, reward model, teacher and judge (``reward_model.judge.backend=worker``) may move to pools of their own.
    """
    from omegaconf import OmegaConf

    spec = OmegaConf.to_container(cfg.trainer.get("resource_pool_spec") or DictConfig({}), resolve=True)
    mapping = OmegaConf.to_container(cfg.trainer.get("resource_pool_mapping") or DictConfig({}), resolve=True)
    pools = {"global_pool", *spec}
    for name, sizes in spec.items():
        if name == "global_pool":
            errors.append(
                "trainer.resource_pool_spec.global_pool: global_pool is [n_gpus_per_node] x nnodes; set those keys"
            )
        elif not isinstance(sizes, list) or not sizes:
            errors.append(f"trainer.resource_pool_spec.{name}={sizes}: give ranks per node, e.g. [2] or [2, 2]")
        elif any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in sizes):
            errors.append(f"trainer.resource_pool_spec.{name}={list(sizes)}: ranks per node must be ints >= 1")
    for role, pool in mapping.items():
        if role not in POOL_ROLES:
            errors.append(f"trainer.resource_pool_mapping.{role}: unknown role; roles are {', '.join(POOL_ROLES)}")
        elif pool not in pools:
            errors.append(f"trainer.resource_pool_mapping.{role}={pool!r}: no such pool; pools are {sorted(pools)}")
        elif role == "actor_rollout" and pool != "global_pool":
            errors.append(
                f"trainer.resource_pool_mapping.actor_rollout={pool!r}: the actor/rollout/ref role lives on "
                f"global_pool ([trainer.n_gpus_per_node] x trainer.nnodes); resize that pool instead"
            )
    if resolve_backend(cfg.trainer) == "local" and any(sum(spec.get(p, [1])) > 1 for p in mapping.values()):
        errors.append(
            "trainer.resource_pool_spec: pools of more than one rank need separate processes; set trainer.backend=ray"
        )


def check_implemented(cfg: DictConfig, errors: list[str], warns: list[str]) -> None:
    """Values of verl keys that select machinery this project does not have are errors that name the fix."""
    arr = cfg.actor_rollout_ref
    for path, value in (
        ("actor_rollout_ref.actor.strategy", arr.actor.strategy),
        ("critic.strategy", cfg.critic.strategy),
    ):
        if str(value) not in IMPLEMENTED_STRATEGIES:
            errors.append(
                f"{path}={value!r} is not implemented (the workers are FSDP2 only); use one of "
                f"{', '.join(IMPLEMENTED_STRATEGIES)}"
            )
    from verl.trainer.config.upstream_keys import check_upstream_values

    check_upstream_values(cfg, errors)
    from verl.trainer.config.async_layout import check_async_layout, engine_on_actor_ranks

    check_async_layout(cfg, errors, warns)  # hybrid_engine=false and the top-level rollout pool (v0.9's async scripts)
    tp = int(arr.rollout.tensor_model_parallel_size)
    if str(arr.rollout.name) == "hf" and tp > 1:
        warns.append(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} applies to the vllm engine; the hf engine "
            f"generates on each rank with the actor's own (gathered) weights, so it has no tensor parallelism"
        )
    elif tp > 1 and engine_on_actor_ranks(cfg):  # else the engines are the rollouter's (async_layout checks them)
        from verl.workers.rollout.base import rollout_tp_error

        # refused here rather than when the engines start: under rollout.name=auto an unusable size would
        # otherwise fall back to the hf engine and the setting would be dropped without a word
        tp_error = rollout_tp_error(tp, world_size(cfg))
        if tp_error:
            errors.append(tp_error)
    legacy = cfg.trainer.use_legacy_worker_impl
    if legacy != "auto":
        warns.append(
            f"trainer.use_legacy_worker_impl={legacy}: accepted for verl scripts; this project has one worker "
            f"implementation (verl.workers.fsdp_workers), so the setting does not change anything"
        )
