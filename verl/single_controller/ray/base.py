"""The Ray backend: one Ray actor per rank, placed on placement-group bundles of a ``RayResourcePool``.

The actors of a group get torchrun's variables through ``runtime_env`` so that they can join one
torch.distributed group: ``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``LOCAL_RANK`` and ``MASTER_ADDR`` /
``MASTER_PORT`` (rank 0's node IP and a free port there, probed before any actor starts). GPU actors see only their own
device (Ray sets ``CUDA_VISIBLE_DEVICES``), so their ``LOCAL_RANK`` is 0, the index of that device; the position
of the actor among the node's bundles is in ``RAY_LOCAL_RANK``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.single_controller.base.colocate import create_colocated_worker_class
from verl.single_controller.base.worker import BACKEND_ENV_KEY, Worker, find_free_port
from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup


class WorkerDiedError(RuntimeError):
    """A worker process of a group died (killed, out of memory, node lost); names the role, rank and node."""

    def __init__(self, message: str, role: str, rank: int, node_ip: str, node_id: str) -> None:
        super().__init__(message)
        self.role = role
        self.rank = rank
        self.node_ip = node_ip
        self.node_id = node_id


class RayResourcePool:
    """Bundles for ``sum(process_on_nodes)`` workers: one placement group per node, one bundle per worker.

    A bundle holds ``cpus_per_bundle`` CPUs plus one GPU when ``use_gpu``. Up to ``max_colocate_count`` worker
    groups can share the pool: each of their actors asks for ``1 / max_colocate_count`` of a bundle.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        max_colocate_count: int = 10,
        name_prefix: str = "",
        cpus_per_bundle: float = 1.0,
        detached: bool = False,
        placement_timeout_s: float = 120.0,
    ) -> None:
        process_on_nodes = [1] if process_on_nodes is None else list(process_on_nodes)
        if not process_on_nodes or any(not isinstance(n, int) or n < 1 for n in process_on_nodes):
            raise ValueError(f"process_on_nodes must be a non-empty list of positive ints, got {process_on_nodes}")
        if max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be >= 1, got {max_colocate_count}")
        if cpus_per_bundle <= 0:
            raise ValueError(f"cpus_per_bundle must be > 0, got {cpus_per_bundle}")
        self.store = process_on_nodes
        self.use_gpu = bool(use_gpu)
        self.max_colocate_count = int(max_colocate_count)
        self.name_prefix = name_prefix or f"verl_{uuid.uuid4().hex[:8]}"
        self.cpus_per_bundle = float(cpus_per_bundle)
        self.detached = detached
        self.placement_timeout_s = placement_timeout_s
        self.pgs: list[PlacementGroup] | None = None
        # a slice of another pool's placement group (bundles bundle_offset.. of its one group): see slice()
        self.bundle_offset = 0
        self._owns_pgs = True

    def slice(self, group: int, start: int, count: int, name_prefix: str = "") -> RayResourcePool:
        """A pool of bundles ``start .. start + count - 1`` of this pool's placement group ``group`` (one node), for
        a worker group of its own on part of a node: e.g. one tensor-parallel rollout engine of several GPUs out of
        a node's group. The slice shares the placement group; removing it leaves the group to this pool."""
        pgs = self.get_placement_groups()
        if not 0 <= group < len(pgs) or start < 0 or count < 1 or start + count > self.store[group]:
            raise ValueError(
                f"slice(group={group}, start={start}, count={count}) is outside the pool's groups {self.store}"
            )
        part = RayResourcePool(
            [count],
            use_gpu=self.use_gpu,
            max_colocate_count=self.max_colocate_count,
            name_prefix=name_prefix or f"{self.name_prefix}_{group}_{start}",
            cpus_per_bundle=self.cpus_per_bundle,
            detached=self.detached,
            placement_timeout_s=self.placement_timeout_s,
        )
        part.pgs = [pgs[group]]
        part.bundle_offset = int(start)
        part._owns_pgs = False
        return part

    @property
    def world_size(self) -> int:
        """Total number of workers (bundles) in the pool."""
        return sum(self.store)

    def bundle(self) -> dict[str, float]:
        """The resources of one bundle."""
        return {"CPU": self.cpus_per_bundle, **({"GPU": 1.0} if self.use_gpu else {})}

    def actor_resources(self) -> dict[str, float]:
        """``num_cpus``/``num_gpus`` of one actor: an equal share of a bundle among ``max_colocate_count``."""
        share = {"num_cpus": self.cpus_per_bundle / self.max_colocate_count}
        share["num_gpus"] = 1.0 / self.max_colocate_count if self.use_gpu else 0
        return share

    def describe_request(self) -> str:
        """What the pool asks for, in words: ``2 node(s) x 2 bundle(s) of {'CPU': 1.0}``."""
        return f"process_on_nodes={self.store} (one node per entry), bundles {self.bundle()}"

    def check_feasible(self) -> None:
        """Fail at once (no waiting) when no assignment of the per-node bundle groups to the cluster's alive nodes
        fits their *total* resources: first-fit decreasing over nodes, each group on one node (``STRICT_PACK``).

        Busy-but-sufficient clusters pass; they are handled by the placement timeout.
        """
        nodes = [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]
        bundle = self.bundle()
        for n in sorted(self.store, reverse=True):
            need = {k: v * n for k, v in bundle.items()}
            for node in nodes:
                if all(node.get(k, 0.0) + 1e-9 >= v for k, v in need.items()):
                    for k, v in need.items():
                        node[k] -= v
                    break
            else:
                raise RuntimeError(self._shortfall_message("the cluster can never hold it"))

    def _shortfall_message(self, why: str) -> str:
        per_node = [
            {k: v for k, v in n.get("Resources", {}).items() if k in ("CPU", "GPU", "memory")}
            for n in ray.nodes()
            if n.get("Alive")
        ]
        return (
            f"RayResourcePool {self.name_prefix!r} asked for {self.describe_request()}: {why}. The cluster has "
            f"{len(per_node)} alive node(s) with {per_node} (totals {ray.cluster_resources()}, free "
            f"{ray.available_resources()}). Lower trainer.n_gpus_per_node / trainer.nnodes (or the pool sizes in "
            f"trainer.resource_pool_spec), or add nodes with `ray start --address=<head>:6379`"
        )

    def get_placement_groups(self, strategy: str = "STRICT_PACK") -> list[PlacementGroup]:
        """Create (once) and wait for one placement group per node.

        A request the cluster can never satisfy fails at once; one that does not become ready within
        ``placement_timeout_s`` (resources held by others) fails then. Both errors say what was asked for and what
        the cluster has, instead of waiting forever.
        """
        if self.pgs is not None:
            return self.pgs
        self.check_feasible()
        lifetime = "detached" if self.detached else None
        pgs = [
            placement_group([self.bundle()] * n, strategy=strategy, name=f"{self.name_prefix}_pg{i}", lifetime=lifetime)
            for i, n in enumerate(self.store)
        ]
        ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=self.placement_timeout_s)
        if len(ready) != len(pgs):
            for pg in pgs:
                remove_placement_group(pg)
            raise RuntimeError(
                self._shortfall_message(f"the placement groups were not ready after {self.placement_timeout_s:.0f}s")
            )
        self.pgs = pgs
        return pgs

    def bundle_nodes(self) -> list[tuple[str, str]]:
        """``(node_id, node_ip)`` of every bundle in rank order (node by node, bundle by bundle)."""
        ips = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}
        out: list[tuple[str, str]] = []
        for pg, n in zip(self.get_placement_groups(), self.store):
            table = placement_group_table(pg).get("bundles_to_node_id", {})
            bundles = range(self.bundle_offset, self.bundle_offset + n)
            out.extend((str(table.get(i, "?")), str(ips.get(table.get(i), "?"))) for i in bundles)
        return out

    def remove(self) -> None:
        """Release the placement groups (actors still placed on them are killed by Ray); a slice releases
        nothing (its group belongs to the pool it was cut from)."""
        if self._owns_pgs:
            for pg in self.pgs or []:
                remove_placement_group(pg)
        self.pgs = None


