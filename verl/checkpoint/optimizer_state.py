"""Optimizer state as shard files: keyed by parameter name, so it reloads onto any world size.

``torch.optim.Optimizer.state_dict()`` keys the per-parameter state by position and mixes tensors with plain
values. Here it becomes:

- tensors ``state/<param name>/<key>`` (Adam's ``exp_avg``, ``exp_avg_sq``, ``step``), stored by
  :func:`~verl.checkpoint.sharded_state.save_state_shards`: state shaped like a sharded parameter is a
  DTensor with the parameter's placements, so each rank writes its own block; scalars are written once;
- tensors ``group/<i>/<key>`` for hyper-parameters that are tensors (a ``capturable`` learning rate);
- JSON in the header (``meta``): the param groups with parameter *names* and their plain hyper-parameters, and
  per-parameter state that is not a tensor.

Loading maps names back to the live optimizer's positions and reads, for every sharded state tensor, the block the
parameter holds on this rank now, so a save on 4 ranks resumes on 2 (or 1) with exactly the saved values.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.checkpoint.sharded_state import ShardReader, read_like, save_state_shards

__all__ = ["load_optimizer_shards", "save_optimizer_shards"]

_TUPLE_MARK = "__tuple__"


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "_orig_mod", model)


def _group_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[list[str]]:
    """The names of the parameters of every param group; flattened, they are in ``state_dict()`` position order."""
    by_id = {id(p): n for n, p in _unwrap(model).named_parameters()}
    groups = []
    for group in optimizer.param_groups:
        if any(id(p) not in by_id for p in group["params"]):
            raise ValueError("the optimizer holds a parameter that is not one of the model's named parameters")
        groups.append([by_id[id(p)] for p in group["params"]])
    return groups


def _param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    return [name for group in _group_names(model, optimizer) for name in group]


def _jsonable(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return {_TUPLE_MARK: [_jsonable(v, where) for v in value]}
    if isinstance(value, list):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _jsonable(v, where) for k, v in value.items()}
    raise TypeError(f"optimizer state {where} is a {type(value).__name__}, which a checkpoint cannot store")


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_TUPLE_MARK}:
            return tuple(_from_json(v) for v in value[_TUPLE_MARK])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def save_optimizer_shards(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str, rank: int, world_size: int
) -> str:
    """Write this rank's part of ``optimizer``'s state to ``<path>/optim_world_size_W_rank_R.safetensors``.

    Every rank calls it; nothing is gathered. Returns the file's path."""
    names = _param_names(model, optimizer)
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    groups = []
    for i, group in enumerate(sd["param_groups"]):
        entry: dict[str, Any] = {"params": [names[j] for j in group["params"]], "tensors": []}
        for key, value in group.items():
            if key == "params":
                continue
            if isinstance(value, torch.Tensor):
                tensors[f"group/{i}/{key}"] = value
                entry["tensors"].append(key)
            else:
                entry.setdefault("values", {})[key] = _jsonable(value, f"param_groups[{i}][{key!r}]")
        groups.append(entry)
    values: dict[str, dict[str, Any]] = {}
    for index, state in sd["state"].items():
        name = names[index]
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state/{name}/{key}"] = value
            else:
                values.setdefault(name, {})[key] = _jsonable(value, f"of {name!r} key {key!r}")
    meta = {"param_groups": groups, "values": values, "optimizer": type(optimizer).__name__}
    return save_state_shards(tensors, path, "optim", rank, world_size, meta=meta)


def load_optimizer_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Restore ``optimizer`` from the ``optim_*`` shards in ``path``, whatever world size saved them.

    The saved param groups must name the same parameters as the live ones (a ValueError lists the differences);
    hyper-parameters come from the save, as ``Optimizer.load_state_dict`` does."""
    reader = ShardReader(path, "optim")
    meta = reader.meta
    saved_type = meta.get("optimizer")
    if saved_type and saved_type != type(optimizer).__name__:
        raise ValueError(f"{path}: optimizer state of a {saved_type}, the run uses {type(optimizer).__name__}")
    groups_meta = meta.get("param_groups")
    if not isinstance(groups_meta, list) or len(groups_meta) != len(optimizer.param_groups):
        raise ValueError(
            f"{path}: {len(groups_meta or [])} saved param groups, the optimizer has {len(optimizer.param_groups)}"
        )
    live_groups = _group_names(model, optimizer)
    position = {name: i for i, name in enumerate(n for group in live_groups for n in group)}
    params = dict(_unwrap(model).named_parameters())
    groups = []
    for i, (saved, live_names) in enumerate(zip(groups_meta, live_groups)):
        if set(saved["params"]) != set(live_names):
            lost = sorted(set(live_names) - set(saved["params"]))
            new = sorted(set(saved["params"]) - set(live_names))
            raise ValueError(
                f"{path}: param group {i} was saved for other parameters: not saved {lost[:5]}, unknown {new[:5]}"
            )
        group = {k: _from_json(v) for k, v in (saved.get("values") or {}).items()}
        for key in saved.get("tensors", []):
            group[key] = reader.read(f"group/{i}/{key}")
        # Optimizer.load_state_dict pairs saved and live parameters by order: give the live order
        group["params"] = [position[n] for n in live_names]
        groups.append(group)
    state: dict[int, dict[str, Any]] = {}
    for stored in reader.names():
        if not stored.startswith("state/"):
            continue
        name, key = stored[len("state/") :].rsplit("/", 1)
        if name not in position:
            raise ValueError(f"{path}: optimizer state for {name!r}, which the optimizer does not hold")
        param = params[name]
        # state shaped like its parameter is laid out like it; scalars (Adam's step) are read whole
        value = read_like(reader, stored, param) if reader.shape(stored) == list(param.shape) else reader.read(stored)
        state.setdefault(position[name], {})[key] = value
    for name, extra in (meta.get("values") or {}).items():
        if name not in position:
            raise ValueError(f"{path}: optimizer state for {name!r}, which the optimizer does not hold")
        state.setdefault(position[name], {}).update({k: _from_json(v) for k, v in extra.items()})
    # in parameter order, as a live optimizer holds it
    optimizer.load_state_dict({"state": dict(sorted(state.items())), "param_groups": groups})
