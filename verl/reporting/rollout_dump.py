"""Rollout sample dumps (``trainer.rollout_data_dir`` / ``trainer.validation_data_dir``): one JSONL file per step."""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

from verl.utils.fs import atomic_write_text

__all__ = ["dump_rollout_jsonl"]


def _jsonable(key: str, row: int, value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):  # tensors and numpy values
        return _jsonable(key, row, value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _jsonable(key, row, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(key, row, v) for v in value]
    if isinstance(value, numbers.Real):
        return _jsonable(key, row, float(value))
    raise ValueError(f"dump_rollout_jsonl: column {key!r} row {row}: value of type {type(value).__name__} is not JSON")


def dump_rollout_jsonl(
    dump_dir: str,
    step: int,
    prompts: Sequence[str],
    responses: Sequence[str],
    scores: Sequence[float],
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> str:
    """Write one JSON line per sample to ``<dump_dir>/<step>.jsonl`` (atomically) and return the path.

    Each line is ``{"input": prompt, "output": response, "score": score, "step": step, **extra}`` with the column
    names of verl's rollout dumps. All columns must have the same length; non-finite floats become ``null``.
    """
    n = len(prompts)
    columns: dict[str, Sequence[Any]] = {"input": prompts, "output": responses, "score": scores}
    for key, col in (extra or {}).items():
        if key in ("input", "output", "score", "step"):
            raise ValueError(f"dump_rollout_jsonl: extra column {key!r} clashes with a built-in column")
        columns[key] = col
    for key, col in columns.items():
        if len(col) != n:
            raise ValueError(f"dump_rollout_jsonl: column {key!r} has {len(col)} rows, expected {n} (= len(prompts))")
    lines = []
    for i in range(n):
        rec: dict[str, Any] = {}
        for key, col in columns.items():
            rec[key] = _jsonable(key, i, col[i])
            if key == "score":
                rec["step"] = int(step)
        lines.append(json.dumps(rec, ensure_ascii=False, allow_nan=False))
    path = os.path.join(dump_dir, f"{int(step)}.jsonl")
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path
