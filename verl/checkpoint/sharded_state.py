"""Per-rank shard files: the one on-disk format of model and optimizer state in a checkpoint.

Every rank writes the part of each tensor it holds, without gathering anything, and any world size reads them back
(resharding happens on load)::

    <role dir>/model_world_size_W_rank_R.safetensors    model tensors rank R of a W-rank save owned
    <role dir>/optim_world_size_W_rank_R.safetensors    its optimizer state, same scheme (see optimizer_state.py)

A stored tensor is a *piece*: the block of the full tensor that starts at ``offset`` and has the stored tensor's
shape. A DTensor (FSDP2: ``Shard(0)``; HSDP: ``(Replicate(), Shard(0))``; any ``Shard(d)`` mix) contributes its local
block, written only by the rank with coordinate 0 on every replicated mesh dimension, so no byte is stored twice;
a plain tensor (replicated on every rank) is written whole by rank 0. Names that alias one tensor (tied
embeddings) are stored once. Each file's safetensors header carries its own index under the metadata key
``verl_shards`` (JSON)::

    {"format": "verl-shards", "version": 2, "world_size": W, "rank": R,
     "tensors": {"<name>": {"shape": [full shape], "dtype": "float32", "offset": [block start per dim]}},
     "aliases": {"<name>": "<stored name>"}, "meta": {...}}

so a reader needs nothing but the files. :class:`ShardReader` assembles any block of any tensor from the pieces
that overlap it (reading only those bytes, through safetensors' lazy slices), which is how a rank of a new world
size gets its own shard, and how :func:`read_full_state_dict` rebuilds whole tensors for the model merger.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from verl.utils.fs import TMP_PREFIX, fsync_dir

__all__ = [
    "SHARD_FORMAT",
    "ShardReader",
    "has_shards",
    "hf_weights_state_dict",
    "load_state_shards",
    "read_full_state_dict",
    "save_state_shards",
    "shard_filename",
]

SHARD_FORMAT = "verl-shards"
SHARD_VERSION = 2
_META_KEY = "verl_shards"


def shard_filename(kind: str, rank: int, world_size: int) -> str:
    """``{kind}_world_size_{W}_rank_{R}.safetensors`` (``kind``: ``model`` or ``optim``)."""
    return f"{kind}_world_size_{world_size}_rank_{rank}.safetensors"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtensor_types() -> tuple[Any, Any]:
    try:
        from torch.distributed.tensor import DTensor, Replicate
    except ImportError:  # pragma: no cover - torch without distributed
        return None, None
    return DTensor, Replicate


def _local_block(tensor: torch.Tensor, rank: int) -> tuple[torch.Tensor | None, list[int]]:
    """``(local data or None when this rank does not own it, global offset)`` of one state tensor."""
    DTensor, Replicate = _dtensor_types()
    if DTensor is not None and isinstance(tensor, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        mesh, placements = tensor.device_mesh, tuple(tensor.placements)
        coordinate = mesh.get_coordinate() or [0] * mesh.ndim
        # a replicated mesh dimension holds the same block on every coordinate: the first one writes it
        owner = all(c == 0 for c, p in zip(coordinate, placements) if isinstance(p, Replicate) or p.is_partial())
        if any(p.is_partial() for p in placements):
            raise ValueError("cannot save a DTensor with a Partial placement (reduce it first)")
        _shape, offset = compute_local_shape_and_global_offset(tensor.shape, mesh, placements)
        local = tensor.to_local()
        return (local if owner and local.numel() > 0 else None), list(offset)
    return (tensor if rank == 0 else None), [0] * tensor.dim()


def _atomic_save_safetensors(tensors: dict[str, torch.Tensor], metadata: dict[str, str], target: str) -> None:
    from safetensors.torch import save_file

    directory = os.path.dirname(target) or "."
    tmp = os.path.join(directory, f"{TMP_PREFIX}{os.path.basename(target)}.{uuid.uuid4().hex[:8]}")
    try:
        save_file(tensors, tmp, metadata=metadata)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(directory)


def save_state_shards(
    state: Mapping[str, torch.Tensor],
    path: str,
    kind: str,
    rank: int,
    world_size: int,
    meta: dict[str, Any] | None = None,
) -> str:
    """Write this rank's pieces of ``state`` to ``<path>/{kind}_world_size_W_rank_R.safetensors`` (atomically).

    Every rank calls it, for the same ``state`` names; nothing is communicated. ``meta`` (JSON-able) is stored in
    the header, read back as :attr:`ShardReader.meta` (rank 0's). Returns the file's path.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"save_state_shards: rank {rank} is outside world size {world_size}")
    os.makedirs(path, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    index: dict[str, dict[str, Any]] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"save_state_shards: {name!r} is a {type(value).__name__}, not a tensor")
        local, offset = _local_block(value.detach(), rank)
        if local is None:
            continue
        # same storage, offset, shape, strides and dtype: the same tensor (a transposed view of a square one is not)
        storage = local.untyped_storage().data_ptr()
        identity = (storage, local.storage_offset(), tuple(local.shape), tuple(local.stride()), local.dtype)
        if identity in seen and index[seen[identity]]["offset"] == offset:
            aliases[name] = seen[identity]  # a tied weight: one copy on disk
            continue
        seen[identity] = name
        data = local.to("cpu")
        # safetensors writes whole storages: a view into a larger (or shared) buffer gets its own copy
        if not data.is_contiguous() or data.untyped_storage().nbytes() != data.nbytes:
            data = data.contiguous().clone()
        tensors[name] = data
        index[name] = {"shape": list(value.shape), "dtype": _dtype_name(value.dtype), "offset": offset}
    header = {
        "format": SHARD_FORMAT,
        "version": SHARD_VERSION,
        "world_size": int(world_size),
        "rank": int(rank),
        "tensors": index,
        "aliases": aliases,
        "meta": meta or {},
    }
    target = os.path.join(path, shard_filename(kind, rank, world_size))
    _atomic_save_safetensors(tensors, {_META_KEY: json.dumps(header)}, target)
    return target


