"""Where the rollout processes run beside the trainer's ranks, and how their weights reach them.

The rollouter is ``rollout.nnodes * rollout.n_gpus_per_node`` processes (replicas, one device each) that the driver
starts on its own machine. The trainer is the actor worker group: one rank in the driver process (the local
backend) or ranks that are Ray actors, on this machine or on others.

* **Device.** On CPU there is nothing to place. With one local trainer rank the replicas take the visible GPUs after
  the first; a single replica with no second GPU shares the trainer's. With Ray ranks the driver reserves one GPU
  of its own machine per replica in Ray before the trainer's ranks are placed (zero-CPU actors holding
  ``num_gpus=1`` for the rollouter's lifetime), so Ray never hands those GPUs to a trainer rank or another job;
  each replica sees only its GPU. Too few GPUs is refused in one line.
* **Wire.** One push reaches every replica (a broadcast in one group). NCCL when every replica has a GPU of its own,
  else gloo (tensors through host memory: NCCL cannot join two ranks on one device).
* **Address.** The trainer's rank 0 sends, so the weight-transfer store listens on rank 0's node: its
  ``MASTER_ADDR`` in a Ray group, 127.0.0.1 in the driver process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ReservedGpus",
    "RolloutPlacement",
    "place_rollouter",
    "release_ray_gpus",
    "reserve_ray_gpus",
    "rollout_replicas",
]

LOOPBACK = "127.0.0.1"
GPU_RESERVE_TIMEOUT_S = 30.0


@dataclass
class RolloutPlacement:
    """The rollout replicas' devices and weight path.

    Attributes:
        cuda_visible_devices: each replica's ``CUDA_VISIBLE_DEVICES`` (None: inherit the driver's).
        backend: the weight-transfer backend (``nccl`` or ``gloo``).
        host: the address the trainer's rank 0 listens on for the replicas.
        holders: the Ray actors holding reserved GPUs (empty when nothing is reserved).
    """

    cuda_visible_devices: list[str | None]
    backend: str
    host: str
    holders: list[Any] = field(default_factory=list, repr=False)

    def release(self) -> None:
        """Give reserved GPUs back to Ray (after the rollout processes have exited)."""
        release_ray_gpus(self.holders)
        self.holders = []


def _is_ray_group(group: Any) -> bool:
    return hasattr(group, "master_address_port") and hasattr(group, "worker_nodes")


ReservedGpus = tuple[list[str], list[Any]]  # GPU ids (as Ray names them in CUDA_VISIBLE_DEVICES), their holders


def rollout_replicas(config: Any) -> int:
    """How many rollout processes a config asks for: ``rollout.nnodes * rollout.n_gpus_per_node`` (1 without the
    top-level ``rollout`` section)."""
    pool = config.get("rollout")
    return int(pool.nnodes) * int(pool.n_gpus_per_node) if pool is not None else 1


def release_ray_gpus(holders: list[Any]) -> None:
    """Give the GPUs held by ``holders`` (from :func:`reserve_ray_gpus`) back to Ray."""
    if not holders:
        return
    import ray

    for holder in holders:
        ray.kill(holder)


def reserve_ray_gpus(count: int) -> ReservedGpus:
    """Reserve ``count`` GPUs of the driver's machine in Ray; their ids (as Ray names them in
    ``CUDA_VISIBLE_DEVICES``) and the actors that hold them. The asynchronous trainer does this before its ranks
    are placed, so the ranks cannot take the GPUs of the driver's machine that the rollout needs."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, num_gpus=1)
    class _RolloutGpuHold:
        def gpu_ids(self) -> list[str]:
            return [str(i) for i in ray.get_gpu_ids()]

    here = ray.get_runtime_context().get_node_id()
    strategy = NodeAffinitySchedulingStrategy(node_id=here, soft=False)
    holders = [_RolloutGpuHold.options(scheduling_strategy=strategy).remote() for _ in range(count)]
    try:
        ids = ray.get([h.gpu_ids.remote() for h in holders], timeout=GPU_RESERVE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        release_ray_gpus(holders)
        raise RuntimeError(
            f"the rollouter needs {count} GPU(s) of its own on the driver's machine (rollout.nnodes * "
            f"rollout.n_gpus_per_node), and Ray had fewer free there after {GPU_RESERVE_TIMEOUT_S:.0f}s (the "
            "trainer's ranks hold the others): give the trainer or the rollout pool fewer GPUs, or start the driver "
            "on a machine with free GPUs"
        ) from None
    return [i[0] for i in ids], holders


def place_rollouter(
    device: str, actor_group: Any, replicas: int = 1, reserved: ReservedGpus | None = None
) -> RolloutPlacement:
    """The placement of ``replicas`` rollout processes on ``device`` (``cuda`` or ``cpu``) beside ``actor_group``
    (module docstring); ``reserved``: GPUs :func:`reserve_ray_gpus` already holds for them (Ray ranks on GPU).

    Raises:
        RuntimeError: too few GPUs for the replicas (one line with what to change).
    """
    ray_group = _is_ray_group(actor_group)
    host = str(actor_group.master_address_port[0]) if ray_group else LOOPBACK
    if device != "cuda":
        return RolloutPlacement([None] * replicas, "gloo", host)
    if ray_group:
        gpus, holders = reserved if reserved is not None else reserve_ray_gpus(replicas)
        return RolloutPlacement(list(gpus), "nccl", host, list(holders))
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
