"""``DeviceMesh(name, process_group)``: a named torch process group that a model was already placed on.

The Python API never re-shards a model its owner distributed (Megatron tensor/pipeline groups, FSDP, ...): the
meshes are only recorded on the actor (:meth:`verl.api.models.ActorModel.set_device_mesh`). The data-parallel
mesh (named ``data``, ``dp`` or ``fsdp``) is then used by :class:`verl.api.ppo.PPOTrainer` in SPMD style (every
rank of the group runs the same script): each rank takes its slice of the step's prompts, and the actor's
gradients are averaged over the group before every optimizer step, exactly as data parallelism does
(``g <- (1/W) sum_r g_r``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

DATA_PARALLEL_NAMES = ("data", "dp", "data_parallel", "fsdp", "ddp")


class DeviceMesh:
    """A named process group. ``process_group=None`` means the default (world) group.

    Args:
        name: the mesh dimension's role, e.g. ``"tensor"``, ``"pipeline"``, ``"data"``.
        process_group: a ``torch.distributed`` process group (e.g. from Megatron's ``parallel_state``).
        device_type: ``"cuda"`` or ``"cpu"`` for :meth:`to_torch`; default: cuda when available.
    """

    def __init__(self, name: str, process_group: Any = None, device_type: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"DeviceMesh name must be a non-empty string, got {name!r}")
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                f"DeviceMesh({name!r}) needs an initialised torch.distributed process group "
                "(torch.distributed.init_process_group)"
            )
        self.name = name
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")

    @property
    def size(self) -> int:
        """Number of ranks in the group."""
        return dist.get_world_size(self.process_group)

    @property
    def rank(self) -> int:
        """This process's rank inside the group."""
        return dist.get_rank(self.process_group)

    @property
    def ranks(self) -> list[int]:
        """The global ranks of the group's members, in group order."""
        return list(dist.get_process_group_ranks(self.process_group))

    @property
    def is_data_parallel(self) -> bool:
        """Whether this mesh is the data-parallel dimension (by name)."""
        return self.name.lower() in DATA_PARALLEL_NAMES

    def to_torch(self) -> Any:
        """The equivalent one-dimensional ``torch.distributed.device_mesh.DeviceMesh``."""
        from torch.distributed.device_mesh import DeviceMesh as TorchDeviceMesh

        return TorchDeviceMesh.from_group(self.process_group, self.device_type, mesh_dim_names=(self.name,))

    def shard(self, num_rows: int) -> slice:
        """This rank's contiguous slice of ``num_rows`` rows; ``num_rows`` must divide evenly over the group."""
        if num_rows % self.size != 0:
            raise ValueError(f"DeviceMesh {self.name!r}: {num_rows} rows cannot be split evenly over {self.size} ranks")
        per_rank = num_rows // self.size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def all_reduce_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Average ``tensor`` over the group in place and return it."""
        if self.size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.process_group)
            tensor.div_(self.size)
        return tensor

    def __repr__(self) -> str:
        return f"DeviceMesh(name={self.name!r}, size={self.size}, rank={self.rank})"


def data_parallel_mesh(meshes: Sequence[DeviceMesh]) -> DeviceMesh | None:
    """The data-parallel mesh among ``meshes`` (by name), or None."""
    for mesh in meshes:
        if mesh.is_data_parallel:
            return mesh
    return None


def install_gradient_averaging(module: torch.nn.Module, mesh: DeviceMesh) -> list[Any]:
    """Average every gradient of ``module`` over ``mesh`` as it is produced (a hook per trainable parameter).

    The hook acts on each backward's gradient before it is accumulated, so gradient accumulation over
    micro-batches stays exact (averaging is linear). Returns the hook handles (``handle.remove()`` undoes it).
    Every rank must run the same number of backward passes, as in any data-parallel training.
    """
    if mesh.size <= 1:
        return []

    def average(grad: torch.Tensor) -> torch.Tensor:
        return mesh.all_reduce_mean_(grad.clone())

    return [p.register_hook(average) for p in module.parameters() if p.requires_grad]
