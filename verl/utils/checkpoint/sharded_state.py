"""Per-rank model shard files and their index: the sharded half of an actor/critic checkpoint.

Layout inside a role directory (``global_step_N/actor``)::

    model_world_size_W_rank_R.safetensors   one per rank: that rank's local tensors
    model_world_size_W_index.json           written by rank 0: how to rebuild every full tensor

Sharding is along dim 0 as FSDP2 does it (``Shard(0)``): rank ``r`` holds rows
``[r * ceil(n / W), (r + 1) * ceil(n / W))`` of a tensor with ``n`` rows, the last ranks possibly fewer or none.
A shard may also be zero-padded to ``ceil(n / W)`` rows; either way the full tensor is the concatenation of the
rank shards along dim 0, trimmed to the original ``n`` rows. Tensors that are not sharded (``replicate``) are
stored whole in every rank file and read from rank 0.

Index format (JSON)::

    {"format": "verl-dim0-shards", "version": 1, "world_size": W,
     "tensors": {"<name>": {"shape": [..], "dtype": "float32", "placement": "shard0" | "replicate"}}}
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from verl.utils.fs import atomic_write_bytes, atomic_write_text

__all__ = [
    "INDEX_FORMAT",
    "ShardSpec",
    "find_shard_index",
    "hf_weights_state_dict",
    "load_full_state_dict",
    "load_model_shard",
    "model_shard_filename",
    "reassemble_full_state_dict",
    "save_sharded_model",
    "shard_index_filename",
    "write_model_shard",
    "write_shard_index",
]

INDEX_FORMAT = "verl-dim0-shards"
INDEX_VERSION = 1
_INDEX_RE = re.compile(r"model_world_size_(\d+)_index\.json")


@dataclass
class ShardSpec:
    """How one full tensor is split over ranks: its full ``shape``, ``dtype`` name and ``placement``."""

    shape: list[int]
    dtype: str
    placement: str = "shard0"  # shard0 | replicate

    def to_json(self) -> dict[str, object]:
        return {"shape": list(self.shape), "dtype": self.dtype, "placement": self.placement}


def model_shard_filename(rank: int, world_size: int) -> str:
    """File name of rank ``rank``'s shard: ``model_world_size_{W}_rank_{R}.safetensors``."""
    return f"model_world_size_{world_size}_rank_{rank}.safetensors"


def shard_index_filename(world_size: int) -> str:
    """File name of the shard index: ``model_world_size_{W}_index.json``."""
    return f"model_world_size_{world_size}_index.json"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_from_name(name: str, where: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{where}: unknown dtype {name!r}")
    return dtype


def write_model_shard(local_tensors: Mapping[str, torch.Tensor], path: str, rank: int, world_size: int) -> str:
    """Write one rank's local tensors to ``<path>/model_world_size_W_rank_R.safetensors`` (atomically)."""
    from safetensors.torch import save

    if not 0 <= rank < world_size:
        raise ValueError(f"write_model_shard: rank {rank} is outside world size {world_size}")
    # safetensors refuses views that share storage; a contiguous CPU copy per tensor is what goes to disk anyway.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in local_tensors.items()}
    target = os.path.join(path, model_shard_filename(rank, world_size))
    atomic_write_bytes(
        target, save(tensors, metadata={"format": "pt", "rank": str(rank), "world_size": str(world_size)})
    )
    return target


def write_shard_index(path: str, world_size: int, specs: Mapping[str, ShardSpec]) -> str:
    """Write the index (rank 0 only) describing how to reassemble every tensor; returns its path."""
    body = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "world_size": int(world_size),
        "tensors": {k: s.to_json() for k, s in specs.items()},
    }
    target = os.path.join(path, shard_index_filename(world_size))
    atomic_write_text(target, json.dumps(body, indent=1))
    return target


def save_sharded_model(state_dict: Mapping[str, torch.Tensor], path: str, rank: int, world_size: int) -> None:
    """Save a (possibly FSDP2/DTensor) model state dict as per-rank shard files plus the index.

    Every rank calls this with its own state dict. DTensors sharded ``Shard(0)`` on a 1-D mesh are stored as
    their local shard; replicated DTensors and plain tensors are stored whole (``replicate``); any other
    placement is gathered to a full tensor first (a collective, so all ranks must call this in the same order,
    which they do as they iterate the same state dict). Rank 0 also writes the index.
    """
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError:  # pragma: no cover - torch without distributed
        DTensor = None  # type: ignore[assignment,misc]
    os.makedirs(path, exist_ok=True)
    local: dict[str, torch.Tensor] = {}
    specs: dict[str, ShardSpec] = {}
    for name, tensor in state_dict.items():
        full_shape = list(tensor.shape)
        placement = "replicate"
        if DTensor is not None and isinstance(tensor, DTensor):
            placements = tuple(tensor.placements)
            if len(placements) == 1 and isinstance(placements[0], Shard) and placements[0].dim == 0:
                data, placement = tensor.to_local(), "shard0"
            elif all(isinstance(p, Replicate) for p in placements):
                data = tensor.to_local()
            else:
                data = tensor.full_tensor()
        else:
            data = tensor
        local[name] = data
        specs[name] = ShardSpec(shape=full_shape, dtype=_dtype_name(tensor.dtype), placement=placement)
    write_model_shard(local, path, rank, world_size)
    if rank == 0:
        write_shard_index(path, world_size, specs)