@ray.remote(num_cpus=0)
def _probe_master() -> tuple[str, int]:
    """This node's IP and a free port on it (run inside rank 0's bundle)."""
    return ray.util.get_node_ip_address(), find_free_port()


class RayClassWithInitArgs(ClassWithInitArgs):
    """A worker class (plain, or already ``ray.remote``) with its init arguments and Ray actor options."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        super().__init__(cls, *args, **kwargs)
        self._options: dict[str, Any] = {}

    def update_options(self, options: Mapping[str, Any]) -> RayClassWithInitArgs:
        """Add Ray actor options (``runtime_env``, ``num_cpus``, ``num_gpus``, ``max_concurrency``, ...)."""
        self._options.update(options)
        return self

    @property
    def options(self) -> dict[str, Any]:
        """The Ray actor options given so far."""
        return dict(self._options)

    @property
    def remote_cls(self) -> Any:
        """The ``ray.remote`` actor class (wrapping a plain class on first use)."""
        if hasattr(self.cls, "__ray_actor_class__"):
            return self.cls
        return ray.remote(self.cls)


def _merge_runtime_env(base: Mapping[str, Any] | None, env_vars: Mapping[str, str]) -> dict[str, Any]:
    runtime_env = dict(base or {})
    runtime_env["env_vars"] = {**dict(runtime_env.get("env_vars") or {}), **env_vars}
    return runtime_env


class RayWorkerGroup(WorkerGroup):
    """One Ray actor per bundle of ``resource_pool``, each an instance of ``ray_cls_with_init``'s class.

    Rank order is node by node, bundle by bundle. ``worker_env`` adds environment variables to every actor.
    """

    def __init__(
        self,
        resource_pool: RayResourcePool,
        ray_cls_with_init: RayClassWithInitArgs,
        name_prefix: str | None = None,
        auto_padding: bool = False,
        worker_env: Mapping[str, str] | None = None,
        **_: Any,
    ) -> None:
        if not isinstance(resource_pool, RayResourcePool):
            raise TypeError(f"resource_pool must be a RayResourcePool, got {type(resource_pool).__name__}")
        if not isinstance(ray_cls_with_init, ClassWithInitArgs):
            raise TypeError(f"ray_cls_with_init must be a RayClassWithInitArgs, got {type(ray_cls_with_init)}")
        if not isinstance(ray_cls_with_init, RayClassWithInitArgs):
            ray_cls_with_init = RayClassWithInitArgs(
                ray_cls_with_init.cls, *ray_cls_with_init.args, **ray_cls_with_init.kwargs
            )
        super().__init__(world_size=resource_pool.world_size, auto_padding=auto_padding)
        user_cls = ray_cls_with_init.user_cls
        if not issubclass(user_cls, Worker):
            raise TypeError(f"{user_cls.__name__} must derive from verl.single_controller.base.Worker")
        if not ray.is_initialized():
            raise RuntimeError("RayWorkerGroup needs a running Ray: call ray.init(...) first")
        self._user_cls = user_cls
        self.resource_pool = resource_pool
        self.name_prefix = name_prefix or resource_pool.name_prefix
        # Actor names must be unique in the Ray namespace even when a prefix is reused (a second trainer run).
        self._name_suffix = uuid.uuid4().hex[:6]
        self._owns_pool = False
        self.workers: list[Any] = []
        self.worker_names: list[str] = []
        # the role named in errors; spawn() sets it to the colocated role ("actor_rollout", "critic", ...)
        self.role = user_cls.__name__
        self._create_actors(ray_cls_with_init, dict(worker_env or {}))
        # (node_id, node_ip) per rank, for error messages and placement checks
        self.worker_nodes: list[tuple[str, str]] = resource_pool.bundle_nodes()
        self._bind_worker_methods(user_cls)

    def _create_actors(self, cia: RayClassWithInitArgs, worker_env: dict[str, str]) -> None:
        pool = self.resource_pool
        pgs = pool.get_placement_groups()
        offset = pool.bundle_offset  # a slice of a node's group starts past its first bundle
        placements = [(pg, offset + idx, n) for pg, n in zip(pgs, pool.store) for idx in range(n)]
        user_options = cia.options
        remote_cls = cia.remote_cls
        master = self._master_from_driver(pgs[0]) or self._master_from_bundle(pgs[0], offset)
        for rank, (pg, bundle_index, local_world_size) in enumerate(placements):
            env = {
                **worker_env,
                "RANK": str(rank),
                "WORLD_SIZE": str(self._world_size),
                "LOCAL_WORLD_SIZE": str(local_world_size),
                "LOCAL_RANK": "0" if pool.use_gpu else str(bundle_index - offset),
                "RAY_LOCAL_RANK": str(bundle_index - offset),
                "WG_PREFIX": self.name_prefix,
                BACKEND_ENV_KEY: "ray",
                **master,
            }
            name = f"{self.name_prefix}_{self._user_cls.__name__}_{rank}_{self._name_suffix}"
            options: dict[str, Any] = {
                **pool.actor_resources(),
                "name": name,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=bundle_index
                ),
                **{k: v for k, v in user_options.items() if k != "runtime_env"},
                "runtime_env": _merge_runtime_env(user_options.get("runtime_env"), env),
            }
            if pool.detached:
                options["lifetime"] = "detached"
            actor = remote_cls.options(**options).remote(*cia.args, **cia.kwargs)
            self.workers.append(actor)
            self.worker_names.append(name)
        # Make construction errors appear now rather than at the first call.
        ray.get([w.get_master_addr_port.remote() for w in self.workers])

    @staticmethod
    def _master_from_bundle(pg: PlacementGroup, bundle_index: int = 0) -> dict[str, str]:
        """MASTER_ADDR/PORT probed on rank 0's node by a zero-CPU task in rank 0's bundle.

        Workers that join the process group in ``__init__`` (the FSDP workers do) block there until every rank
        has started, so rank 0 cannot be asked for its address after it starts: the other ranks would never be
        created. Probing first lets all ranks start together wherever rank 0 is.
        """
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle_index)
        addr, port = ray.get(_probe_master.options(scheduling_strategy=strategy).remote())
        return {"MASTER_ADDR": str(addr), "MASTER_PORT": str(port)}

    @staticmethod
    def _master_from_driver(pg: PlacementGroup) -> dict[str, str]:
        """MASTER_ADDR/PORT picked by the driver when rank 0's bundle is on the driver's node, else ``{}``.

        Knowing them up front lets all actors start in parallel instead of rank 0 first.
        """
        bundle_nodes = placement_group_table(pg).get("bundles_to_node_id", {})
        if bundle_nodes.get(0) != ray.get_runtime_context().get_node_id():
            return {}
        return {"MASTER_ADDR": ray.util.get_node_ip_address(), "MASTER_PORT": str(find_free_port())}

    def _worker_user_cls(self) -> type:
        return self._user_cls

    def _call_rank_async(self, rank: int, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self.workers[rank], method_name).remote(*args, **kwargs)

    def _wait(self, futures: list[Any]) -> list[Any]:
        """Results in order; the first failure is raised as soon as it happens, not after the slowest rank.

        Waiting on all ranks at once would hang when one rank dies while the others block in a collective (gloo
        or NCCL only time out after many minutes): a dead actor's result is ready (as an error) at once, so it is
        checked first. A dead rank leaves the group's process group broken, so the surviving actors are killed
        and :class:`WorkerDiedError` names the role, rank and node.
        """
        refs = list(futures)
        position = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    raise self._worker_died(position[ref], err) from err
        return list(ray.get(refs))

    def _worker_died(self, rank: int, err: BaseException) -> WorkerDiedError:
        node_id, ip = self.worker_nodes[rank] if rank < len(self.worker_nodes) else ("?", "?")
        self.shutdown()
        return WorkerDiedError(
            f"worker {self.role!r} rank {rank} of {self._world_size} on node {ip} (node id {node_id[:12]}) died: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}. The other ranks of the group were "
            f"stopped; resume from the last complete checkpoint with trainer.resume_mode=auto",
            role=self.role,
            rank=rank,
            node_ip=ip,
            node_id=node_id,
        )

    @property
    def master_address_port(self) -> tuple[str, str]:
        """``(MASTER_ADDR, MASTER_PORT)`` of the group's torch.distributed rendezvous."""
        addr, port = ray.get(self.workers[0].get_master_addr_port.remote())
        return str(addr), str(port)

    def shutdown(self) -> None:
        """Kill the actors (shared with groups made by ``spawn``), and the pool if this group created it."""
        for actor in self.workers:
            try:
                ray.kill(actor)
            except ValueError:  # already gone
                pass
        self.workers = []
        if self._owns_pool:
            self.resource_pool.remove()


