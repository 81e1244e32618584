"""Where the rollout replicas run beside the trainer's ranks, and how their weights reach them.

The rollouter is ``rollout.nnodes * rollout.n_gpus_per_node`` devices in replicas of
``actor_rollout_ref.rollout.tensor_model_parallel_size`` devices each (one engine per replica). The trainer is the
actor worker group: one rank in the driver process (``trainer.backend`` resolves to ``local``) or ranks that are Ray
actors, on this machine or on others.

* **Trainer in the driver.** The replicas are processes the driver spawns on its own machine
  (:class:`~verl.trainer.fully_async_policy.replicas.ProcessReplica`; ``rollout.nnodes`` and the rollout's
  tensor-parallel size must be 1). On CPU there is
  nothing to place; on GPU they take the visible GPUs after the trainer's first, and a single replica with no second
  GPU shares the trainer's. Too few GPUs is refused in one line.
* **Trainer on Ray.** The replicas are Ray actors (:class:`~verl.trainer.fully_async_policy.replicas.RayReplica`) on
  the rollout pool: one placement group per rollout node of ``rollout.n_gpus_per_node`` bundles (a GPU each with
  ``trainer.device=cuda``, one logical CPU each), reserved by :func:`rollout_pool` *before* the trainer's ranks are
  placed, so Ray never gives the rollout's GPUs to a trainer rank, and vice versa. A pool the cluster cannot hold
  is refused in one line naming the keys. A replica of one device is an actor on its bundle; a tensor-parallel
  replica is a worker group on ``tensor_model_parallel_size`` consecutive bundles of one node, one vLLM engine over
  its ranks, driven by a light actor of its own.
* **Wire.** One push reaches every rank of every replica (a broadcast in one group; a tensor-parallel engine loads its
  shard of each tensor on each rank). NCCL when every replica has a GPU of its own,
  else gloo (tensors through host memory: NCCL cannot join two ranks on one device).
* **Address.** The trainer's rank 0 sends, so the weight-transfer store listens on rank 0's node: its
  ``MASTER_ADDR`` in a Ray group (reachable from the other nodes), 127.0.0.1 in the driver process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["RolloutPlacement", "place_rollouter", "rollout_pool", "rollout_replicas", "rollout_tp"]

LOOPBACK = "127.0.0.1"


@dataclass
class RolloutPlacement:
    """The rollout replicas' devices and weight path.

    Attributes:
        cuda_visible_devices: each spawned replica's ``CUDA_VISIBLE_DEVICES`` (None: inherit the driver's; Ray
            replicas: Ray sets it).
        backend: the weight-transfer backend (``nccl`` or ``gloo``).
        host: the address the trainer's rank 0 listens on for the replicas.
        pool: the rollout pool's ``RayResourcePool`` when the replicas are Ray actors (None: spawned processes).
    """

    cuda_visible_devices: list[str | None]
    backend: str
    host: str
    pool: Any = None

    def slots(self, ranks: int = 1) -> list[tuple[int, int]]:
        """``(node group, first bundle)`` of each Ray replica of ``ranks`` bundles (``tensor_model_parallel_size``),
        node by node: a replica's bundles are consecutive bundles of one node's group."""
        return [(g, start) for g, n in enumerate(self.pool.store) for start in range(0, n - ranks + 1, ranks)]

    def release(self) -> None:
        """Give the rollout pool's placement groups back to Ray (after its replicas have stopped)."""
        if self.pool is not None:
            self.pool.remove()
            self.pool = None


def _is_ray_group(group: Any) -> bool:
    return hasattr(group, "master_address_port") and hasattr(group, "worker_nodes")


def rollout_tp(config: Any) -> int:
    """The devices of one rollout replica: ``actor_rollout_ref.rollout.tensor_model_parallel_size`` (one engine
    over that many ranks)."""
    return int(config.actor_rollout_ref.rollout.tensor_model_parallel_size)


def rollout_replicas(config: Any) -> int:
    """How many rollout replicas a config asks for: ``rollout.nnodes * rollout.n_gpus_per_node`` devices over
    :func:`rollout_tp` each (1 without the top-level ``rollout`` section)."""
    pool = config.get("rollout")
    return int(pool.nnodes) * int(pool.n_gpus_per_node) // rollout_tp(config) if pool is not None else 1


def rollout_pool(config: Any) -> Any:
    """Reserve the rollout pool in Ray (Ray must be running): a ``RayResourcePool`` of ``rollout.n_gpus_per_node``
    bundles on each of ``rollout.nnodes`` nodes, its placement groups ready. Call it before the trainer's ranks are
    placed (module docstring).

    Raises:
        RuntimeError: the cluster cannot hold the pool (what was asked for, what the cluster has, which keys).
    """
    from verl.single_controller.ray import RayResourcePool
    from verl.utils.device import get_device_name

    pool_cfg = config.get("rollout")
    nnodes, per_node = (int(pool_cfg.nnodes), int(pool_cfg.n_gpus_per_node)) if pool_cfg is not None else (1, 1)
    use_gpu = get_device_name(config.trainer.device) == "cuda"
    pool = RayResourcePool([per_node] * nnodes, use_gpu=use_gpu, max_colocate_count=1, name_prefix="rollout")
    try:
        pool.get_placement_groups()
    except RuntimeError as err:
        # on CPU a bundle is one logical CPU, which a local Ray counts from the cores unless told otherwise
        cpu_hint = "" if use_gpu else " (one machine: a new local Ray's logical CPUs, ray_kwargs.ray_init.num_cpus)"
        raise RuntimeError(
            f"the rollout pool (rollout.nnodes={nnodes} x rollout.n_gpus_per_node={per_node}, placed before the "
            f"trainer's ranks) does not fit: make it smaller or add nodes{cpu_hint}. {err}"
        ) from None
    return pool


def place_rollouter(device: str, actor_group: Any, replicas: int = 1, pool: Any = None) -> RolloutPlacement:
    """The placement of ``replicas`` rollout replicas on ``device`` (``cuda`` or ``cpu``) beside ``actor_group``
    (module docstring). ``pool``: the rollout pool :func:`rollout_pool` reserved (a trainer on Ray); without it
    the replicas are processes on the driver's machine.

    Raises:
        RuntimeError: too few GPUs on the driver's machine for the replicas (one line with what to change).
    """
    ray_group = _is_ray_group(actor_group)
    host = str(actor_group.master_address_port[0]) if ray_group else LOOPBACK
    if ray_group and pool is None:
        raise ValueError("a trainer on Ray places its rollout replicas on a rollout pool: pass rollout_pool(config)")
    if pool is not None:
        if pool.world_size % replicas:
            raise ValueError(f"the rollout pool's {pool.world_size} bundles do not split into {replicas} replicas")
        return RolloutPlacement([None] * replicas, "nccl" if device == "cuda" else "gloo", host, pool)
    if device != "cuda":
        return RolloutPlacement([None] * replicas, "gloo", host)
    import torch

    count = torch.cuda.device_count()
    if replicas == 1 and count < 2:
        return RolloutPlacement([None], "gloo", host)  # time-sliced with the trainer's GPU
    if count < replicas + 1:
        raise RuntimeError(
            f"rollout.nnodes * rollout.n_gpus_per_node = {replicas} rollout GPUs beside the trainer's one rank need "
            f"{replicas + 1} visible GPUs; this machine shows {count}: make the rollout pool smaller"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(str(i) for i in range(count))
    return RolloutPlacement(list(visible.split(",")[1 : replicas + 1]), "nccl", host)
