"""Unions of DataProto parts: tensors (``union_tensor_dict``), numpy arrays (``union_numpy_dict``) and plain
dicts (``union_two_dict``, used for ``meta_info``). A key present on both sides must hold equal values."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol.errors import DataProtoError
from verl.utils.py_functional import union_two_dict
from verl.utils.py_functional import values_equal as _values_equal

__all__ = ["union_numpy_dict", "union_tensor_dict", "union_two_dict"]


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return _values_equal(np.asarray(a), np.asarray(b))


def _merge_metrics(metric_dicts: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Merge per-worker ``{name: value | list}`` dicts into ``{name: [values from every worker, in order]}``."""
    merged: dict[str, list[Any]] = {}
    for metrics in metric_dicts:
        for name, value in metrics.items():
            bucket = merged.setdefault(name, [])
            if isinstance(value, (list, tuple)):
                bucket.extend(value)
            else:
                bucket.append(value)
    return merged


# ---- union helpers ---------------------------------------------------------------------------------------------------
def union_tensor_dict(tensor_dict1: TensorDict | None, tensor_dict2: TensorDict | None) -> TensorDict | None:
    """Add the keys of ``tensor_dict2`` to ``tensor_dict1`` (in place) and return it.

    Both must have the same ``batch_size``; a key present in both must hold equal tensors, otherwise a
    :class:`DataProtoError` (a ValueError and, as verl's ``assert``, an AssertionError) names the key. ``None``
    stands for "no tensors" and yields the other argument.
    """
    if tensor_dict1 is None:
        return tensor_dict2
    if tensor_dict2 is None:
        return tensor_dict1
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(
            f"cannot union batches of different sizes: {list(tensor_dict1.batch_size)} vs "
            f"{list(tensor_dict2.batch_size)}"
        )
    for key, value in tensor_dict2.items(include_nested=True, leaves_only=True):
        if key in tensor_dict1.keys(include_nested=True, leaves_only=True):
            mine = tensor_dict1.get(key)
            same = mine.shape == value.shape and mine.dtype == value.dtype and torch.equal(mine, value.to(mine.device))
            if not same:
                raise DataProtoError(
                    f"{key} in tensor_dict1 and tensor_dict2 are not the same object: union conflict on batch key "
                    f"{key!r}, both sides hold it with different values"
                )
        else:
            tensor_dict1.set(key, value)
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the arrays of ``tensor_dict2`` to ``tensor_dict1`` (in place) and return it.

    A key present in both must hold equal arrays (element-wise, NaN equal to NaN), otherwise DataProtoError naming it
    (verl's wording: "`key` in tensor_dict1 and tensor_dict2 are not the same object.").
    """
    for key, value in tensor_dict2.items():
        if key in tensor_dict1:
            if not _arrays_equal(np.asarray(tensor_dict1[key]), np.asarray(value)):
                raise DataProtoError(
                    f"`{key}` in tensor_dict1 and tensor_dict2 are not the same object. (union conflict on non-tensor "
                    f"key {key!r}: both sides hold it with different values)"
                )
        else:
            tensor_dict1[key] = value
    return tensor_dict1


_union_meta = union_two_dict
