"""Local backend: workers inside the driver process, same interface as the Ray backend."""

from verl.single_controller.base.worker_group import ClassWithInitArgs
from verl.single_controller.local.worker_group import LocalWorkerGroup, create_colocated_worker_cls

__all__ = ["ClassWithInitArgs", "LocalWorkerGroup", "create_colocated_worker_cls"]
