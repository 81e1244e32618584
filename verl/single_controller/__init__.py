"""The single controller: workers, worker groups and how calls are split across ranks.

Importing this package does not import Ray; ``verl.single_controller.ray`` does.
"""

from verl.single_controller.base import (
    ClassWithInitArgs,
    Dispatch,
    Execute,
    Worker,
    WorkerGroup,
    register,
    register_dispatch_mode,
    resolve,
    update_dispatch_mode,
)
from verl.single_controller.factory import BACKENDS, create_colocated_worker_groups, create_worker_group
from verl.single_controller.local import LocalWorkerGroup

__all__ = [
    "BACKENDS",
    "ClassWithInitArgs",
    "Dispatch",
    "Execute",
    "LocalWorkerGroup",
    "Worker",
    "WorkerGroup",
    "create_colocated_worker_groups",
    "create_worker_group",
    "register",
    "register_dispatch_mode",
    "resolve",
    "update_dispatch_mode",
]
