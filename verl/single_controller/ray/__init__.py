"""Ray backend (imports ray): one actor per rank on placement-group bundles."""

from verl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    WorkerDiedError,
    create_colocated_worker_cls,
)
from verl.single_controller.ray.cluster import keep_ray_on_loopback, requested_cluster, start_or_join_ray

__all__ = [
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "WorkerDiedError",
    "create_colocated_worker_cls",
    "keep_ray_on_loopback",
    "requested_cluster",
    "start_or_join_ray",
]
