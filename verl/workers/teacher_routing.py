"""Which teacher scores which row: the teachers of a ``distillation`` section and upstream v0.9's per-sample routing.

Upstream (``verl/workers/config/distillation.py`` ``DistillationConfig._resolve_teacher_models`` and
``verl/experimental/teacher_loop/teacher_manager.py`` ``_resolve_teacher_key``):

- ``distillation.teacher_models`` holds the default entry ``teacher_model``. Alone, it is the one teacher and every
  row goes to it whatever its routing value. When other entries are added (``+distillation.teacher_models.<name>.*``)
  the default entry is dropped and each remaining entry is a teacher, addressed by its ``key``.
- A row is routed by the value of its ``distillation.teacher_key`` column (``data_source`` by default): the teacher
  whose ``key`` equals it. A row whose value names no teacher is an error (here naming the row and the value).

Here a single teacher may also come from our own key ``distillation.teacher.path``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import OmegaConf

__all__ = ["DEFAULT_ENTRY", "TeacherSpec", "route_rows", "teacher_specs"]

DEFAULT_ENTRY = "teacher_model"  # upstream's default entry of teacher_models, dropped when others are added
# inference.dtype spellings -> torch names (upstream's rollout dtype keys)
DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "float32": "float32",
    "fp32": "float32",
}


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher to load: ``name`` (the ``teacher_models`` entry, or ``teacher``), the routing ``key`` (None: the
    one teacher, which takes every row), its model ``path`` and tokenizer path, and its compute ``dtype``."""

    name: str
    key: str | None
    path: str
    tokenizer_path: str
    dtype: str


def _entries(dist: Any) -> dict[str, Any]:
    """``teacher_models`` as ``{entry name: entry}`` after upstream's rule (the default entry dropped when others
    were added)."""
    models = dist.get("teacher_models") if isinstance(dist, Mapping) else getattr(dist, "teacher_models", None)
    if models is None:
        return {}
    entries = dict(models.items()) if isinstance(models, Mapping) else dict(vars(models))
    if len(entries) > 1:
        entries.pop(DEFAULT_ENTRY, None)
    return {str(k): v for k, v in entries.items()}


def teacher_specs(dist: Any) -> list[TeacherSpec]:
    """The teachers of a resolved ``distillation`` section (a ``DictConfig``; the config checks have run).

    Two or more ``teacher_models`` entries (after dropping the default one): one :class:`TeacherSpec` per entry,
    routed by its ``key``, in ``inference.dtype`` (null: ``distillation.dtype``). Otherwise the one teacher of
    ``distillation.teacher.path`` (which a single entry's ``model_path`` was mirrored onto), ``key=None``.
    """
    if isinstance(dist, dict):
        dist = OmegaConf.create(dist)
    entries = _entries(dist)
    if len(entries) > 1:
        specs = []
        for name, entry in entries.items():
            if not entry.get("model_path") or entry.get("key") is None:
                raise ValueError(f"distillation.teacher_models.{name}: a teacher needs both model_path and key")
            inference = entry.get("inference") or {}
            dtype = inference.get("dtype")
            dtype = DTYPES.get(str(dtype), str(dtype)) if dtype is not None else str(dist.dtype)
            path = str(entry.model_path)
            specs.append(TeacherSpec(name=name, key=str(entry.key), path=path, tokenizer_path=path, dtype=dtype))
        return specs
    if not dist.teacher.path:
        raise ValueError("distillation.teacher.path: distillation.enable=true needs the teacher's model path")
    path = str(dist.teacher.path)
    return [TeacherSpec("teacher", None, path, str(dist.teacher.tokenizer_path or path), str(dist.dtype))]


def route_rows(
    values: Sequence[Any] | np.ndarray | None, keys: Sequence[str | None], column: str, size: int
) -> np.ndarray:
    """``[batch]`` int array: the index into ``keys`` of the teacher of each row.

    ``values``: the ``size`` rows' ``column`` values (``distillation.teacher_key``; None: no such column);
    ``keys``: each teacher's routing key.
    One teacher (``len(keys) == 1``) takes every row, as upstream. Raises ``ValueError`` naming the first row whose
    value names no teacher, or the missing column.
    """
    if len(keys) == 1:
        return np.zeros(size, dtype=np.int64)
    if values is None:
        raise ValueError(
            f"multi-teacher distillation routes each row by its {column!r} column (distillation.teacher_key), "
            f"which the batch does not have; teachers: {sorted(str(k) for k in keys)}"
        )
    index = {str(k): i for i, k in enumerate(keys)}
    if len(values) != size:
        raise ValueError(f"the {column!r} column has {len(values)} values for {size} rows")
    out = np.empty(size, dtype=np.int64)
    for row, value in enumerate(values):
        found = index.get(str(value))
        if found is None:
            raise ValueError(
                f"row {row}: {column}={value!r} names no teacher (distillation.teacher_key={column!r}; the teachers' "
                f"keys: {sorted(index)})"
            )
        out[row] = found
    return out
