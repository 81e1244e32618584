"""Backend-neutral pieces of the single controller: Worker, WorkerGroup and the @register decorator."""

from verl.single_controller.base.decorator import (
    AUTO_PADDING_KEY,
    Dispatch,
    DispatchMode,
    Execute,
    get_dispatch_fns,
    register,
    register_dispatch_mode,
    update_dispatch_mode,
)
from verl.single_controller.base.futures import is_future, resolve
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup

__all__ = [
    "AUTO_PADDING_KEY",
    "ClassWithInitArgs",
    "Dispatch",
    "DispatchMode",
    "Execute",
    "Worker",
    "WorkerGroup",
    "get_dispatch_fns",
    "is_future",
    "register",
    "register_dispatch_mode",
    "resolve",
    "update_dispatch_mode",
]
