"""How a DataProto is written to disk, pickled (to workers) and summarised: the methods of
:class:`DataProtoPersistence`, a base class of :class:`verl.protocol.DataProto`."""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import TensorDict

from verl.protocol.errors import DataProtoError
from verl.utils.fs import atomic_binary_file
from verl.utils.safe_serialization import compact_tensor as _compact
from verl.utils.safe_serialization import decode_array as _decode_array
from verl.utils.safe_serialization import encode_array as _encode_array
from verl.utils.safe_serialization import from_plain as _from_plain
from verl.utils.safe_serialization import to_plain as _to_plain

__all__ = ["DataProtoPersistence"]

_SAVE_FORMAT = "verl.DataProto"
_SAVE_VERSION = 1


# ---- helpers ---------------------------------------------------------------------------------------------------------
def _plain_tensor_dict(td: TensorDict, where: str, to_cpu: bool) -> dict[str, Any]:
    """Flatten a TensorDict into nested plain dicts of compact tensors; non-tensor leaves raise ValueError."""
    out: dict[str, Any] = {}
    for key, value in td.items():
        if isinstance(value, TensorDict):
            out[key] = _plain_tensor_dict(value, f"{where}.{key}", to_cpu)
        elif isinstance(value, torch.Tensor):
            value = value.cpu() if to_cpu else value
            out[key] = _compact(value)
        else:
            raise DataProtoError(f"batch key {where}.{key!r} holds a {type(value).__name__}, not a tensor")
    return out


class DataProtoPersistence:
    """``save_to_disk`` / ``load_from_disk``, pickling, ``get_data_info`` / ``print_size`` for a class with
    ``batch`` (TensorDict or None), ``non_tensor_batch`` and ``meta_info``."""

    batch: TensorDict | None
    non_tensor_batch: dict[str, Any]
    meta_info: dict[str, Any]

    # ---- persistence ------------------------------------------------------------------------------------------
    def _payload(self, to_cpu: bool) -> dict[str, Any]:
        batch = None if self.batch is None else _plain_tensor_dict(self.batch, "batch", to_cpu)
        batch_size = None if self.batch is None else list(self.batch.batch_size)
        return {"batch": batch, "batch_size": batch_size}

    def save_to_disk(self, filepath: str | os.PathLike) -> None:
        """Write the DataProto to ``filepath`` in a format ``torch.load(weights_only=True)`` reads back.

        Tensors are stored on CPU; non-tensors and meta_info are converted to python lists / dicts / scalars (numpy
        arrays are tagged so they come back as arrays). A value with no safe encoding raises ValueError naming its
        key, before anything is written. The write is atomic (temporary file, then ``os.replace``).
        """
        payload = {"format": _SAVE_FORMAT, "version": _SAVE_VERSION, **self._payload(to_cpu=True)}
        payload["non_tensor_batch"] = {
            k: _encode_array(v, f"non_tensor_batch[{k!r}]") for k, v in self.non_tensor_batch.items()
        }
        payload["meta_info"] = {k: _to_plain(v, f"meta_info[{k!r}]") for k, v in self.meta_info.items()}
        with atomic_binary_file(os.fspath(filepath)) as f:
            torch.save(payload, f)

    @classmethod
    def load_from_disk(cls, filepath: str | os.PathLike) -> Any:
        """Read a file written by ``save_to_disk`` (tensors land on CPU) without unpickling arbitrary objects."""
        path = os.fspath(filepath)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise DataProtoError(f"{path}: not a DataProto file readable with weights_only=True ({exc})") from exc
        if not isinstance(payload, dict) or payload.get("format") != _SAVE_FORMAT:
            raise DataProtoError(f"{path}: not a DataProto file (missing format tag {_SAVE_FORMAT!r})")
        if payload.get("version") != _SAVE_VERSION:
            raise DataProtoError(f"{path}: unsupported DataProto file version {payload.get('version')!r}")
        batch = None
        if payload["batch"] is not None:
            batch = TensorDict(payload["batch"], batch_size=payload["batch_size"])
        non_tensor = {k: _decode_array(v) for k, v in payload["non_tensor_batch"].items()}
        meta = {k: _from_plain(v) for k, v in payload["meta_info"].items()}
        return cls(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def __getstate__(self) -> dict[str, Any]:
        # A plain dict of compact tensors pickles much faster than a TensorDict and never drags parent storages.
        state = self._payload(to_cpu=False)
        state["device"] = None if self.batch is None or self.batch.device is None else str(self.batch.device)
        state["non_tensor_batch"] = self.non_tensor_batch
        state["meta_info"] = self.meta_info
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        batch = None
        if state["batch"] is not None:
            batch = TensorDict(state["batch"], batch_size=state["batch_size"], device=state.get("device"))
        self.batch = batch
        self.non_tensor_batch = state["non_tensor_batch"]
        self.meta_info = state["meta_info"]

    # ---- debugging --------------------------------------------------------------------------------------------
    def get_data_info(self) -> str:
        """A multi-line summary: batch size, every key with its shape / dtype, and the tensor bytes in MB."""
        lines = [f"DataProto(len={len(self)})"]
        tensor_bytes = 0
        if self.batch is not None:
            for key, value in self.batch.items(include_nested=True, leaves_only=True):
                tensor_bytes += value.numel() * value.element_size()
                lines.append(f"  batch[{key!r}]: {tuple(value.shape)} {value.dtype} on {value.device}")
        for key, value in self.non_tensor_batch.items():
            lines.append(f"  non_tensor_batch[{key!r}]: {value.shape} {value.dtype}")
        if self.meta_info:
            lines.append(f"  meta_info keys: {sorted(map(str, self.meta_info))}")
        lines.append(f"  tensor size: {tensor_bytes / 1024**2:.3f} MB")
        return "\n".join(lines)

    def print_size(self, prefix: str = "") -> None:
        """Print ``get_data_info()`` (for debugging)."""
        print(prefix + self.get_data_info())
