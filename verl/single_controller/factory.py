"""Backend-neutral construction of worker groups, so the driver does not branch on ``trainer.backend``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup

BACKENDS = ("local", "ray")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown single-controller backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def _ray_pool(world_size: int, nnodes: int, use_gpu: bool, name_prefix: str, cpus_per_worker: float) -> Any:
    import ray

    from verl.single_controller.ray import RayResourcePool

    if nnodes < 1 or world_size % nnodes != 0:
        raise ValueError(f"world_size={world_size} must be a positive multiple of nnodes={nnodes}")
    if not ray.is_initialized():
        ray.init()
    # One group per pool here, so no fractional sharing of bundles is needed.
    return RayResourcePool(
        process_on_nodes=[world_size // nnodes] * nnodes,
        use_gpu=use_gpu,
        max_colocate_count=1,
        name_prefix=name_prefix,
        cpus_per_bundle=cpus_per_worker,
    )


def _build_group(
    backend: str,
    cia: ClassWithInitArgs,
    world_size: int,
    use_gpu: bool,
    name_prefix: str,
    nnodes: int,
    auto_padding: bool,
    ray_options: Mapping[str, Any] | None,
    cpus_per_worker: float,
) -> WorkerGroup:
    if backend == "local":
        from verl.single_controller.local import LocalWorkerGroup

        return LocalWorkerGroup(cia, world_size=world_size, auto_padding=auto_padding)
    from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup

    if not isinstance(cia, RayClassWithInitArgs):
        cia = RayClassWithInitArgs(cia.cls, *cia.args, **cia.kwargs)
    if ray_options:
        cia.update_options(ray_options)
    pool = _ray_pool(world_size, nnodes, use_gpu, name_prefix, cpus_per_worker)
    group = RayWorkerGroup(pool, cia, name_prefix=name_prefix or None, auto_padding=auto_padding)
    group._owns_pool = True
    return group


def create_worker_group(
    backend: str,
    cls: type,
    init_kwargs: Mapping[str, Any] | None = None,
    world_size: int = 1,
    use_gpu: bool = False,
    name_prefix: str = "",
    *,
    nnodes: int = 1,
    auto_padding: bool = False,
    ray_options: Mapping[str, Any] | None = None,
    cpus_per_worker: float = 1.0,
) -> WorkerGroup:
    """A group of ``world_size`` workers ``cls(**init_kwargs)`` on the ``local`` or ``ray`` backend.

    For Ray, a resource pool of ``world_size // nnodes`` bundles per node is created (and released by
    ``group.shutdown()``); Ray is started with defaults if it is not running yet.
    """
    _check_backend(backend)
    cia = ClassWithInitArgs(cls, **dict(init_kwargs or {}))
    return _build_group(
        backend, cia, world_size, use_gpu, name_prefix, nnodes, auto_padding, ray_options, cpus_per_worker
    )


def create_colocated_worker_groups(
    backend: str,
    roles: Mapping[str, tuple[type, Mapping[str, Any]] | ClassWithInitArgs],
    world_size: int = 1,
    use_gpu: bool = False,
    name_prefix: str = "",
    *,
    nnodes: int = 1,
    auto_padding: bool = False,
    ray_options: Mapping[str, Any] | None = None,
    cpus_per_worker: float = 1.0,
) -> dict[str, WorkerGroup]:
    """Role -> group for roles that share one process per rank (e.g. actor, critic, ref).

    ``roles`` maps a role name to ``(cls, init_kwargs)`` or a ``ClassWithInitArgs``.
    """
    _check_backend(backend)
    class_dict: dict[str, ClassWithInitArgs] = {}
    for role, spec in roles.items():
        if isinstance(spec, ClassWithInitArgs):
            class_dict[role] = spec
        elif isinstance(spec, tuple) and len(spec) == 2:
            class_dict[role] = ClassWithInitArgs(spec[0], **dict(spec[1] or {}))
        else:
            raise TypeError(f"role {role!r}: expected (cls, init_kwargs) or ClassWithInitArgs, got {spec!r}")
    if backend == "local":
        from verl.single_controller.local import create_colocated_worker_cls
    else:
        from verl.single_controller.ray import create_colocated_worker_cls
    cia = create_colocated_worker_cls(class_dict)
    group = _build_group(
        backend, cia, world_size, use_gpu, name_prefix, nnodes, auto_padding, ray_options, cpus_per_worker
    )
    return group.spawn(prefix_set=class_dict.keys())
