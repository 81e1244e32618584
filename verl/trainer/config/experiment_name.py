"""The default ``trainer.experiment_name``: derived from what the run trains, so two different runs never share a
checkpoint directory, while a re-run of the same command finds (and, with ``resume_mode=auto``, resumes) its own.

``<algorithm>-<model>-<data>[-lora<r>]``, e.g. ``grpo-Qwen2.5-0.5B-Instruct-gsm8k``:

* algorithm: ``algorithm.adv_estimator`` (``gae`` is written ``ppo``), or ``sft`` / ``dpo`` / ``kto``;
* model: the last component of the model path (``Qwen/Qwen2.5-0.5B-Instruct`` -> ``Qwen2.5-0.5B-Instruct``; a Hugging
  Face cache snapshot ``.../models--Qwen--Qwen2.5-0.5B/snapshots/<hash>`` -> ``Qwen2.5-0.5B``);
* data: the first training file's name without extension, or its directory's when the file is named after a split
  (``~/data/gsm8k/train.parquet`` -> ``gsm8k``, ``.../gsm8k/main/train-00000-of-00001.parquet`` -> ``gsm8k``);
  ``+N`` when N more files follow; left out when no file is configured (the Python API's in-memory datasets);
* ``-lora<r>`` when ``lora_rank > 0``;
* the training mode when it is not plain synchronous PPO (PPO family only): ``-agent`` for agent loops
  (``actor_rollout_ref.rollout.multi_turn.enable``), ``-one-step-off`` / ``-fully-async`` for
  ``async_training.mode``. Their checkpoints and driver states differ (another data order and batch shape, another
  process layout), so a run of another mode never resumes or overwrites this one's.

The embedded demo (``demo.yaml``) is named ``demo`` followed by what the command changes of what the run is
(:func:`derive_demo_name`): ``demo`` for ``make demo``, ``demo-agent`` for the agent-loop page's command,
``demo-one-step-off`` for ``one_step_off_policy.main_ppo`` without data, ``demo-gae`` for another estimator.

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

__all__ = [
    "DEMO_RESOLVER_NAME",
    "RESOLVER_NAME",
    "data_basename",
    "derive_demo_name",
    "derive_experiment_name",
    "model_basename",
    "register_resolver",
    "run_mode",
]

RESOLVER_NAME = "verl.experiment_name"
DEMO_RESOLVER_NAME = "verl.demo_experiment_name"
# what demo.yaml runs unless a command changes it (a test keeps these equal to demo.yaml / ppo_trainer.yaml)
DEMO_ALGORITHM = "grpo"
DEMO_MODEL = "smollm2-135m-instruct"
# async_training.mode -> the name part
_ASYNC_MODES = {"one_step_off": "one-step-off", "fully_async": "fully-async"}
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


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def run_mode(async_mode: Any = None, multi_turn: Any = False) -> str:
    """The mode part of a PPO-family name: ``''`` for synchronous single-turn PPO, else ``agent``,
    ``one-step-off``, ``fully-async`` or a combination (``one-step-off-agent``)."""
    parts = []
    mode = "" if async_mode is None else str(async_mode).strip()
    if mode and mode.lower() not in ("null", "none", "sync", "synchronous"):
        parts.append(_ASYNC_MODES.get(mode, _sanitize(mode)))
    if _truthy(multi_turn):
        parts.append("agent")
    return "-".join(parts)


def _lora_part(lora_rank: Any) -> str:
    try:
        rank = int(lora_rank or 0)
    except (TypeError, ValueError):
        rank = 0
    return f"lora{rank}" if rank > 0 else ""


def derive_experiment_name(
    algorithm: Any, model_path: Any = None, train_files: Any = None, lora_rank: Any = 0, mode: Any = ""
) -> str:
    """``<algorithm>-<model>-<data>[-lora<r>][-<mode>]`` (empty parts left out), a path-safe, stable name for a
    run; ``mode`` is :func:`run_mode`'s part (``''`` for synchronous PPO and the offline trainers)."""
    algo = _sanitize(_ALGORITHM_NAMES.get(str(algorithm), str(algorithm))) if algorithm is not None else ""
    parts = [algo, model_basename(model_path), data_basename(train_files), _lora_part(lora_rank)]
    parts.append(_sanitize(str(mode)) if mode else "")
    return "-".join(p for p in parts if p) or "run"


def derive_demo_name(
    algorithm: Any = DEMO_ALGORITHM, model_path: Any = DEMO_MODEL, lora_rank: Any = 0, mode: Any = ""
) -> str:
    """``demo`` followed by what a command changed of what the embedded demo is: the estimator when not GRPO, the
    model when not the bundled one, the LoRA rank, the mode; ``demo`` for ``make demo`` itself."""
    algo = "" if algorithm is None or str(algorithm) == DEMO_ALGORITHM else str(algorithm)
    algo = _sanitize(_ALGORITHM_NAMES.get(algo, algo)) if algo else ""
    model = model_basename(model_path)
    model = "" if model.lower() == DEMO_MODEL else model
    parts = ["demo", algo, model, _lora_part(lora_rank), _sanitize(str(mode)) if mode else ""]
    return "-".join(p for p in parts if p)


def _resolve(
    algorithm: Any, model_path: Any = None, train_files: Any = None, lora_rank: Any = 0, mode: Any = ""
) -> str:
    if isinstance(train_files, ListConfig):
        train_files = list(train_files)
    return derive_experiment_name(algorithm, model_path, train_files, lora_rank, mode)


def register_resolver() -> None:
    """Register with OmegaConf (idempotent): ``${verl.experiment_name:algorithm,model_path,train_files,lora_rank[,
    mode]}``, ``${verl.run_mode:async_mode,multi_turn}`` and ``${verl.demo_experiment_name:algorithm,model_path,
    lora_rank,mode}``."""
    if not OmegaConf.has_resolver(RESOLVER_NAME):
        OmegaConf.register_new_resolver(RESOLVER_NAME, _resolve)
    if not OmegaConf.has_resolver("verl.run_mode"):
        OmegaConf.register_new_resolver("verl.run_mode", run_mode)
    if not OmegaConf.has_resolver(DEMO_RESOLVER_NAME):
        OmegaConf.register_new_resolver(DEMO_RESOLVER_NAME, derive_demo_name)


register_resolver()
