"""The default ``trainer.experiment_name``: derived from what the run trains, so two different runs never share a
checkpoint directory, while a re-run of the same command finds (and, with ``resume_mode=auto``, resumes) its own.

``<algorithm>-<model>-<data>[-lora<r>]``, e.g. ``grpo-Qwen2.5-0.5B-Instruct-gsm8k``:

* algorithm: ``algorithm.adv_estimator`` (``gae`` is written ``ppo``), or ``sft`` / ``dpo`` / ``kto``;
* model: the last component of the model path (``Qwen/Qwen2.5-0.5B-Instruct`` -> ``Qwen2.5-0.5B-Instruct``; a Hugging
  Face cache snapshot ``.../models--Qwen--Qwen2.5-0.5B/snapshots/<hash>`` -> ``Qwen2.5-0.5B``);
* data: the first training file's name without extension, or its directory's when the file is named after a split
  (``~/data/gsm8k/train.parquet`` -> ``gsm8k``, ``.../gsm8k/main/train-00000-of-00001.parquet`` -> ``gsm8k``);
  ``+N`` when N more files follow; left out when no file is configured (the Python API's in-memory datasets);
* ``-lora<r>`` when ``lora_rank > 0``.

Every character outside ``[A-Za-z0-9._+-]`` becomes ``-`` (a path component on every filesystem). The YAML files use
it as an OmegaConf resolver, ``experiment_name: ${verl.experiment_name:${algorithm.adv_estimator},...}``, so the name
is computed while the config resolves: ``${trainer.experiment_name}`` in ``default_local_dir`` (or any other key)
follows it and ``--cfg job`` prints it. A name the user sets replaces the expression. (The schemas'
``adapt_defaults`` hook runs after interpolations are resolved, too late for ``default_local_dir`` to follow.)

Why not a time stamp: a re-run of the same command would get a new directory, and ``resume_mode=auto`` would never
resume anything. Why not upstream verl's fixed default: every run that forgets the key shares one directory.
"""

from __future__ import annotations

import re
from typing import Any

from omegaconf import ListConfig, OmegaConf

__all__ = ["RESOLVER_NAME", "data_basename", "derive_experiment_name", "model_basename", "register_resolver"]

RESOLVER_NAME = "verl.experiment_name"
# names PPO users know the estimator by
_ALGORITHM_NAMES = {"gae": "ppo"}
# file or directory names that say which split or layout a file is, not which data set
_GENERIC = re.compile(
    r"^(train|training|test|testing|val|valid|validation|dev|eval|evaluation|data|dataset|datasets|default|main|"
    r"all|full|parquet|jsonl|json|files?|shards?)([-_.]?\d+)?$",
    re.IGNORECASE,
)
_SPLIT_SHARD = re.compile(r"^(train|test|validation|val|dev|eval)[-_]\d+[-_]of[-_]\d+$", re.IGNORECASE)
_EXTENSIONS = (".parquet", ".jsonl", ".json", ".csv", ".arrow", ".txt", ".gz", ".zst", ".bz2", ".xz")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_HASH = re.compile(r"^[0-9a-f]{40}$")
_PREFIXES = ("bundled://", "hf://", "file://")
_MAX_PART = 60


def _sanitize(text: str, limit: int = _MAX_PART) -> str:
    """``text`` as a safe path component: unsafe runs become ``-``, no leading/trailing ``-._``, at most ``limit``."""
    clean = _UNSAFE.sub("-", text).strip("-._")
    return clean[:limit].rstrip("-._")


def _strip_prefix(path: str) -> str:
    for prefix in _PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def model_basename(path: Any) -> str:
    """The model part of the name: the path's last component (see the module docstring); '' for no path."""
    if path is None:
        return ""
    text = _strip_prefix(str(path).strip()).rstrip("/\\")
    parts = [p for p in re.split(r"[/\\]", text) if p]
    if not parts:
        return ""
    # a Hugging Face cache snapshot: .../models--<org>--<name>/snapshots/<commit hash>
    if len(parts) >= 3 and parts[-2] == "snapshots" and _HASH.match(parts[-1]) and parts[-3].startswith("models--"):
        return _sanitize(parts[-3].split("--")[-1])
    return _sanitize(parts[-1])


def _file_stem(name: str) -> str:
    stem = name
    changed = True
    while changed:
        changed = False
        for ext in _EXTENSIONS:
            if stem.lower().endswith(ext) and len(stem) > len(ext):
                stem, changed = stem[: -len(ext)], True
    return stem


def data_basename(files: Any) -> str:
    """The data part of the name: the first file's stem, or the nearest directory not named after a split or a
    layout (``data``, ``main``, ...); ``+N`` for N more files; '' for no file (see the module docstring)."""
    if files is None:
        return ""
    if isinstance(files, (list, tuple, ListConfig)):
        items = [str(f) for f in files if f is not None and str(f).strip()]
    else:
        items = [str(files)] if str(files).strip() else []
    if not items:
        return ""
    parts = [p for p in re.split(r"[/\\]", _strip_prefix(items[0].strip())) if p]
    if not parts:
        return ""
    name = _file_stem(parts[-1])
    if _GENERIC.match(name) or _SPLIT_SHARD.match(name):
        for parent in reversed(parts[:-1]):
            if parent not in ("~", ".", "..") and not _GENERIC.match(parent):
                name = parent
                break
    base = _sanitize(name)
    return f"{base}+{len(items) - 1}" if len(items) > 1 and base else base


def derive_experiment_name(algorithm: Any, model_path: Any = None, train_files: Any = None, lora_rank: Any = 0) -> str:
    """``<algorithm>-<model>-<data>[-lora<r>]`` (empty parts left out), a path-safe, stable name for a run."""
    algo = _sanitize(_ALGORITHM_NAMES.get(str(algorithm), str(algorithm))) if algorithm is not None else ""
    parts = [p for p in (algo, model_basename(model_path), data_basename(train_files)) if p]
    try:
        rank = int(lora_rank or 0)
    except (TypeError, ValueError):
        rank = 0
    if rank > 0:
        parts.append(f"lora{rank}")
    return "-".join(parts) or "run"


def _resolve(algorithm: Any, model_path: Any = None, train_files: Any = None, lora_rank: Any = 0) -> str:
    if isinstance(train_files, ListConfig):
        train_files = list(train_files)
    return derive_experiment_name(algorithm, model_path, train_files, lora_rank)


def register_resolver() -> None:
    """Register ``${verl.experiment_name:algorithm,model_path,train_files,lora_rank}`` with OmegaConf (idempotent)."""
    if not OmegaConf.has_resolver(RESOLVER_NAME):
        OmegaConf.register_new_resolver(RESOLVER_NAME, _resolve)


register_resolver()
