"""``DataProto`` and ``DataProtoItem``: the batch class itself (see :mod:`verl.protocol` for the overview)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol.config import DataProtoConfig
from verl.protocol.errors import DataProtoError
from verl.protocol.persistence import DataProtoPersistence
from verl.protocol.unions import _merge_metrics, _values_equal, union_numpy_dict, union_tensor_dict, union_two_dict
from verl.utils.safe_serialization import object_array as _object_array

__all__ = ["DataProto", "DataProtoItem"]


def _as_key_list(keys: str | Sequence[str] | None, what: str) -> list[str] | None:
    if keys is None:
        return None
    if isinstance(keys, str):
        return [keys]
    if not isinstance(keys, (list, tuple)):
        raise TypeError(f"{what} must be a str or a list of str, got {type(keys).__name__}")
    return list(keys)


_union_meta = union_two_dict


# ---- DataProtoItem / DataProto ---------------------------------------------------------------------------------------
@dataclass(eq=False)
class DataProtoItem:
    """One sample of a DataProto: its batch row (a TensorDict with ``batch_size=[]``), its non-tensor values and
    the meta_info of the batch it came from."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class DataProto(DataProtoPersistence):
    """A batch of ``N`` samples: tensors (``batch``), per-sample python values (``non_tensor_batch``) and
    batch-level values (``meta_info``). See the module docstring."""

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.non_tensor_batch is None:  # verl accepts None for "no non-tensors"
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    # ---- construction -----------------------------------------------------------------------------------------
    def check_consistency(self) -> None:
        """Check that ``batch`` has a leading batch dim and that every non-tensor array has that length.

        Raises TypeError for wrongly typed fields and ValueError naming the key and both sizes on a mismatch.
        """
        if self.batch is not None:
            if not isinstance(self.batch, TensorDict):
                raise TypeError(f"DataProto.batch must be a TensorDict, got {type(self.batch).__name__}")
            if len(self.batch.batch_size) == 0:
                raise DataProtoError("DataProto.batch must have at least one batch dimension, got batch_size=[]")
        if not isinstance(self.non_tensor_batch, dict):
            raise TypeError(f"non_tensor_batch must be a dict, got {type(self.non_tensor_batch).__name__}")
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"meta_info must be a dict, got {type(self.meta_info).__name__}")
        ref_key, ref_len = None, None
        if self.batch is not None:
            ref_key, ref_len = "batch", int(self.batch.batch_size[0])
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray):
                raise TypeError(
                    f"non_tensor_batch[{key!r}] must be a numpy array, got {type(value).__name__} "
                    "(use DataProto.from_dict / from_single_dict to convert lists)"
                )
            if value.ndim == 0:
                raise DataProtoError(f"non_tensor_batch[{key!r}] is a 0-d array; it needs one entry per sample")
            if ref_len is None:
                ref_key, ref_len = f"non_tensor_batch[{key!r}]", len(value)
            elif len(value) != ref_len:
                raise DataProtoError(
                    f"non_tensor_batch[{key!r}] has length {len(value)} but {ref_key} has batch size {ref_len}"
                )

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build a DataProto whose batch size is the first ``num_batch_dims`` dims of the tensors.

        Non-tensor lists are converted to 1-D object arrays. Tensors with differing leading dims raise
        :class:`DataProtoError` naming the key and both shapes. ``auto_padding=True`` marks this DataProto (in
        ``meta_info[DataProtoConfig.auto_padding_key]``) so DP dispatch pads it to a multiple of the rank count and
        ``chunk`` accepts uneven sizes (see :meth:`is_padding_enabled`).
        """
        tensors = dict(tensors or {})
        non_tensors = dict(non_tensors or {})
        if num_batch_dims < 1:
            raise DataProtoError(f"num_batch_dims must be >= 1, got {num_batch_dims}")
        batch = None
        if tensors:
            first_key = next(iter(tensors))
            batch_size: torch.Size | None = None
            for key, tensor in tensors.items():
                if not isinstance(tensor, torch.Tensor):
                    raise TypeError(f"tensors[{key!r}] must be a torch.Tensor, got {type(tensor).__name__}")
                if tensor.dim() < num_batch_dims:
                    raise DataProtoError(f"tensors[{key!r}] has {tensor.dim()} dims, fewer than {num_batch_dims=}")
                if batch_size is None:
                    batch_size = tensor.shape[:num_batch_dims]
                elif tensor.shape[:num_batch_dims] != batch_size:
                    raise DataProtoError(
                        f"tensors[{key!r}] has leading shape {list(tensor.shape[:num_batch_dims])} but "
                        f"tensors[{first_key!r}] has {list(batch_size)}"
                    )
            batch = TensorDict(tensors, batch_size=batch_size)
        converted = {
            key: value if isinstance(value, np.ndarray) else _object_array(list(value))
            for key, value in non_tensors.items()
        }
        meta = dict(meta_info or {})
        if auto_padding:
            meta[DataProtoConfig.auto_padding_key] = True
        return cls(batch=batch, non_tensor_batch=converted, meta_info=meta)

    @classmethod
    def from_single_dict(
        cls, data: dict[str, Any], meta_info: dict[str, Any] | None = None, auto_padding: bool = False
    ) -> DataProto:
        """Build a DataProto (of ``cls``) from one dict: tensors go to ``batch``, numpy arrays / lists / tuples to
        ``non_tensor_batch``; any other value raises DataProtoError naming the key. ``auto_padding``: as
        :meth:`from_dict`."""
        tensors, non_tensors = {}, {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, (np.ndarray, list, tuple)):
                non_tensors[key] = value
            else:
                raise DataProtoError(
                    f"from_single_dict: key {key!r} holds a {type(value).__name__}; expected a tensor, a numpy "
                    "array or a list (put batch-level values in meta_info)"
                )
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    @classmethod
    def from_tensordict(
        cls,
        tensor_dict: TensorDict,
        meta_info: dict[str, Any] | None = None,
        num_batch_dims: int = 1,
    ) -> DataProto:
        """Build a DataProto from a TensorDict (the inverse of :meth:`to_tensordict`).

        Tensor leaves go to ``batch`` (batch size: the first ``num_batch_dims`` dims of ``tensor_dict``); per-sample
        non-tensor entries (``NonTensorStack``, one value per row) go to ``non_tensor_batch`` as object arrays;
        batch-level entries (``NonTensorData``) go to ``meta_info``, updated by ``meta_info`` if given.
        """
        from verl.utils.tensordict_utils import split_tensordict

        tensors, non_tensors, meta = split_tensordict(tensor_dict)
        meta.update(meta_info or {})
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta, num_batch_dims=num_batch_dims)

    def to_tensordict(self) -> TensorDict:
        """One TensorDict holding everything: the tensors, each non-tensor column as a ``NonTensorStack`` (read back
        as a list) and each ``meta_info`` entry as ``NonTensorData`` (read back as the value)."""
        from verl.utils.tensordict_utils import get_tensordict

        columns: dict[str, Any] = dict(self.batch.items()) if self.batch is not None else {}
        for key, value in self.non_tensor_batch.items():
            columns[key] = list(value)
        return get_tensordict(columns, dict(self.meta_info))

    def is_padding_enabled(self) -> bool:
        """True when this DataProto was built with ``auto_padding=True`` or ``DataProtoConfig.auto_padding`` is on
        (``VERL_AUTO_PADDING=1`` also turns it on)."""
        return bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding

    # ---- size and indexing ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        if self.batch is not None:
            return int(self.batch.batch_size[0])
        if self.non_tensor_batch:
            return len(next(iter(self.non_tensor_batch.values())))
        return 0

    def __getitem__(self, item: Any) -> DataProto | DataProtoItem:
        """``data[i]`` -> DataProtoItem; ``data[slice]``, ``data[indices]`` and ``data[bool_mask]`` -> DataProto."""
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            n = len(self)
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} out of range for DataProto of length {n}")
            i %= n
            return DataProtoItem(
                batch=self.batch[i] if self.batch is not None else None,
                non_tensor_batch={k: v[i] for k, v in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, tuple, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        raise TypeError(f"DataProto indices must be int, slice, list, np.ndarray or torch.Tensor, not {type(item)}")

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``start:end:step`` (views of the tensors, like python slicing)."""
        s = slice(start, end, step)
        return DataProto(
            batch=self.batch[s] if self.batch is not None else None,
            non_tensor_batch={k: v[s] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    def select_idxs(self, idxs: Sequence[int] | np.ndarray | torch.Tensor) -> DataProto:
        """Rows at integer positions ``idxs`` (any order, repeats allowed) or where the bool mask ``idxs`` is true."""
        idx = idxs.detach().cpu().numpy() if isinstance(idxs, torch.Tensor) else np.asarray(idxs)
        if idx.dtype == bool:
            if idx.shape != (len(self),):
                raise DataProtoError(f"boolean mask has shape {list(idx.shape)} but the batch has {len(self)} rows")
            idx = np.flatnonzero(idx)
        elif idx.size == 0:
            idx = idx.astype(np.int64)
        elif idx.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers or booleans, got dtype {idx.dtype}")
        idx = idx.reshape(-1).astype(np.int64)
        return DataProto(
            batch=self.batch[torch.from_numpy(idx)] if self.batch is not None else None,
            non_tensor_batch={k: v[idx] for k, v in self.non_tensor_batch.items()},
            meta_info=dict(self.meta_info),
        )

    # ---- key-level operations ---------------------------------------------------------------------------------
    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto holding only the named keys (``None`` keeps every key of that part).

        Without ``deepcopy`` the tensors and arrays are shared with ``self``. A missing key raises KeyError.
        """
        batch_keys = _as_key_list(batch_keys, "batch_keys")
        nt_keys = _as_key_list(non_tensor_batch_keys, "non_tensor_batch_keys")
        meta_keys = _as_key_list(meta_info_keys, "meta_info_keys")
        batch = self.batch
        if batch_keys is not None:
            if batch is None:
                if batch_keys:
                    raise KeyError(f"batch keys {batch_keys} requested but this DataProto has no tensors")
            else:
                missing = [k for k in batch_keys if k not in batch.keys()]
                if missing:
                    raise KeyError(f"batch keys {missing} not found; available: {sorted(batch.keys())}")
                batch = batch.select(*batch_keys)
        non_tensor = self._pick(self.non_tensor_batch, nt_keys, "non_tensor_batch")
        meta = self._pick(self.meta_info, meta_keys, "meta_info")
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    @staticmethod
    def _pick(source: dict[str, Any], keys: list[str] | None, what: str) -> dict[str, Any]:
        if keys is None:
            return dict(source)
        missing = [k for k in keys if k not in source]
        if missing:
            raise KeyError(f"{what} keys {missing} not found; available: {sorted(source)}")
        return {k: source[k] for k in keys}

    def pop(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
    ) -> DataProto:
        """Remove the named keys from ``self`` and return them as a new DataProto (missing key -> KeyError)."""
        batch_keys = _as_key_list(batch_keys, "batch_keys") or []
        nt_keys = _as_key_list(non_tensor_batch_keys, "non_tensor_batch_keys") or []
        meta_keys = _as_key_list(meta_info_keys, "meta_info_keys") or []
        # validate everything first so a bad key leaves self untouched
        popped = self.select(batch_keys=batch_keys, non_tensor_batch_keys=nt_keys, meta_info_keys=meta_keys)
        if self.batch is not None:
            for key in batch_keys:
                del self.batch[key]
        for key in nt_keys:
            del self.non_tensor_batch[key]
        for key in meta_keys:
            del self.meta_info[key]
        if not batch_keys:
            popped.batch = None
        return popped

    def rename(
        self, old_keys: str | Sequence[str] | None = None, new_keys: str | Sequence[str] | None = None
    ) -> DataProto:
        """Rename batch keys ``old_keys[i] -> new_keys[i]`` in place and return ``self``."""
        old = _as_key_list(old_keys, "old_keys") or []
        new = _as_key_list(new_keys, "new_keys") or []
        if len(old) != len(new):
            raise DataProtoError(f"rename needs as many new keys as old keys, got {old} -> {new}")
        if old and self.batch is None:
            raise KeyError(f"cannot rename {old}: this DataProto has no tensors")
        for o, n in zip(old, new):
            if o not in self.batch.keys():
                raise KeyError(f"rename: batch key {o!r} not found; available: {sorted(self.batch.keys())}")
            self.batch.rename_key_(o, n)
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other``'s keys into ``self`` (in place) and return ``self``.

        Batch sizes must match; a key present on both sides with different values raises ValueError naming it.
        """
        if not self._is_empty() and not other._is_empty() and len(self) != len(other):
            raise DataProtoError(f"cannot union DataProtos of different batch sizes: {len(self)} vs {len(other)}")
        self.batch = union_tensor_dict(self.batch, other.batch)
        self.non_tensor_batch = union_numpy_dict(self.non_tensor_batch, other.non_tensor_batch)
        self.meta_info = _union_meta(self.meta_info, other.meta_info)
        self.check_consistency()
        return self

    def _is_empty(self) -> bool:
        return self.batch is None and not self.non_tensor_batch

    # ---- row-level operations ---------------------------------------------------------------------------------
    @staticmethod
    def concat(data: list[DataProto], meta_info_conflicts: str = "raise") -> DataProto:
        """Concatenate along the batch dim (the type of ``data[0]`` is kept) and merge the parts' meta_info.

        As upstream verl's ``DataProto.concat``: every part's non-metric meta_info keys are kept; a key held by
        several parts must hold equal values, otherwise ``DataProtoError("Conflicting values for meta_info key 'k'
        ...")`` (an AssertionError, as upstream's ``assert``) -- unless ``meta_info_conflicts="first"``, where the
        first part holding the key wins (for concatenating batches of different steps, whose seeds differ).
        ``meta_info["metrics"]`` of every part, a dict ``{name: value | list}`` or a list of such dicts (one per
        worker), is merged into ``{name: [values in part order]}``.
        """
        if not data:
            raise DataProtoError("DataProto.concat needs at least one DataProto")
        if meta_info_conflicts not in ("raise", "first"):
            raise DataProtoError(f"meta_info_conflicts must be 'raise' or 'first', got {meta_info_conflicts!r}")
        has_batch = [d.batch is not None for d in data]
        if any(has_batch) and not all(has_batch):
            raise DataProtoError(f"cannot concat DataProtos with and without tensors (has batch: {has_batch})")
        for i, d in enumerate(data[1:], start=1):
            for what, mine, first in (
                ("batch", d.batch, data[0].batch),
                ("non-tensor", d.non_tensor_batch, data[0].non_tensor_batch),
            ):
                if mine is not None and set(mine.keys()) != set(first.keys()):
                    raise DataProtoError(
                        f"cannot concat: part {i} has {what} keys {sorted(mine.keys())}, "
                        f"part 0 has {sorted(first.keys())}"
                    )
        batch = torch.cat([d.batch for d in data], dim=0) if all(has_batch) else None
        non_tensor = {
            k: np.concatenate([d.non_tensor_batch[k] for d in data], axis=0) for k in data[0].non_tensor_batch
        }
        meta: dict[str, Any] = {}
        owner: dict[str, int] = {}
        metric_dicts: list[dict[str, Any]] = []
        for i, d in enumerate(data):
            for key, value in d.meta_info.items():
                if key == "metrics":
                    if value is None:
                        continue
                    parts = value if isinstance(value, list) else [value]
                    for m in parts:
                        if not isinstance(m, dict):
                            raise DataProtoError(
                                f"part {i}: meta_info['metrics'] must be a dict of name -> value or a list of such "
                                f"dicts, got {type(m).__name__}"
                            )
                    metric_dicts.extend(parts)
                elif key not in meta:
                    meta[key], owner[key] = value, i
                elif meta_info_conflicts == "raise" and not _values_equal(meta[key], value):
                    raise DataProtoError(
                        f"Conflicting values for meta_info key '{key}': {meta[key]!r} (part {owner[key]}) vs "
                        f"{value!r} (part {i})"
                    )
        if metric_dicts:
            meta["metrics"] = _merge_metrics(metric_dicts)
        return type(data[0])(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` parts (views), in order.

        The batch size must be divisible by ``chunks`` unless :meth:`is_padding_enabled`; then, as ``torch.chunk``,
        every part has ``ceil(N / chunks)`` rows except the last non-empty one (10 rows in 4 chunks: 3, 3, 3, 1),
        and parts past the end are empty, so exactly ``chunks`` parts come back.
        """
        if not isinstance(chunks, int) or chunks < 1:
            raise DataProtoError(f"chunks must be a positive int, got {chunks!r}")
        n = len(self)
        if n % chunks == 0:
            size = n // chunks
            return [self.slice(i * size, (i + 1) * size) for i in range(chunks)]
        if not self.is_padding_enabled():
            raise DataProtoError(
                f"only support equal chunk. Got size of DataProto {n} and chunk {chunks}: {n} % {chunks} = "
                f"{n % chunks}; pad it first with pad_dataproto_to_divisor(data, {chunks}) and unpad the result, "
                "or enable auto-padding (DataProto.from_dict(..., auto_padding=True))"
            )
        size = -(-n // chunks)
        return [self.slice(min(i * size, n), min((i + 1) * size, n)) for i in range(chunks)]

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> DataProto:
        """Cut every row into ``n_split`` rows along its second dim (the "columns").

        For a key in ``split_keys`` of shape ``[N, C, ...]`` (``C`` divisible by ``n_split``) row ``i`` becomes rows
        ``i * n_split + j`` holding columns ``j*C/n_split : (j+1)*C/n_split``; every other key is repeated
        ``n_split`` times (interleaved). Non-tensor keys in ``split_keys`` must hold ``C`` values per row.
        Returns ``N * n_split`` rows; meta_info is kept.
        """
        if not isinstance(n_split, int) or n_split < 1:
            raise DataProtoError(f"n_split must be a positive int, got {n_split!r}")
        split_keys = list(split_keys or [])
        n = len(self)
        known = set(self.batch.keys() if self.batch is not None else ()) | set(self.non_tensor_batch)
        missing = [k for k in split_keys if k not in known]
        if missing:
            raise KeyError(f"unfold_column_chunks: split_keys {missing} not found; available: {sorted(known)}")
        repeated = self.repeat(n_split, interleave=True)
        batch = None
        if self.batch is not None:
            columns = {}
            for key, value in self.batch.items():
                if key in split_keys:
                    if value.dim() < 2 or value.shape[1] % n_split:
                        raise DataProtoError(
                            f"unfold_column_chunks: batch key {key!r} has shape {list(value.shape)}; its dim 1 must "
                            f"be divisible by n_split={n_split}"
                        )
                    width = value.shape[1] // n_split
                    columns[key] = value.reshape(n * n_split, width, *value.shape[2:])
                else:
                    columns[key] = repeated.batch[key]
            batch = TensorDict(columns, batch_size=[n * n_split])
        non_tensor = {}
        for key, value in self.non_tensor_batch.items():
            if key not in split_keys:
                non_tensor[key] = repeated.non_tensor_batch[key]
                continue
            parts: list[Any] = []
            for row in value:
                row = list(row)
                if len(row) % n_split:
                    raise DataProtoError(
                        f"unfold_column_chunks: non-tensor key {key!r} has a row of {len(row)} values, not "
                        f"divisible by n_split={n_split}"
                    )
                width = len(row) // n_split
                parts.extend(row[j * width : (j + 1) * width] for j in range(n_split))
            non_tensor[key] = _object_array(parts)
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=dict(self.meta_info))

    def split(self, split_size: int) -> list[DataProto]:
        """Split into consecutive parts of ``split_size`` rows; the last part may be smaller."""
        if not isinstance(split_size, int) or split_size < 1:
            raise DataProtoError(f"split_size must be a positive int, got {split_size!r}")
        return [self.slice(i, i + split_size) for i in range(0, len(self), split_size)]

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row ``repeat_times`` times: rows ``[a, b]`` become ``[a, a, b, b]`` with ``interleave``
        (the GRPO layout, samples of one prompt adjacent) and ``[a, b, a, b]`` without."""
        if repeat_times < 1:
            raise DataProtoError(f"repeat_times must be >= 1, got {repeat_times}")
        base = np.arange(len(self))
        idx = np.repeat(base, repeat_times) if interleave else np.tile(base, repeat_times)
        return self.select_idxs(idx)

    def sample_level_repeat(self, repeat_times: Sequence[int] | np.ndarray | torch.Tensor) -> DataProto:
        """Repeat row i ``repeat_times[i]`` times, keeping repeats adjacent (rows ``[a, b]``, times ``[2, 1]``
        -> ``[a, a, b]``)."""
        counts = np.asarray(repeat_times.cpu() if isinstance(repeat_times, torch.Tensor) else repeat_times)
        if counts.shape != (len(self),) or (counts < 0).any():
            raise DataProtoError(f"repeat_times must be {len(self)} non-negative ints, got {counts.tolist()}")
        return self.select_idxs(np.repeat(np.arange(len(self)), counts))

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the last row (``padding_candidate="first"``: of the first row), in
        place (verl's ``DataProto.padding``)."""
        if padding_size < 0:
            raise DataProtoError(f"padding_size must be >= 0, got {padding_size}")
        if padding_size == 0:
            return
        if len(self) == 0:
            raise DataProtoError("cannot pad a DataProto without rows")
        candidate = self.select_idxs([0 if padding_candidate == "first" else len(self) - 1])
        padded = DataProto.concat([self, candidate.repeat(padding_size)])
        self.batch = padded.batch
        self.non_tensor_batch = padded.non_tensor_batch

    def reorder(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        """Permute the rows in place: row ``i`` becomes old row ``indices[i]``."""
        reordered = self.select_idxs(indices)
        self.batch = reordered.batch
        self.non_tensor_batch = reordered.non_tensor_batch

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensors to ``device`` (in place) and return ``self``."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def make_iterator(
        self,
        mini_batch_size: int,
        epochs: int,
        seed: int | None = None,
        dataloader_kwargs: dict[str, Any] | None = None,
    ) -> Iterator[DataProto]:
        """Yield ``epochs * len(self) // mini_batch_size`` mini-batches of ``mini_batch_size`` rows.

        ``dataloader_kwargs`` accepts ``shuffle`` (default False; a new permutation each epoch drawn from a
        ``torch.Generator`` seeded with ``seed``) and ``drop_last`` (default False: the batch size must then be
        divisible by ``mini_batch_size``).
        """
        kwargs = dict(dataloader_kwargs or {})
        unknown = set(kwargs) - {"shuffle", "drop_last"}
        if unknown:
            raise DataProtoError(
                f"make_iterator: unsupported dataloader_kwargs {sorted(unknown)} (use shuffle/drop_last)"
            )
        if mini_batch_size < 1 or epochs < 0:
            raise DataProtoError(
                f"make_iterator needs mini_batch_size >= 1 and epochs >= 0, got {mini_batch_size}, {epochs}"
            )
        n = len(self)
        if n % mini_batch_size != 0 and not kwargs.get("drop_last", False):
            raise DataProtoError(
                f"batch size {n} is not divisible by mini_batch_size {mini_batch_size}; pass drop_last=True in "
                "dataloader_kwargs or pad the batch"
            )
        shuffle = bool(kwargs.get("shuffle", False))
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()

        def _iterate() -> Iterator[DataProto]:
            for _ in range(epochs):
                order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
                for start in range(0, n - mini_batch_size + 1, mini_batch_size):
                    yield self.select_idxs(order[start : start + mini_batch_size])

        return _iterate()
