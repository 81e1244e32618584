"""The local backend: every rank's worker is an object inside the driver process (no Ray).

Calls run synchronously, rank after rank, through the same dispatch/collect code as the Ray backend; non-blocking
methods return already-completed ``concurrent.futures.Future`` objects. ``world_size > 1`` is supported for
dispatch logic, but such in-process ranks cannot form a torch.distributed group (use Ray for that).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from verl.single_controller.base.colocate import create_colocated_worker_class
from verl.single_controller.base.futures import completed_future
from verl.single_controller.base.worker import BACKEND_ENV_KEY, Worker, in_process_worker_env
from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup


class LocalWorkerGroup(WorkerGroup):
    """``world_size`` instances of ``cls_with_init`` living in the driver process, rank ``r`` at ``workers[r]``."""

    def __init__(
        self, cls_with_init: ClassWithInitArgs, world_size: int = 1, auto_padding: bool = False, **_: Any
    ) -> None:
        super().__init__(world_size=world_size, auto_padding=auto_padding)
        if not isinstance(cls_with_init, ClassWithInitArgs):
            raise TypeError(f"LocalWorkerGroup needs a ClassWithInitArgs, got {type(cls_with_init).__name__}")
        user_cls = cls_with_init.user_cls
        if not issubclass(user_cls, Worker):
            raise TypeError(f"{user_cls.__name__} must derive from verl.single_controller.base.Worker")
        self._user_cls = user_cls
        self.workers: list[Any] = []
        master: dict[str, str] = {}
        for rank in range(world_size):
            env = {
                "RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world_size),
                BACKEND_ENV_KEY: "local",
                **master,
            }
            with in_process_worker_env(env):
                self.workers.append(cls_with_init())
            if rank == 0:
                master = {"MASTER_ADDR": env["MASTER_ADDR"], "MASTER_PORT": env["MASTER_PORT"]}
        self._bind_worker_methods(user_cls)

    def _worker_user_cls(self) -> type:
        return self._user_cls

    def _call_rank_async(self, rank: int, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Future:
        try:
            result = getattr(self.workers[rank], method_name)(*args, **kwargs)
        except Exception as err:  # surfaced when the future is read, as with Ray
            return completed_future(error=err)
        return completed_future(result)

    def _wait(self, futures: list[Any]) -> list[Any]:
        return [f.result() if isinstance(f, Future) else f for f in futures]

    def shutdown(self) -> None:
        """Drop the workers (their memory is freed once the driver holds no other reference)."""
        self.workers = []


def create_colocated_worker_cls(class_dict: Mapping[str, ClassWithInitArgs]) -> ClassWithInitArgs:
    """One ``ClassWithInitArgs`` whose instances hold every role of ``class_dict``; pass it to ``LocalWorkerGroup``
    and call ``group.spawn(prefix_set=class_dict.keys())`` to get role -> group."""
    cls, role_inits = create_colocated_worker_class(class_dict)
    return ClassWithInitArgs(cls, role_inits)