def create_colocated_worker_cls(class_dict: Mapping[str, ClassWithInitArgs]) -> RayClassWithInitArgs:
    """A ``RayClassWithInitArgs`` whose actors hold every role of ``class_dict`` (role -> class with init args).

    Give it to ``RayWorkerGroup`` and call ``group.spawn(prefix_set=class_dict.keys())`` for role -> group. Ray
    options of the roles are merged (``runtime_env`` env vars combined); conflicting values are an error.
    """
    cls, role_inits = create_colocated_worker_class(class_dict)
    merged = RayClassWithInitArgs(cls, role_inits)
    options: dict[str, Any] = {}
    env_vars: dict[str, str] = {}
    for role, cia in class_dict.items():
        role_options = cia.options if isinstance(cia, RayClassWithInitArgs) else {}
        for key, value in role_options.items():
            if key == "runtime_env":
                for var, val in (value or {}).get("env_vars", {}).items():
                    if env_vars.get(var, val) != val:
                        raise ValueError(f"role {role!r} sets env var {var}={val!r}, another role {env_vars[var]!r}")
                    env_vars[var] = val
                extra = {k: v for k, v in (value or {}).items() if k != "env_vars"}
                for k, v in extra.items():
                    options.setdefault("runtime_env", {})[k] = v
            elif options.get(key, value) != value:
                raise ValueError(f"role {role!r} sets Ray option {key}={value!r}, another role {options[key]!r}")
            else:
                options[key] = value
    if env_vars:
        options["runtime_env"] = _merge_runtime_env(options.get("runtime_env"), env_vars)
    return merged.update_options(options)
