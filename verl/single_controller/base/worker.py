"""The base class of every worker: its place in the group (rank, world size) and torch.distributed set-up."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator, MutableMapping
from contextvars import ContextVar
from typing import Any

import torch

from verl.single_controller.base.decorator import Dispatch, register

# The torch.distributed "env://" variables a worker group provides (torchrun's names).
DIST_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# Set by a backend so the worker knows how it is hosted ("local" or "ray").
BACKEND_ENV_KEY = "VERL_WORKER_BACKEND"
# Set for rank 0 by a backend: choose MASTER_ADDR/MASTER_PORT afresh even if some were inherited (a Ray worker
# process inherits the environment the cluster was started with, which may hold a stale or foreign MASTER_PORT).
ELECT_MASTER_ENV_KEY = "VERL_ELECT_MASTER"

# Workers built by the local backend share the driver's process, so their rank cannot come from os.environ; the
# group hands each one its own mapping through this context variable while the constructor runs.
_IN_PROCESS_ENV: ContextVar[MutableMapping[str, str] | None] = ContextVar("verl_in_process_worker_env", default=None)


@contextlib.contextmanager
def in_process_worker_env(env: MutableMapping[str, str]) -> Iterator[MutableMapping[str, str]]:
    """Make workers constructed inside this block read ``env`` instead of ``os.environ`` (local backend)."""
    token = _IN_PROCESS_ENV.set(env)
    try:
        yield env
    finally:
        _IN_PROCESS_ENV.reset(token)


def find_free_port() -> int:
    """A TCP port that was free a moment ago (the OS picks it); used for MASTER_PORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _node_ip(backend: str | None) -> str:
    if backend == "ray":
        import ray

        return ray.util.get_node_ip_address()
    return "127.0.0.1"


def _read_int(source: MutableMapping[str, str], key: str, default: int) -> int:
    raw = source.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise ValueError(f"environment variable {key}={raw!r} is not an integer") from err