_FILE_RE = re.compile(r"(?P<kind>[a-z]+)_world_size_(?P<ws>\d+)_rank_(?P<rank>\d+)\.safetensors")


def has_shards(path: str, kind: str = "model") -> bool:
    """Whether ``path`` holds ``{kind}_world_size_W_rank_R.safetensors`` files."""
    return bool(glob.glob(os.path.join(glob.escape(path), f"{kind}_world_size_*_rank_*.safetensors")))


@dataclass
class _Piece:
    handle: Any
    file: str
    offset: list[int]
    shape: list[int]


@dataclass
class _Entry:
    shape: list[int]
    dtype: torch.dtype
    stored_name: str
    pieces: list[_Piece] = field(default_factory=list)


class ShardReader:
    """Reads the shard files of one ``kind`` in a role directory, whatever world size wrote them.

    Args:
        path: the role directory (``global_step_N/actor``).
        kind: ``model`` or ``optim``.

    Raises FileNotFoundError when no file or not every rank's file is present, ValueError (naming the file) when a
    header is not a verl shard index or pieces do not cover a tensor.
    """

    def __init__(self, path: str, kind: str = "model") -> None:
        from safetensors import safe_open

        self.path, self.kind = path, kind
        found: dict[int, dict[int, str]] = {}
        for file in glob.glob(os.path.join(glob.escape(path), f"{kind}_world_size_*_rank_*.safetensors")):
            m = _FILE_RE.fullmatch(os.path.basename(file))
            if m and m.group("kind") == kind:
                found.setdefault(int(m.group("ws")), {})[int(m.group("rank"))] = file
        if not found:
            raise FileNotFoundError(f"{path}: no {kind} shard files ({shard_filename(kind, 0, 1)} and the like)")
        if len(found) > 1:
            raise ValueError(f"{path}: {kind} shards of several world sizes {sorted(found)}; expected one save")
        ((self.world_size, by_rank),) = found.items()
        missing = [shard_filename(kind, r, self.world_size) for r in range(self.world_size) if r not in by_rank]
        if missing:
            raise FileNotFoundError(f"{path}: {kind} shards of world size {self.world_size} lack {missing}")
        self.entries: dict[str, _Entry] = {}
        self.aliases: dict[str, str] = {}
        self.meta: dict[str, Any] = {}
        for rank in range(self.world_size):
            file = by_rank[rank]
            try:
                handle = safe_open(file, framework="pt")
                header = json.loads((handle.metadata() or {})[_META_KEY])
            except KeyError:
                raise ValueError(f"{file}: not a verl shard file (no {_META_KEY!r} header metadata)") from None
            except Exception as e:  # safetensors raises its own error types for a truncated or garbled header
                raise ValueError(f"{file}: corrupt or truncated shard file: {type(e).__name__}: {e}") from e
            if header.get("format") != SHARD_FORMAT or header.get("world_size") != self.world_size:
                raise ValueError(f"{file}: header is not a {SHARD_FORMAT} index of world size {self.world_size}")
            if rank == 0:
                self.meta = header.get("meta") or {}
            self.aliases.update(header.get("aliases") or {})
            for name, spec in header["tensors"].items():
                dtype = getattr(torch, str(spec["dtype"]), None)
                if not isinstance(dtype, torch.dtype):
                    raise ValueError(f"{file}: tensor {name!r} has unknown dtype {spec['dtype']!r}")
                entry = self.entries.setdefault(name, _Entry([int(s) for s in spec["shape"]], dtype, name))
                if entry.shape != [int(s) for s in spec["shape"]]:
                    raise ValueError(f"{file}: {name!r} has full shape {spec['shape']}, other ranks {entry.shape}")
                piece_shape = list(handle.get_slice(name).get_shape())
                entry.pieces.append(_Piece(handle, file, [int(o) for o in spec["offset"]], piece_shape))
        for name, target in self.aliases.items():
            if target not in self.entries:
                raise ValueError(f"{path}: {name!r} aliases {target!r}, which no {kind} shard stores")

    def names(self) -> list[str]:
        """Every stored name, aliases included."""
        return sorted({*self.entries, *self.aliases})

    def _entry(self, name: str) -> _Entry:
        entry = self.entries.get(self.aliases.get(name, name))
        if entry is None:
            raise KeyError(f"{self.path}: the {self.kind} shards hold no tensor {name!r}")
        return entry

    def shape(self, name: str) -> list[int]:
        """The full shape of ``name``."""
        return list(self._entry(name).shape)

    def dtype(self, name: str) -> torch.dtype:
        return self._entry(name).dtype

    def read(self, name: str, offset: list[int] | None = None, shape: list[int] | None = None) -> torch.Tensor:
        """The block of ``name`` starting at ``offset`` with ``shape`` (default: the whole tensor), on CPU."""
        entry = self._entry(name)
        offset = [0] * len(entry.shape) if offset is None else list(offset)
        shape = list(entry.shape) if shape is None else list(shape)
        if len(offset) != len(entry.shape) or len(shape) != len(entry.shape):
            raise ValueError(f"{self.path}: block of {name!r} has rank {len(shape)}, the tensor {len(entry.shape)}")
        if any(o < 0 or o + s > full for o, s, full in zip(offset, shape, entry.shape)):
            raise ValueError(f"{self.path}: block {offset}+{shape} lies outside {name!r} of shape {entry.shape}")
        out = torch.empty(shape, dtype=entry.dtype)
        covered = 0
        for piece in entry.pieces:
            lo = [max(o, p) for o, p in zip(offset, piece.offset)]
            hi = [min(o + s, p + ps) for o, s, p, ps in zip(offset, shape, piece.offset, piece.shape)]
            if any(h <= low for low, h in zip(lo, hi)):
                continue
            src = tuple(slice(a - p, b - p) for a, b, p in zip(lo, hi, piece.offset))
            dst = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, offset))
            try:
                stored = entry.stored_name
                part = piece.handle.get_slice(stored)[src] if src else piece.handle.get_tensor(stored)
            except Exception as e:  # a file cut short after its header was written
                raise ValueError(f"{piece.file}: cannot read {name!r}: {type(e).__name__}: {e}") from e
            out[dst] = part
            covered += math.prod(b - a for a, b in zip(lo, hi))
        if covered != math.prod(shape):
            raise ValueError(
                f"{self.path}: the {self.kind} shards cover {covered} of the {math.prod(shape)} elements of block "
                f"{offset}+{shape} of {name!r} (files {sorted({p.file for p in entry.pieces})})"
            )
        return out


