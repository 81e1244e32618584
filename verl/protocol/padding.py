"""Padding a DataProto to a multiple of the rank count (and stripping it again), and ``collate_fn``."""

from __future__ import annotations

import numpy as np
import torch

from verl.protocol.data_proto import DataProto, DataProtoItem
from verl.protocol.errors import DataProtoError
from verl.utils.safe_serialization import object_array as _object_array

__all__ = ["collate_fn", "pad_dataproto_to_divisor", "unpad_dataproto"]


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append ``pad_size`` rows so that ``len(padded) % size_divisor == 0``; the padding repeats rows from the start
    (row 0, 1, ..., cycling if ``pad_size > len(data)``). Returns ``(padded, pad_size)``."""
    if not isinstance(size_divisor, int) or size_divisor < 1:
        raise DataProtoError(f"size_divisor must be a positive int, got {size_divisor!r}")
    n = len(data)
    if n == 0 or n % size_divisor == 0:
        return data, 0
    pad_size = size_divisor - n % size_divisor
    padding = data.select_idxs(np.arange(pad_size) % n)
    return DataProto.concat([data, padding]), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows added by ``pad_dataproto_to_divisor``.

    A DataProto without rows (e.g. a worker's metrics-only output of a padded call) is returned unchanged.
    """
    if data._is_empty() and pad_size >= 0:
        return data
    if pad_size < 0 or pad_size > len(data):
        raise DataProtoError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    return data[: len(data) - pad_size] if pad_size else data


def collate_fn(x: list[DataProtoItem]) -> DataProto:
    """Stack a list of DataProtoItems (e.g. from a torch DataLoader over a DataProto) back into a DataProto;
    meta_info comes from the first item. ``x``: the items (verl's parameter name)."""
    data_items = x
    if not data_items:
        raise DataProtoError("collate_fn needs at least one DataProtoItem")
    batch = None
    if data_items[0].batch is not None:
        batch = torch.stack([item.batch for item in data_items]).contiguous()
    non_tensor = {
        k: _object_array([item.non_tensor_batch[k] for item in data_items]) for k in data_items[0].non_tensor_batch
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(data_items[0].meta_info))
