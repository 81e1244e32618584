"""Backend-neutral construction of worker groups, so the driver does not branch on ``trainer.backend``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup

BACKENDS = ("local", "ray")
# the pool every role is on unless trainer.resource_pool_mapping says otherwise (verl's name)
GLOBAL_POOL = "global_pool"
# seconds a Ray pool waits for its placement groups before the run stops with what it asked for and what exists
DEFAULT_PLACEMENT_TIMEOUT_S = 120.0


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown single-controller backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def _ray_pool(
    process_on_nodes: list[int], use_gpu: bool, name_prefix: str, cpus_per_worker: float, placement_timeout_s: float
) -> Any:
    from verl.single_controller.ray import RayResourcePool, start_or_join_ray

    start_or_join_ray()  # a local Ray on loopback unless $RAY_ADDRESS names a cluster; no-op when running
    # One group per pool here, so no fractional sharing of bundles is needed.
    return RayResourcePool(
        process_on_nodes=list(process_on_nodes),
        use_gpu=use_gpu,
        max_colocate_count=1,
        name_prefix=name_prefix,
        cpus_per_bundle=cpus_per_worker,
        placement_timeout_s=placement_timeout_s,
    )


def even_split(world_size: int, nnodes: int) -> list[int]:
    """``[world_size // nnodes] * nnodes``: ranks per node of a pool spread evenly over ``nnodes`` nodes."""
    if nnodes < 1 or world_size % nnodes != 0:
        raise ValueError(f"world_size={world_size} must be a positive multiple of nnodes={nnodes}")
    return [world_size // nnodes] * nnodes


def add_ray_options(cia: Any, ray_options: Mapping[str, Any]) -> Any:
    """Add Ray actor options to a ``RayClassWithInitArgs``: ``runtime_env`` keys (``env_vars``, ``nsight``, ...) are
    merged over the ones its roles set, the other options replace theirs. Returns ``cia``."""
    env = {**dict(cia.options.get("runtime_env") or {}), **dict(ray_options.get("runtime_env") or {})}
    return cia.update_options({**ray_options, **({"runtime_env": env} if env else {})})


def _build_group(
    backend: str,
    cia: ClassWithInitArgs,
    process_on_nodes: list[int],
    use_gpu: bool,
    name_prefix: str,
    auto_padding: bool,
    ray_options: Mapping[str, Any] | None,
    cpus_per_worker: float,
    placement_timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S,
) -> WorkerGroup:
    world_size = sum(process_on_nodes)
    if backend == "local":
        from verl.single_controller.local import LocalWorkerGroup

        return LocalWorkerGroup(cia, world_size=world_size, auto_padding=auto_padding)
    from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup

    if not isinstance(cia, RayClassWithInitArgs):
        cia = RayClassWithInitArgs(cia.cls, *cia.args, **cia.kwargs)
    if ray_options:
        add_ray_options(cia, ray_options)
    pool = _ray_pool(process_on_nodes, use_gpu, name_prefix, cpus_per_worker, placement_timeout_s)
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
    ``group.shutdown()``); if Ray is not running yet, a local Ray listening on 127.0.0.1 only is started (or the
    cluster in ``$RAY_ADDRESS`` joined), see :func:`verl.single_controller.ray.start_or_join_ray`.
    """
    _check_backend(backend)
    cia = ClassWithInitArgs(cls, **dict(init_kwargs or {}))
    return _build_group(
        backend, cia, even_split(world_size, nnodes), use_gpu, name_prefix, auto_padding, ray_options, cpus_per_worker
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
    resource_pool_spec: Mapping[str, list[int]] | None = None,
    resource_pool_mapping: Mapping[str, str] | None = None,
    placement_timeout_s: float = DEFAULT_PLACEMENT_TIMEOUT_S,
) -> dict[str, WorkerGroup]:
    """Role -> group, the roles of one resource pool sharing one process per rank (e.g. actor, critic, ref).

    ``roles`` maps a role name to ``(cls, init_kwargs)`` or a ``ClassWithInitArgs``. As in verl, roles are placed
    on resource pools: ``resource_pool_spec`` maps a pool name to its ranks per node (``[2, 2]``: 2 ranks on each of
    2 nodes) and ``resource_pool_mapping`` a role to a pool. The pool ``global_pool`` (``world_size`` ranks over
    ``nnodes`` nodes) always exists and holds every role that is not mapped elsewhere, so by default all roles are
    colocated. Each pool gets its own processes (one Ray placement group per node entry).
    """
    _check_backend(backend)
    spec: dict[str, list[int]] = {GLOBAL_POOL: even_split(world_size, nnodes)}
    for pool, sizes in (resource_pool_spec or {}).items():
        sizes = list(sizes)
        if not sizes or any(not isinstance(n, int) or n < 1 for n in sizes):
            raise ValueError(
                f"resource pool {pool!r}: ranks per node must be a non-empty list of ints >= 1, got {sizes}"
            )
        spec[str(pool)] = sizes
    mapping = dict(resource_pool_mapping or {})
    for role, pool in mapping.items():
        if role not in roles:
            raise ValueError(f"resource_pool_mapping names role {role!r}; the roles of this run are {sorted(roles)}")
        if pool not in spec:
            raise ValueError(
                f"resource_pool_mapping: role {role!r} -> pool {pool!r}, which is not one of {sorted(spec)}"
            )
    by_pool: dict[str, dict[str, ClassWithInitArgs]] = {}
    for role, cia_spec in roles.items():
        if isinstance(cia_spec, ClassWithInitArgs):
            cia = cia_spec
        elif isinstance(cia_spec, tuple) and len(cia_spec) == 2:
            cia = ClassWithInitArgs(cia_spec[0], **dict(cia_spec[1] or {}))
        else:
            raise TypeError(f"role {role!r}: expected (cls, init_kwargs) or ClassWithInitArgs, got {cia_spec!r}")
        by_pool.setdefault(mapping.get(role, GLOBAL_POOL), {})[role] = cia
    if backend == "local":
        from verl.single_controller.local import create_colocated_worker_cls
    else:
        from verl.single_controller.ray import create_colocated_worker_cls
    groups: dict[str, WorkerGroup] = {}
    for pool, class_dict in by_pool.items():
        prefix = name_prefix if pool == GLOBAL_POOL else f"{name_prefix}{pool}_"
        group = _build_group(
            backend,
            create_colocated_worker_cls(class_dict),
            spec[pool],
            use_gpu,
            prefix,
            auto_padding,
            ray_options,
            cpus_per_worker,
            placement_timeout_s,
        )
        groups.update(group.spawn(prefix_set=class_dict.keys()))
    return {role: groups[role] for role in roles}
