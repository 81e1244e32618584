"""Unions of DataProto parts: tensors (``union_tensor_dict``), numpy arrays (``union_numpy_dict``) and plain
dicts (``union_two_dict``, used for ``meta_info``). A key present on both sides must hold equal values."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol.errors import DataProtoError

__all__ = ["union_numpy_dict", "union_tensor_dict", "union_two_dict"]


def _values_equal(a: Any, b: Any, _seen: frozenset[tuple[int, int]] = frozenset()) -> bool:
    """Element equality that treats NaN == NaN and compares arrays / tensors by content.

    Object arrays, dicts and lists are compared element by element. Containers that hold themselves (an object
    array stored in its own cell) compare equal when their structure does: a pair of containers already under
    comparison is taken as equal instead of recursing forever.
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    containers = (np.ndarray, dict, list, tuple)
    if isinstance(a, containers) and isinstance(b, containers):
        pair = (id(a), id(b))
        if pair in _seen:
            return True
        _seen = _seen | {pair}
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return False
        if x.dtype != object and y.dtype != object:
            try:
                return bool(np.array_equal(x, y, equal_nan=True))
            except TypeError:  # equal_nan is unsupported for strings
                return bool(np.array_equal(x, y))
        return all(_values_equal(u, v, _seen) for u, v in zip(x.reshape(-1), y.reshape(-1)))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k], _seen) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_values_equal(x, y, _seen) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


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


def union_two_dict(dict1: dict[str, Any], dict2: dict[str, Any]) -> dict[str, Any]:
    """Add the entries of ``dict2`` to ``dict1`` (in place) and return it; a key in both must hold equal values
    (DataProtoError naming it otherwise). Used for ``meta_info``."""
    for key, value in dict2.items():
        if key in dict1:
            if not _values_equal(dict1[key], value):
                raise DataProtoError(
                    f"{key} in meta_dict1 and meta_dict2 are not the same object: union conflict on meta_info key "
                    f"{key!r}, {dict1[key]!r} vs {value!r}"
                )
        else:
            dict1[key] = value
    return dict1


_union_meta = union_two_dict
