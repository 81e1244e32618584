"""Helpers for ``tensordict.TensorDict`` batches that carry non-tensor data (verl's ``verl.utils.tensordict_utils``).

A TensorDict batch of ``N`` rows holds three kinds of entries here:

- tensors with leading dim ``N`` (nested / jagged tensors included: one variable-length row per sample);
- per-sample python values as a ``NonTensorStack`` of ``N`` ``NonTensorData`` (read back as a list);
- batch-level values as one ``NonTensorData`` (read back as the value itself).

``get``/``pop`` unwrap these so callers see tensors, lists and plain values; ``get_tensordict`` builds such a
TensorDict from plain dicts; ``concat_tensordict``, ``index_select_tensor_dict``, ``pad_to_divisor``/``unpad``
and ``make_iterator`` are the row operations.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.tensorclass import NonTensorData, NonTensorStack

from verl.utils.errors import DataProtoError

__all__ = [
    "assert_tensordict_eq",
    "assign_non_tensor",
    "assign_non_tensor_data",
    "assign_non_tensor_stack",
    "concat_nested_tensors",
    "concat_tensordict",
    "contiguous",
    "get",
    "get_keys",
    "get_non_tensor_data",
    "get_tensordict",
    "index_select_tensor_dict",
    "make_iterator",
    "pad_to_divisor",
    "pop",
    "pop_keys",
    "split_tensordict",
    "union_tensor_dict",
    "unpad",
    "unwrap_non_tensor_data",
]

logger = logging.getLogger(__name__)


def _require_tensordict(tensor_dict: Any, what: str = "tensor_dict") -> None:
    if not isinstance(tensor_dict, TensorDict):
        raise TypeError(f"{what} must be a TensorDict, got {type(tensor_dict).__name__}")


def _stack(values: Iterable[Any]) -> NonTensorStack:
    return NonTensorStack.from_list([NonTensorData(v) for v in values])


def _rows(value: Any) -> int:
    return value.size(0) if isinstance(value, torch.Tensor) else len(value)


# ---- non-tensor entries ---------------------------------------------------------------------------------------------
def assign_non_tensor_data(tensor_dict: TensorDict, key: str, val: Any) -> None:
    """Store one batch-level value under ``key`` (as ``NonTensorData``)."""
    _require_tensordict(tensor_dict)
    tensor_dict[key] = NonTensorData(val)


def assign_non_tensor_stack(tensor_dict: TensorDict, key: str, val: list[Any]) -> None:
    """Store one value per row under ``key`` (as a ``NonTensorStack``); the values may be nested lists or dicts."""
    _require_tensordict(tensor_dict)
    if not isinstance(val, (list, tuple)):
        raise TypeError(f"assign_non_tensor_stack: {key!r} must be a list with one value per row, got {type(val)}")
    tensor_dict[key] = _stack(val)


def assign_non_tensor(tensor_dict: TensorDict, **kwargs: Any) -> TensorDict:
    """Store each keyword: a list becomes a per-row ``NonTensorStack``, anything else batch-level ``NonTensorData``
    (already wrapped values are stored as they are). Returns ``tensor_dict``."""
    _require_tensordict(tensor_dict)
    for key, val in kwargs.items():
        if isinstance(val, (NonTensorData, NonTensorStack)):
            tensor_dict[key] = val
        elif isinstance(val, list):
            assign_non_tensor_stack(tensor_dict, key, val)
        else:
            assign_non_tensor_data(tensor_dict, key, val)
    return tensor_dict


def unwrap_non_tensor_data(data: Any) -> Any:
    """The value inside a ``NonTensorData``; anything else is returned as is."""
    return data.data if isinstance(data, NonTensorData) else data


def get_non_tensor_data(data: TensorDict, key: str, default: Any) -> Any:
    """``data[key]`` unwrapped from ``NonTensorData``, or ``default`` if absent."""
    return unwrap_non_tensor_data(data.get(key, default))


# ---- building and reading -------------------------------------------------------------------------------------------
def get_tensordict(tensor_dict: dict[str, Any], non_tensor_dict: dict[str, Any] | None = None) -> TensorDict:
    """A TensorDict of ``N`` rows from tensors / per-row lists (``tensor_dict``) and batch-level values
    (``non_tensor_dict``).

    Every tensor and list in ``tensor_dict`` must have ``N`` rows (DataProtoError naming the key otherwise); a list
    becomes a ``NonTensorStack`` and may hold nested lists or dicts but no tensors (convert them to numpy). Nested
    tensors must be contiguous (jagged layout). Without any per-row entry the batch size is ``[]``.
    """
    columns: dict[str, Any] = {}
    batch_size: int | None = None
    first_key = None
    for key, val in tensor_dict.items():
        if isinstance(val, torch.Tensor) and val.is_nested and not val.is_contiguous():
            raise DataProtoError(f"nested tensor {key!r} must be contiguous (build it with layout=torch.jagged)")
        if isinstance(val, (list, tuple)):
            if any(isinstance(v, torch.Tensor) for v in val):
                raise TypeError(
                    f"list {key!r} holds torch.Tensor values; a list is stored as non-tensor data, "
                    "convert them to numpy first"
                )
            columns[key] = _stack(val)
        elif isinstance(val, (torch.Tensor, NonTensorStack)):
            columns[key] = val
        else:
            raise TypeError(f"tensor_dict[{key!r}] must be a tensor or a list, got {type(val).__name__}")
        rows = _rows(val)
        if batch_size is None:
            batch_size, first_key = rows, key
        elif rows != batch_size:
            raise DataProtoError(
                f"Batch size of tensor {key} is not consistent with other tensors. Expected {batch_size} "
                f"(from {first_key!r}), got {rows}"
            )
    for key, val in (non_tensor_dict or {}).items():
        if key in columns:
            raise DataProtoError(f"key {key!r} is given both per row (tensor_dict) and batch-level (non_tensor_dict)")
        columns[key] = NonTensorData(val)
    return TensorDict(columns, batch_size=[] if batch_size is None else [batch_size])


def get(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """``tensordict[key]`` as a tensor, a list (per-row values) or the plain value (batch-level); ``default`` if
    absent."""
    if key not in tensordict.keys():
        return default
    return _unwrap(tensordict.get(key))


def _unwrap(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, NonTensorStack):
        return output.tolist()
    if isinstance(output, NonTensorData):
        return output.data
    return output


def _take(tensordict: TensorDict, keys: Iterable[str], remove: bool) -> TensorDict:
    per_row: dict[str, Any] = {}
    batch_level: dict[str, Any] = {}
    keys = list(keys)
    missing = [k for k in keys if k not in tensordict.keys()]
    if missing:
        raise KeyError(
            f"key {missing[0]} not in tensordict (missing: {missing}; available: {sorted(tensordict.keys())})"
        )
    for key in keys:
        output = tensordict.get(key)
        if remove:
            tensordict.pop(key)
        if isinstance(output, NonTensorData):
            batch_level[key] = output.data
        else:
            per_row[key] = _unwrap(output)
    return get_tensordict(per_row, batch_level)


def get_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """A new TensorDict holding only ``keys`` (KeyError naming a missing one)."""
    return _take(tensordict, keys, remove=False)


def pop(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """Remove ``key`` and return it unwrapped as :func:`get` does; ``default`` if absent."""
    if key not in tensordict.keys():
        return default
    return _unwrap(tensordict.pop(key))


def pop_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """Remove ``keys`` from ``tensordict`` and return them as a new TensorDict (KeyError naming a missing one,
    before anything is removed)."""
    return _take(tensordict, keys, remove=True)


def split_tensordict(tensordict: TensorDict) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray], dict[str, Any]]:
    """Split into ``(tensors, per-row non-tensors as object arrays, batch-level values)`` (DataProto's three parts)."""
    tensors: dict[str, torch.Tensor] = {}
    non_tensors: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {}
    for key in tensordict.keys():
        value = tensordict.get(key)
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        elif isinstance(value, NonTensorStack):
            rows = value.tolist()
            arr = np.empty(len(rows), dtype=object)
            for i, row in enumerate(rows):
                arr[i] = row
            non_tensors[key] = arr
        elif isinstance(value, NonTensorData):
            meta[key] = value.data
        else:
            raise TypeError(f"entry {key!r} is a {type(value).__name__}; expected a tensor or non-tensor data")
    return tensors, non_tensors, meta


def contiguous(data: TensorDict) -> TensorDict:
    """A new TensorDict with every tensor made contiguous (``Tensor.contiguous()``; nested tensors too), per-row
    non-tensors kept per row and batch-level values kept batch-level (``TensorDict.contiguous`` would turn the latter
    into per-row stacks). A worker calls it on a TensorDict it received before writing into it in place."""
    _require_tensordict(data, "data")
    tensors: dict[str, Any] = {}
    batch_level: dict[str, Any] = {}
    for key in data.keys():
        value = data.get(key)
        if isinstance(value, NonTensorData):
            batch_level[key] = value.data
        elif isinstance(value, NonTensorStack):
            tensors[key] = value
        elif isinstance(value, torch.Tensor):
            tensors[key] = value.contiguous()
        else:
            raise TypeError(f"entry {key!r} is a {type(value).__name__}; expected a tensor or non-tensor data")
    return get_tensordict(tensors, batch_level)


# ---- row operations -------------------------------------------------------------------------------------------------
def concat_nested_tensors(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate contiguous 2-D nested (jagged) tensors along the batch dim: rows ``[a0, a1] + [b0]`` give
    ``[a0, a1, b0]``."""
    rows: list[torch.Tensor] = []
    for i, tensor in enumerate(tensors):
        if not (tensor.is_nested and tensor.is_contiguous()) or tensor.dim() != 2:
            raise DataProtoError(f"tensor {i} must be a contiguous 2-D nested tensor, got shape {tensor.shape}")
        rows.extend(tensor.unbind(0))
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def concat_tensordict(data: list[TensorDict]) -> TensorDict:
    """Concatenate TensorDicts along dim 0; nested tensors are joined row by row (:func:`concat_nested_tensors`).
    Every part must have the same nested keys."""
    if not data:
        raise DataProtoError("Must have at least one tensordict")
    nested = {k for k, v in data[0].items() if isinstance(v, torch.Tensor) and v.is_nested}
    if not nested:
        return TensorDict.cat(data, dim=0)
    regular = []
    for i, td in enumerate(data):
        mine = {k for k, v in td.items() if isinstance(v, torch.Tensor) and v.is_nested}
        if mine != nested:
            raise DataProtoError(
                f"All tensordicts must have the same set of nested tensors: part {i} has "
                f"{sorted(mine)}, part 0 has {sorted(nested)}"
            )
        regular.append(
            TensorDict({k: v for k, v in td.items() if k not in nested}, batch_size=td.batch_size, device=td.device)
        )
    output = TensorDict.cat(regular, dim=0)
    for key in nested:
        output[key] = concat_nested_tensors([td[key] for td in data])
    return output


def index_select_tensor_dict(batch: TensorDict | None, indices: torch.Tensor | list[int]) -> TensorDict | None:
    """Rows ``indices`` (1-D, any order, repeats allowed) of every entry; nested tensors are re-packed row by row and
    batch-level values are kept. ``None`` gives ``None``."""
    if batch is None:
        return None
    idx = torch.as_tensor(indices, dtype=torch.long)
    if idx.dim() != 1:
        raise DataProtoError(f"indices must be a 1D tensor, got shape {list(idx.shape)}")
    columns: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.is_nested:
            columns[key] = torch.nested.as_nested_tensor([value[int(i)] for i in idx], layout=torch.jagged)
        elif isinstance(value, torch.Tensor) or (isinstance(value, NonTensorStack) and value.shape):
            columns[key] = value[idx]
        else:
            columns[key] = value
    return TensorDict(columns, batch_size=[idx.shape[0]])


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the entries of ``tensor_dict2`` to ``tensor_dict1`` (in place) and return it; the batch sizes must match
    and a key in both must hold equal values (DataProtoError, also an AssertionError, naming it otherwise)."""
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(
            f"Two tensor dict must have identical batch size. Got {tensor_dict1.batch_size} and "
            f"{tensor_dict2.batch_size}"
        )
    for key in tensor_dict2.keys():
        theirs = tensor_dict2.get(key)
        if key not in tensor_dict1.keys():
            tensor_dict1[key] = theirs
            continue
        mine = tensor_dict1.get(key)
        if isinstance(theirs, torch.Tensor):
            same = isinstance(mine, torch.Tensor) and mine.shape == theirs.shape and torch.equal(mine, theirs)
        else:
            same = _unwrap(mine) == _unwrap(theirs)
        if not same:
            raise DataProtoError(f"{key} in tensor_dict1 and tensor_dict2 are not the same object")
    return tensor_dict1


def make_iterator(
    tensordict: TensorDict,
    mini_batch_size: int,
    epochs: int,
    seed: int | None = None,
    dataloader_kwargs: dict[str, Any] | None = None,
) -> Iterator[TensorDict]:
    """Yield ``epochs`` passes of mini-batches of ``mini_batch_size`` rows (a torch DataLoader over the rows;
    ``dataloader_kwargs`` go to it, e.g. ``shuffle=True``, drawn from a generator seeded with ``seed``)."""
    from torch.utils.data import DataLoader

    n = int(tensordict.batch_size[0])
    if mini_batch_size < 1 or n % mini_batch_size:
        raise DataProtoError(f"{n} % {mini_batch_size} != 0: the batch must divide into mini-batches")
    generator = None
    if seed is not None:
        generator = torch.Generator()
        generator.manual_seed(seed)
    loader = DataLoader(
        tensordict, batch_size=mini_batch_size, collate_fn=lambda x: x, generator=generator, **(dataloader_kwargs or {})
    )

    def _batches() -> Iterator[TensorDict]:
        for _ in range(epochs):
            yield from loader

    return _batches()


def assert_tensordict_eq(tensordict1: TensorDict, tensordict2: TensorDict) -> None:
    """Raise AssertionError naming the first difference: key sets, entry types, tensor values (nested tensors row by
    row) or non-tensor values."""
    keys1, keys2 = set(tensordict1.keys()), set(tensordict2.keys())
    if keys1 != keys2:
        raise AssertionError(f"key set diffs. Got {keys2=} vs {keys1=}")
    for key in tensordict1.keys():
        a, b = tensordict1[key], tensordict2[key]
        if type(a) is not type(b):
            raise AssertionError(f"The type of {key} must be the same. Got {type(a)} vs {type(b)}")
        if isinstance(a, torch.Tensor) and a.is_nested:
            rows_a, rows_b = a.unbind(), b.unbind()
            if len(rows_a) != len(rows_b) or not all(torch.equal(x, y) for x, y in zip(rows_a, rows_b)):
                raise AssertionError(f"nested tensor {key!r} differs")
        elif isinstance(a, torch.Tensor):
            if a.shape != b.shape or not torch.equal(a, b):
                raise AssertionError(f"tensor {key!r} differs")
        elif _unwrap(a) != _unwrap(b):
            raise AssertionError(f"value {key!r} differs: {_unwrap(a)!r} vs {_unwrap(b)!r}")


def pad_to_divisor(data: TensorDict, size_divisor: int) -> tuple[TensorDict, int]:
    """Append rows (repeating rows from the start, cycling) so the row count divides by ``size_divisor``.
    Returns ``(padded, pad_size)``; an empty TensorDict is returned unchanged with a warning."""
    _require_tensordict(data, "data")
    if not isinstance(size_divisor, int) or size_divisor < 1:
        raise DataProtoError(f"size_divisor must be a positive int, got {size_divisor!r}")
    n = len(data)
    if n == 0:
        logger.warning("padding a TensorDict with no rows: nothing changed")
        return data, 0
    if n % size_divisor == 0:
        return data, 0
    pad_size = size_divisor - n % size_divisor
    parts = [data]
    remaining = pad_size
    while remaining > 0:
        take = min(remaining, n)
        parts.append(data[:take])
        remaining -= take
    return torch.cat(parts), pad_size


def unpad(data: TensorDict, pad_size: int) -> TensorDict:
    """Drop the last ``pad_size`` rows (``data[:-pad_size]``; ``pad_size=0`` keeps everything)."""
    if pad_size < 0 or pad_size > len(data):
        raise DataProtoError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    return data[: len(data) - pad_size] if pad_size else data