class Worker:
    """Base class of the classes a ``WorkerGroup`` runs, one instance per rank.

    Rank information comes from the environment the group sets up (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; defaults 0/1 for a stand-alone worker). Rank 0 picks
    ``MASTER_ADDR`` (its node IP) and a free ``MASTER_PORT`` when none is given. The set-up runs in ``__new__``,
    so subclasses work whether or not their ``__init__`` calls ``super().__init__()``.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Worker:
        obj = super().__new__(cls)
        obj._setup_dist_env()
        return obj

    def _setup_dist_env(self) -> None:
        in_process_env = _IN_PROCESS_ENV.get()
        self._in_process = in_process_env is not None
        source: MutableMapping[str, str] = in_process_env if in_process_env is not None else os.environ
        self._backend = source.get(BACKEND_ENV_KEY) or os.environ.get(BACKEND_ENV_KEY)
        rank = _read_int(source, "RANK", 0)
        world_size = _read_int(source, "WORLD_SIZE", 1)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"invalid worker placement: RANK={rank} WORLD_SIZE={world_size} (need 0 <= RANK < SIZE)")
        local_rank = _read_int(source, "LOCAL_RANK", rank)
        local_world_size = _read_int(source, "LOCAL_WORLD_SIZE", world_size)
        master_addr = source.get("MASTER_ADDR") or None
        master_port = source.get("MASTER_PORT") or None
        if rank == 0 and source.get(ELECT_MASTER_ENV_KEY) == "1":
            master_addr = master_port = None
        if rank == 0 and (master_addr is None or master_port is None):
            master_addr = master_addr or _node_ip(self._backend)
            master_port = master_port or str(find_free_port())
        self._rank = rank
        self._world_size = world_size
        self._local_rank = local_rank
        self._local_world_size = local_world_size
        self._master_addr = master_addr
        self._master_port = master_port
        if self._backend is not None and master_addr is not None:
            # all ranks on this machine (MASTER_ADDR is loopback): gloo/NCCL/vLLM sockets stay on loopback too
            from verl.utils.distributed import apply_loopback_network_env

            apply_loopback_network_env(master_addr)
        if self._in_process or self._backend is not None:
            # Write back so that workers built later in the same process (colocated roles) agree on the port,
            # and so libraries reading torchrun's variables see them. A stand-alone worker leaves the caller's
            # environment alone until init_distributed.
            source.update(self._dist_env_vars())
            source.pop(ELECT_MASTER_ENV_KEY, None)

    @property
    def rank(self) -> int:
        """Global rank of this worker in its group."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of ranks in the group."""
        return self._world_size

    @property
    def local_rank(self) -> int:
        """Rank among the group's workers on this node (for GPU workers on Ray: index among visible devices)."""
        return self._local_rank

    @property
    def local_world_size(self) -> int:
        """Number of the group's workers on this node."""
        return self._local_world_size

    @property
    def dist_env(self) -> dict[str, str]:
        """The torch.distributed ``env://`` variables of this worker (MASTER_* only once known)."""
        return self._dist_env_vars()

    def _dist_env_vars(self) -> dict[str, str]:
        # Internal code calls this rather than the property, which a subclass may shadow.
        env = {
            "RANK": str(self._rank),
            "WORLD_SIZE": str(self._world_size),
            "LOCAL_RANK": str(self._local_rank),
            "LOCAL_WORLD_SIZE": str(self._local_world_size),
        }
        if self._master_addr is not None:
            env["MASTER_ADDR"] = self._master_addr
        if self._master_port is not None:
            env["MASTER_PORT"] = str(self._master_port)
        return env

    @property
    def device(self) -> torch.device:
        """``cuda:<local device>`` when a GPU is visible, else ``cpu``.

        On Ray each GPU worker sees only its own device(s), so the index is taken modulo the visible count.
        """
        if torch.cuda.is_available():
            return torch.device("cuda", self._local_rank % torch.cuda.device_count())
        return torch.device("cpu")

    def get_master_addr_port(self) -> tuple[str | None, str | None]:
        """``(MASTER_ADDR, MASTER_PORT)`` as this worker knows them (rank 0 always knows both)."""
        return self._master_addr, self._master_port

    def init_distributed(self, backend: str | None = None, timeout_s: float = 1800.0) -> None:
        """Join the default torch.distributed process group of this worker group.

        ``backend`` defaults to ``nccl`` when CUDA is available and ``gloo`` otherwise. Calling it again (e.g.
        from several colocated roles in one process) is a no-op once the group exists with the same size.
        """
        import torch.distributed as dist

        if dist.is_initialized():
            if dist.get_world_size() != self._world_size or dist.get_rank() != self._rank:
                raise RuntimeError(
                    f"torch.distributed is already initialised as rank {dist.get_rank()} of "
                    f"{dist.get_world_size()}, but this worker is rank {self._rank} of {self._world_size}"
                )
            return
        if self._in_process and self._world_size > 1:
            raise RuntimeError(
                f"the local backend runs all {self._world_size} ranks inside the driver process, so they cannot "
                "form a torch.distributed group; use the ray backend for world_size > 1 with collectives"
            )
        if self._master_addr is None or self._master_port is None:
            raise RuntimeError(
                f"rank {self._rank} has no MASTER_ADDR/MASTER_PORT; start it through a WorkerGroup or set them"
            )
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        os.environ.update(self._dist_env_vars())
        if backend == "nccl":
            torch.cuda.set_device(self.device)
        from verl.utils.distributed import init_process_group_from_env

        # env:// semantics; a loopback MASTER_ADDR keeps the rendezvous store and gloo/NCCL sockets on loopback
        init_process_group_from_env(backend, timeout_s=timeout_s)

    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this rank's place in the mesh ``mesh_name`` for N-D dispatch
        (``make_nd_compute_dataproto_dispatch_fn``): it receives data-parallel chunk ``dp_rank``, and its output is
        gathered when ``is_collect``. A mesh is registered once per worker."""
        info = self.__dict__.setdefault("_verl_mesh_info", {})
        if mesh_name in info:
            raise ValueError(f"mesh {mesh_name!r} is already registered on rank {self._rank}")
        if int(dp_rank) < 0:
            raise ValueError(f"mesh {mesh_name!r}: dp_rank must be >= 0, got {dp_rank}")
        info[mesh_name] = (int(dp_rank), bool(is_collect))

    def _mesh_entry(self, mesh_name: str) -> tuple[int, bool]:
        info = self.__dict__.get("_verl_mesh_info", {})
        if mesh_name not in info:
            raise ValueError(
                f"rank {self._rank} has no mesh {mesh_name!r}; call self._register_dispatch_collect_info("
                f"{mesh_name!r}, dp_rank=..., is_collect=...) in the worker first (registered: {sorted(info)})"
            )
        return info[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int:
        """This rank's data-parallel rank in ``mesh_name``."""
        return self._mesh_entry(mesh_name)[0]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool:
        """Whether this rank's output is gathered for ``mesh_name``."""
        return self._mesh_entry(mesh_name)[1]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start_profile(self, spec: dict[str, Any]) -> bool:
        """Open this rank's trace of a traced step: ``torch.profiler``, an nsys capture range or CUDA memory history
        (upstream v0.9's per-role profiler; ``spec`` as in :func:`verl.hardware.profiler.start_worker_trace`).
        Returns whether this rank traces."""
        from verl.hardware.profiler import start_worker_trace

        return start_worker_trace(self._rank, spec)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def stop_profile(self) -> str | None:
        """Write this rank's open trace (:func:`verl.hardware.profiler.stop_worker_trace`); its path, or None."""
        from verl.hardware.profiler import stop_worker_trace

        return stop_worker_trace(self._rank)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def mark_profile_range(self, name: str | None) -> None:
        """Open (``name``) or close (None) an NVTX range on this rank inside an open ``nsys`` capture range
        (:func:`verl.hardware.profiler.mark_worker_range`)."""
        from verl.hardware.profiler import mark_worker_range

        mark_worker_range(name)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def profile_finish_hook(self, spec: dict[str, Any]) -> int | None:
        """Run the profiler's finish hook on this rank if it is a hook rank
        (:func:`verl.hardware.profiler.run_worker_finish_hook`); its exit status, or None."""
        from verl.hardware.profiler import run_worker_finish_hook

        return run_worker_finish_hook(self._rank, spec)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``func(self, *args, **kwargs)`` on every rank with this rank's chunk of the DataProto arguments."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def execute_func_rank_zero(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``func(self, *args, **kwargs)`` on rank 0 only and return its result."""
        return func(self, *args, **kwargs)
