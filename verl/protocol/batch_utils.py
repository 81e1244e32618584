"""verl's module-level helpers around DataProto, re-exported by :mod:`verl.protocol` under verl's names.

- tensor / TensorDict (de)serialisation to plain picklable tuples of bytes (``serialize_single_tensor``,
  ``serialize_tensordict``, ``deserialize_single_tensor``, ``deserialize_tensordict``);
- batch-dimension folding (``fold_batch_dim``, ``unfold_batch_dim``), ``list_of_dict_to_dict_of_list`` and
  ``all_gather_data_proto`` (gather a DataProto from every rank of a process group, in place).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict

if TYPE_CHECKING:
    from verl.protocol.data_proto import DataProto

__all__ = [
    "all_gather_data_proto",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
]


# ---- serialisation ---------------------------------------------------------------------------------------------------
def serialize_single_tensor(obj: torch.Tensor) -> tuple[str, tuple[int, ...], np.ndarray]:
    """``(dtype name, shape, raw bytes as a uint8 numpy array)`` of a CPU tensor (any dtype, bf16 included)."""
    data = obj.detach().cpu().flatten().contiguous().view(torch.uint8).numpy()
    return str(obj.dtype).removeprefix("torch."), tuple(obj.shape), data


def deserialize_single_tensor(arr: tuple[str, tuple[int, ...], Any]) -> torch.Tensor:
    """Inverse of :func:`serialize_single_tensor` (the result owns a fresh buffer)."""
    dtype_name, shape, data = arr
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"deserialize_single_tensor: unknown dtype {dtype_name!r}")
    buffer = bytearray(memoryview(data).cast("B")) if not isinstance(data, bytes | bytearray) else bytearray(data)
    if not buffer:
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).view(tuple(shape))


def serialize_tensordict(batch: TensorDict) -> tuple[tuple[int, ...], str | None, dict[str, Any]]:
    """``(batch_size, device, {key: serialized tensor})``; nested (jagged) tensors become
    ``(layout name, [serialized component, ...])``."""
    encoded: dict[str, Any] = {}
    for key, value in batch.items():
        if value.is_nested:
            layout = str(value.layout).removeprefix("torch.")
            encoded[key] = (layout, [serialize_single_tensor(t) for t in value.unbind()])
        else:
            encoded[key] = serialize_single_tensor(value)
    device = str(batch.device) if batch.device is not None else None
    return tuple(batch.batch_size), device, encoded


def deserialize_tensordict(arr: tuple[tuple[int, ...], str | None, dict[str, Any]]) -> TensorDict:
    """Inverse of :func:`serialize_tensordict` (tensors land on the recorded device)."""
    batch_size, device, encoded = arr
    decoded: dict[str, torch.Tensor] = {}
    for key, value in encoded.items():
        if len(value) == 3:
            decoded[key] = deserialize_single_tensor(value)
        elif len(value) == 2:
            layout, parts = value
            decoded[key] = torch.nested.as_nested_tensor(
                [deserialize_single_tensor(p) for p in parts], layout=getattr(torch, layout)
            )
        else:
            raise ValueError(f"deserialize_tensordict: entry {key!r} is neither a tensor nor a nested tensor record")
    return TensorDict(source=decoded, batch_size=batch_size, device=device)


# ---- shapes ----------------------------------------------------------------------------------------------------------
def list_of_dict_to_dict_of_list(list_of_dict: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """``[{"a": 1, "b": 2}, {"a": 3, "b": 4}]`` -> ``{"a": [1, 3], "b": [2, 4]}``; every dict must have the keys of
    the first (ValueError naming the stray key otherwise)."""
    if not list_of_dict:
        return {}
    output: dict[str, list[Any]] = {key: [] for key in list_of_dict[0]}
    for i, item in enumerate(list_of_dict):
        for key, value in item.items():
            if key not in output:
                raise ValueError(f"list_of_dict_to_dict_of_list: item {i} has key {key!r} that item 0 lacks")
            output[key].append(value)
    return output


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Reshape ``[N, ...]`` into ``[new_batch_size, N // new_batch_size, ...]`` (tensors and non-tensors alike)."""
    batch_size = data.batch.batch_size[0]
    if new_batch_size < 1 or batch_size % new_batch_size:
        raise ValueError(f"fold_batch_dim: {batch_size} rows do not fold into {new_batch_size} groups")
    tensor = data.batch.view(new_batch_size, -1)
    tensor.auto_batch_size_(batch_dims=1)
    non_tensor = {k: np.reshape(v, (new_batch_size, -1, *v.shape[1:])) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=tensor, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Flatten the first ``batch_dims`` dimensions into one batch dimension (inverse of :func:`fold_batch_dim`)."""
    tensor = data.batch
    tensor.auto_batch_size_(batch_dims=batch_dims)
    tensor = tensor.view(-1)
    batch_size = tensor.batch_size[0]
    non_tensor = {k: np.reshape(v, (batch_size, *v.shape[batch_dims:])) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=tensor, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def all_gather_data_proto(data: DataProto, process_group: Any = None) -> None:
    """Replace ``data``'s rows (in place) by the rows of every rank of ``process_group``, in rank order.

    Tensors travel by ``all_gather`` on the tensors' device (every rank must hold the same number of rows and
    shapes); non-tensor values by ``all_gather_object``. meta_info is left as it is.
    """
    import torch.distributed as dist

    world = dist.get_world_size(group=process_group)
    if data.batch is not None:
        gathered: dict[str, torch.Tensor] = {}
        for key, value in data.batch.items():
            value = value.contiguous()
            parts = [torch.empty_like(value) for _ in range(world)]
            dist.all_gather(parts, value, group=process_group)
            gathered[key] = torch.cat(parts, dim=0)
        rows = data.batch.batch_size[0] * world
        data.batch = TensorDict(source=gathered, batch_size=[rows], device=data.batch.device)
    objects: list[Any] = [None] * world
    dist.all_gather_object(objects, data.non_tensor_batch, group=process_group)
    data.non_tensor_batch = {
        key: np.concatenate([np.asarray(part[key], dtype=object) for part in objects]) for key in data.non_tensor_batch
    }
