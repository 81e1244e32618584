"""Safe (no arbitrary unpickling) encoding of python values for ``torch.save`` / ``torch.load(weights_only=True)``.

Numpy arrays become tagged dicts of plain lists, tensors stay tensors, and anything that ``weights_only`` loading
could not rebuild is refused up front with an error naming where it was found. Used by ``DataProto.save_to_disk``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_ARRAY_TAG = "__ndarray__"
# numpy kinds whose ``tolist()`` yields only bool/int/float/str, all of which torch.load(weights_only=True) accepts
_PLAIN_NUMPY_KINDS = frozenset("biufU")


def object_array(values: Sequence[Any]) -> np.ndarray:
    """Build a 1-D object array of ``len(values)`` without numpy turning equal-length inner lists into a 2-D array."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def compact_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """Return ``tensor`` backed by a storage of exactly its own size.

    A view (a chunk or slice of a larger batch) otherwise drags its whole parent storage through pickle and
    ``torch.save``, so shipping one chunk to a worker would cost as much as shipping the full batch.
    """
    needed = tensor.numel() * tensor.element_size()
    if not tensor.is_contiguous() or tensor.untyped_storage().nbytes() != needed:
        return tensor.contiguous().clone()
    return tensor


def to_plain(value: Any, where: str) -> Any:
    """Convert a value into types ``torch.load(weights_only=True)`` can rebuild; raise ValueError naming ``where``."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, np.generic):
        return to_plain(value.item(), where)
    if isinstance(value, torch.Tensor):
        return compact_tensor(value.detach().cpu())
    if isinstance(value, np.ndarray):
        return encode_array(value, where)
    if isinstance(value, (list, tuple)):
        items = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        if _ARRAY_TAG in value:
            raise ValueError(f"{where}: dict key {_ARRAY_TAG!r} is reserved by DataProto.save_to_disk")
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise ValueError(f"{where}: dict key {k!r} of type {type(k).__name__} cannot be saved safely")
            out[k] = to_plain(v, f"{where}[{k!r}]")
        return out
    raise ValueError(
        f"{where}: value of type {type(value).__name__} cannot be saved safely (allowed: None, bool, int, float, "
        "str, bytes, list, tuple, dict, numpy arrays/scalars, tensors)"
    )


def encode_array(arr: np.ndarray, where: str) -> dict[str, Any]:
    if arr.dtype.kind in _PLAIN_NUMPY_KINDS:
        values = arr.reshape(-1).tolist()
    else:
        values = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(arr.reshape(-1))]
    dtype = "object" if arr.dtype.kind not in _PLAIN_NUMPY_KINDS else arr.dtype.str
    return {_ARRAY_TAG: True, "dtype": dtype, "shape": list(arr.shape), "values": values}


def from_plain(value: Any) -> Any:
    """Inverse of ``_to_plain``: rebuild numpy arrays from their tagged dicts."""
    if isinstance(value, dict):
        if value.get(_ARRAY_TAG) is True:
            return decode_array(value)
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(from_plain(v) for v in value)
    return value


def decode_array(enc: dict[str, Any]) -> np.ndarray:
    shape = tuple(enc["shape"])
    if enc["dtype"] == "object":
        flat = object_array([from_plain(v) for v in enc["values"]])
        return flat.reshape(shape)
    return np.array(enc["values"], dtype=np.dtype(enc["dtype"])).reshape(shape)