def find_shard_index(path: str) -> str | None:
    """Return the shard index file in ``path`` (``model_world_size_W_index.json``), or None if there is none.

    More than one index (saves with different world sizes in one directory) is an error.
    """
    if not os.path.isdir(path):
        return None
    found = sorted(name for name in os.listdir(path) if _INDEX_RE.fullmatch(name))
    if len(found) > 1:
        raise ValueError(f"{path}: several shard indexes {found}; expected one model_world_size_W_index.json")
    return os.path.join(path, found[0]) if found else None


def _read_index(index_path: str) -> tuple[int, dict[str, ShardSpec]]:
    try:
        with open(index_path, encoding="utf-8") as f:
            body = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{index_path}: corrupt shard index ({e})") from e
    if not isinstance(body, dict) or body.get("format") != INDEX_FORMAT or "tensors" not in body:
        raise ValueError(f"{index_path}: not a {INDEX_FORMAT} index (expected keys format, world_size, tensors)")
    world_size = body.get("world_size")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"{index_path}: invalid world_size {world_size!r}")
    specs = {}
    for name, spec in body["tensors"].items():
        try:
            specs[name] = ShardSpec(
                shape=[int(s) for s in spec["shape"]], dtype=spec["dtype"], placement=spec["placement"]
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{index_path}: tensor {name!r} has a malformed entry {spec!r}") from e
        if specs[name].placement not in ("shard0", "replicate"):
            raise ValueError(f"{index_path}: tensor {name!r} has unknown placement {specs[name].placement!r}")
    return world_size, specs


def load_model_shard(path: str, rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Load rank ``rank``'s local tensors (for resuming with the same world size)."""
    from safetensors.torch import load_file

    target = os.path.join(path, model_shard_filename(rank, world_size))
    if not os.path.isfile(target):
        index = find_shard_index(path)
        hint = ""
        if index is not None:
            saved_ws, _ = _read_index(index)
            if saved_ws != world_size:
                hint = (
                    f"; the checkpoint was saved with world size {saved_ws}, not {world_size} (resume from "
                    "huggingface/ or merge it with `python -m verl.model_merger merge`)"
                )
        raise FileNotFoundError(
            f"missing model shard {target} (expected {model_shard_filename(rank, world_size)}){hint}"
        )
    try:
        return load_file(target)
    except Exception as e:  # safetensors raises its own error types for a truncated or garbled header
        raise ValueError(f"model shard {target} is corrupt or truncated: {type(e).__name__}: {e}") from e


def reassemble_full_state_dict(path: str) -> dict[str, torch.Tensor]:
    """Rebuild the full state dict from the rank shard files in ``path`` using the shard index.

    For ``shard0`` tensors the rank shards are concatenated along dim 0 and trimmed to the full shape's first
    dimension; ``replicate`` tensors are taken from rank 0. Every rank file must be present and every result
    must match the index shape and dtype, otherwise a ValueError/FileNotFoundError names the file and tensor.
    """
    from safetensors import safe_open

    index_path = find_shard_index(path)
    if index_path is None:
        raise FileNotFoundError(f"{path}: no shard index model_world_size_W_index.json")
    world_size, specs = _read_index(index_path)
    files = [os.path.join(path, model_shard_filename(r, world_size)) for r in range(world_size)]
    for f in files:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"missing model shard {f} (index {index_path} lists world size {world_size})")
    handles = [safe_open(f, framework="pt") for f in files]
    keys_per_rank = [set(h.keys()) for h in handles]
    full: dict[str, torch.Tensor] = {}
    for name, spec in specs.items():
        for rank, keys in enumerate(keys_per_rank):
            if name not in keys and (spec.placement == "shard0" or rank == 0):
                raise ValueError(f"{files[rank]}: tensor {name!r} listed in {index_path} is missing")
        dtype = _dtype_from_name(spec.dtype, f"{index_path} tensor {name!r}")
        if spec.placement == "replicate":
            tensor = handles[0].get_tensor(name)
        else:
            parts = [h.get_tensor(name) for h in handles]
            tensor = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
            if len(spec.shape) == 0 or tensor.shape[0] < spec.shape[0]:
                raise ValueError(
                    f"{path}: tensor {name!r}: shards hold {tuple(tensor.shape)} rows but the index says "
                    f"{tuple(spec.shape)}"
                )
            tensor = tensor[: spec.shape[0]]
        if list(tensor.shape) != spec.shape:
            raise ValueError(
                f"{path}: tensor {name!r} reassembled to shape {tuple(tensor.shape)}, index says {tuple(spec.shape)}"
            )
        if tensor.dtype != dtype:
            raise ValueError(f"{path}: tensor {name!r} has dtype {tensor.dtype}, index says {spec.dtype}")
        full[name] = tensor.contiguous()
    return full


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


def load_full_state_dict(local_dir: str) -> dict[str, torch.Tensor] | None:
    """The full model state dict of a role dir: reassembled rank shards if present, else ``huggingface/`` weights.

    Returns None when the directory holds neither (e.g. a LoRA-only save whose base weights live elsewhere).
    """
    if find_shard_index(local_dir) is not None:
        return reassemble_full_state_dict(local_dir)
    hf_dir = os.path.join(local_dir, "huggingface")
    return hf_weights_state_dict(hf_dir if os.path.isdir(hf_dir) else local_dir)
