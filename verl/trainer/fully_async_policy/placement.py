"""Where the rollouter process runs beside the trainer's ranks, and how their weights reach it.

The rollouter is a process the driver starts on its own machine. The trainer is the actor worker group: one rank in
the driver process (the local backend) or ranks that are Ray actors, on this machine or on others.

* **Device.** On CPU there is nothing to place. With one local trainer rank the rollouter takes the second visible
  GPU when there is one, else it shares the trainer's GPU. With Ray ranks the driver reserves a GPU of its own
  machine in Ray (a zero-CPU actor holding ``num_gpus=1`` for the rollouter's lifetime), so Ray never hands that GPU
  to a trainer rank or another job; the rollouter sees only that GPU. A machine with no GPU left is refused in one
  line.
* **Wire.** NCCL when the rollouter has a GPU of its own, else gloo (tensors through host memory: NCCL cannot join
  two ranks on one device).
* **Address.** The trainer's rank 0 sends, so the weight-transfer store listens on rank 0's node: its
  ``MASTER_ADDR`` in a Ray group, 127.0.0.1 in the driver process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RolloutPlacement", "place_rollouter"]

LOOPBACK = "127.0.0.1"
GPU_RESERVE_TIMEOUT_S = 30.0


@dataclass
class RolloutPlacement:
    """The rollouter's device and weight path.

    Attributes:
        cuda_visible_devices: the rollouter's ``CUDA_VISIBLE_DEVICES`` (None: inherit the driver's).
        backend: the weight-transfer backend (``nccl`` or ``gloo``).
        host: the address the trainer's rank 0 listens on for the rollouter.
        holder: the Ray actor holding the reserved GPU (None when nothing is reserved).
    """

    cuda_visible_devices: str | None
    backend: str
    host: str
    holder: Any = field(default=None, repr=False)

    def release(self) -> None:
        """Give a reserved GPU back to Ray (after the rollouter has exited)."""
        if self.holder is not None:
            import ray

            ray.kill(self.holder)
            self.holder = None


def _is_ray_group(group: Any) -> bool:
    return hasattr(group, "master_address_port") and hasattr(group, "worker_nodes")


def _reserve_ray_gpu() -> tuple[str, Any]:
    """Reserve one GPU of the driver's machine in Ray; its id (as Ray names it in ``CUDA_VISIBLE_DEVICES``) and the
    actor that holds it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, num_gpus=1)
    class _RolloutGpuHold:
        def gpu_ids(self) -> list[str]:
            return [str(i) for i in ray.get_gpu_ids()]

    here = ray.get_runtime_context().get_node_id()
    holder = _RolloutGpuHold.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
    ).remote()
    try:
        ids = ray.get(holder.gpu_ids.remote(), timeout=GPU_RESERVE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        ray.kill(holder)
        raise RuntimeError(
            f"the rollouter needs a GPU of its own on the driver's machine, and Ray had none free there after "
            f"{GPU_RESERVE_TIMEOUT_S:.0f}s (the trainer's ranks hold the others): give the trainer one GPU fewer "
            "(trainer.n_gpus_per_node) or start the driver on a machine with a free GPU"
        ) from None
    return ids[0], holder


def place_rollouter(device: str, actor_group: Any) -> RolloutPlacement:
    """The placement of a rollouter on ``device`` (``cuda`` or ``cpu``) beside ``actor_group`` (module docstring)."""
    ray_group = _is_ray_group(actor_group)
    host = str(actor_group.master_address_port[0]) if ray_group else LOOPBACK
    if device != "cuda":
        return RolloutPlacement(None, "gloo", host)
    if ray_group:
        gpu, holder = _reserve_ray_gpu()
        return RolloutPlacement(gpu, "nccl", host, holder)
    import torch

    if torch.cuda.device_count() < 2:
        return RolloutPlacement(None, "gloo", host)  # time-sliced with the trainer's GPU
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(str(i) for i in range(torch.cuda.device_count()))
    return RolloutPlacement(visible.split(",")[1], "nccl", host)