def _target_block(ref: torch.Tensor) -> tuple[list[int], list[int]]:
    """``(offset, shape)`` of the block ``ref`` holds locally (the whole tensor unless it is a DTensor)."""
    DTensor, _ = _dtensor_types()
    if DTensor is not None and isinstance(ref, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        shape, offset = compute_local_shape_and_global_offset(ref.shape, ref.device_mesh, ref.placements)
        return list(offset), list(shape)
    return [0] * ref.dim(), list(ref.shape)


def read_like(reader: ShardReader, name: str, ref: torch.Tensor) -> torch.Tensor:
    """``name`` from ``reader`` laid out like ``ref``: a DTensor gets its local block on its mesh, a plain tensor
    the whole tensor; dtype and device follow ``ref``. The full shapes must match."""
    if reader.shape(name) != list(ref.shape):
        raise ValueError(
            f"{reader.path}: {name!r} was saved with shape {reader.shape(name)}, the model has {list(ref.shape)}"
        )
    offset, shape = _target_block(ref)
    local = reader.read(name, offset, shape)
    DTensor, _ = _dtensor_types()
    if DTensor is not None and isinstance(ref, DTensor):
        local = local.to(device=ref.to_local().device, dtype=ref.dtype)
        return DTensor.from_local(
            local, ref.device_mesh, ref.placements, run_check=False, shape=ref.shape, stride=ref.stride()
        )
    return local.to(device=ref.device, dtype=ref.dtype)


def load_state_shards(reader: ShardReader, target: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Values for every name of ``target`` (e.g. ``model.state_dict()``) read from ``reader`` in ``target``'s layout.

    Each rank reads only its own block of every tensor. Names missing from the save raise one ValueError listing
    them (and the names the save has that the target lacks)."""
    saved = set(reader.names())
    missing = sorted(set(target) - saved)
    if missing:
        extra = sorted(saved - set(target))
        raise ValueError(
            f"{reader.path}: the {reader.kind} shards lack {len(missing)} tensors of the model, e.g. {missing[:5]}"
            + (f"; they hold others, e.g. {extra[:5]} (another model?)" if extra else "")
        )
    return {name: read_like(reader, name, ref) for name, ref in target.items()}


def read_full_state_dict(path: str, kind: str = "model") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every tensor of the shards in ``path`` whole, plus the writer's ``meta``: ``(state_dict, meta)``."""
    reader = ShardReader(path, kind)
    return {name: reader.read(name) for name in reader.names()}, reader.meta


def hf_weights_state_dict(hf_dir: str) -> dict[str, torch.Tensor] | None:
    """Full weights stored in a Hugging Face dir (single or indexed safetensors), or None if there are none."""
    from safetensors.torch import load_file

    single = os.path.join(hf_dir, "model.safetensors")
    if os.path.isfile(single):
        return load_file(single)
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map", {})
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = os.path.join(hf_dir, shard)
            if not os.path.isfile(shard_path):
                raise FileNotFoundError(f"{index} lists {shard}, which is missing from {hf_dir}")
            state.update(load_file(shard_path))
        return state
    return None
