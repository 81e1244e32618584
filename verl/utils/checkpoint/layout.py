"""Checkpoint directory layout: step directories, the latest-step tracker, retention and resume resolution.

Layout (verl's)::

    <default_local_dir>/
        global_step_N/
            actor/    critic/          written by the workers
            checkpoint_complete.json   written by the driver once every role is saved
        latest_checkpointed_iteration.txt   "N", written atomically after the step dir is complete

A step directory is *complete* when its marker exists and every role the marker lists is present. Readers trust
the tracker first and fall back to the highest complete step directory when the tracker is missing, corrupt or
points nowhere, so a crash at any moment of a save leaves the previous checkpoint usable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from typing import Any

from verl.utils.fs import TMP_PREFIX, atomic_write_text, namespaced_path

__all__ = [
    "COMPLETE_MARKER",
    "STEP_DIR_PREFIX",
    "TRACKER_FILENAME",
    "checkpoint_root",
    "finalize_checkpoint",
    "find_latest_ckpt_path",
    "get_checkpoint_step",
    "get_checkpoint_tracker_filename",
    "get_step_dir",
    "is_complete_step_dir",
    "list_step_dirs",
    "read_tracker",
    "remove_old_checkpoints",
    "resolve_resume_path",
]

logger = logging.getLogger(__name__)

STEP_DIR_PREFIX = "global_step_"
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
COMPLETE_MARKER = "checkpoint_complete.json"
_STEP_RE = re.compile(r"global_step_(\d+)")
RESUME_MODES = ("auto", "disable", "resume_path")


def get_checkpoint_tracker_filename(root: str) -> str:
    """Path of the tracker file holding the latest saved step: ``<root>/latest_checkpointed_iteration.txt``."""
    return os.path.join(root, TRACKER_FILENAME)


def get_step_dir(root: str, global_step: int) -> str:
    """``<root>/global_step_<global_step>``."""
    if int(global_step) < 0:
        raise ValueError(f"global_step must be >= 0, got {global_step}")
    return os.path.join(root, f"{STEP_DIR_PREFIX}{int(global_step)}")


def get_checkpoint_step(path: str) -> int:
    """The step N of a checkpoint path ``.../global_step_N`` or ``.../global_step_N/<role>``."""
    norm = os.path.normpath(path)
    for part in (os.path.basename(norm), os.path.basename(os.path.dirname(norm))):
        m = _STEP_RE.fullmatch(part)
        if m:
            return int(m.group(1))
    raise ValueError(f"{path!r} is not a checkpoint path: expected .../global_step_N or .../global_step_N/<role>")


def list_step_dirs(root: str) -> list[tuple[int, str]]:
    """All ``global_step_N`` directories directly under ``root`` as ``(N, path)``, oldest first."""
    if not os.path.isdir(root):
        return []
    out = []
    for name in os.listdir(root):
        m = _STEP_RE.fullmatch(name)
        full = os.path.join(root, name)
        if m and os.path.isdir(full) and not os.path.islink(full):
            out.append((int(m.group(1)), full))
    return sorted(out)


def is_complete_step_dir(step_dir: str) -> bool:
    """True when ``step_dir`` has the completion marker and every role directory the marker lists."""
    marker = os.path.join(step_dir, COMPLETE_MARKER)
    try:
        with open(marker, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, json.JSONDecodeError):
        return False
    roles = body.get("roles", []) if isinstance(body, dict) else []
    return all(os.path.isdir(os.path.join(step_dir, r)) for r in roles)


def read_tracker(root: str) -> int | None:
    """The step stored in the tracker file, or None (with a warning) if it is missing or corrupt."""
    path = get_checkpoint_tracker_filename(root)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        step = int(text)
        if step < 0:
            raise ValueError(text)
    except (OSError, ValueError):
        logger.warning("checkpoint tracker %s is corrupt (expected one non-negative integer); ignoring it", path)
        return None
    return step


def finalize_checkpoint(root: str, global_step: int, roles: list[str] | None = None) -> str:
    """Mark ``global_step_N`` complete and point the tracker at it; call after every role has been saved.

    ``roles`` defaults to the sub-directories present. Writes ``checkpoint_complete.json`` into the step dir,
    then ``latest_checkpointed_iteration.txt`` (both atomically), in that order. Returns the step dir.
    """
    step_dir = get_step_dir(root, global_step)
    if not os.path.isdir(step_dir):
        raise FileNotFoundError(f"finalize_checkpoint: {step_dir} does not exist; save the roles first")
    if roles is None:
        roles = sorted(
            n for n in os.listdir(step_dir) if os.path.isdir(os.path.join(step_dir, n)) and not n.startswith(".")
        )
    missing = [r for r in roles if not os.path.isdir(os.path.join(step_dir, r))]
    if missing:
        raise FileNotFoundError(f"finalize_checkpoint: {step_dir} lacks role directories {missing}")
    body = {"global_step": int(global_step), "roles": roles, "time": time.time()}
    atomic_write_text(os.path.join(step_dir, COMPLETE_MARKER), json.dumps(body))
    atomic_write_text(get_checkpoint_tracker_filename(root), f"{int(global_step)}\n")
    return step_dir


def find_latest_ckpt_path(default_local_dir: str | None) -> str | None:
    """Path of the latest complete ``global_step_N`` directory under ``default_local_dir``, or None.

    The tracker file decides; if it is missing, corrupt or names a directory that does not exist, this warns and
    falls back to the highest complete step directory (None when there is none).
    """
    if not default_local_dir or not os.path.isdir(default_local_dir):
        return None
    step = read_tracker(default_local_dir)
    if step is not None:
        step_dir = get_step_dir(default_local_dir, step)
        if os.path.isdir(step_dir):
            return step_dir
        logger.warning("checkpoint tracker in %s names %s, which does not exist", default_local_dir, step_dir)
    step_dirs = list_step_dirs(default_local_dir)
    for _step, path in reversed(step_dirs):
        if is_complete_step_dir(path):
            logger.warning("using %s, the highest complete checkpoint (the tracker file is not usable)", path)
            return path
    if step_dirs:
        logger.warning("no complete checkpoint in %s (no step dir has a valid %s)", default_local_dir, COMPLETE_MARKER)
    return None


def _remove_dir_safely(path: str) -> None:
    # Rename first so a half-deleted directory never looks like a checkpoint.
    doomed = os.path.join(os.path.dirname(path), f"{TMP_PREFIX}rm-{os.path.basename(path)}-{uuid.uuid4().hex[:8]}")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def remove_old_checkpoints(
    default_local_dir: str, max_to_keep: int | None, subdir: str = "actor", current_step: int | None = None
) -> list[str]:
    """Delete ``global_step_N/<subdir>`` of all but the newest ``max_to_keep`` steps that have ``<subdir>``.

    Never removed: the step just written (``current_step``), the step the tracker points at, and anything that
    is not a ``global_step_N`` directory. ``max_to_keep`` of None or <= 0 keeps everything. A step directory
    left without any role sub-directory (only files such as the marker or the driver's ``data.pt``) is removed
    too. Returns the removed paths.
    """
    if max_to_keep is None or max_to_keep <= 0:
        return []
    with_role = [(s, p) for s, p in list_step_dirs(default_local_dir) if os.path.isdir(os.path.join(p, subdir))]
    protected = {current_step, read_tracker(default_local_dir)} - {None}
    newest_first = sorted(with_role, reverse=True)
    keep = {s for s, _ in newest_first[:max_to_keep]} | protected
    removed = []
    for step, step_dir in newest_first:
        if step in keep:
            continue
        target = os.path.join(step_dir, subdir)
        _remove_dir_safely(target)
        removed.append(target)
        # With no role directory left, the files beside them (marker, driver state) restore nothing.
        if not any(os.path.isdir(os.path.join(step_dir, n)) for n in os.listdir(step_dir)):
            _remove_dir_safely(step_dir)
    return removed


def _cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    if hasattr(cfg, "get") and not isinstance(cfg, type):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def checkpoint_root(trainer_config: Any) -> str:
    """The checkpoint root of a run: ``trainer.default_local_dir``, under ``trainer.namespace`` when set."""
    base = _cfg_get(trainer_config, "default_local_dir")
    if not base:
        raise ValueError("trainer.default_local_dir is not set")
    return namespaced_path(str(base), _cfg_get(trainer_config, "namespace"))


def resolve_resume_path(trainer_config: Any, default_local_dir: str | None = None) -> str | None:
    """Which checkpoint to resume from, per ``trainer.resume_mode``.

    - ``disable``: None (train from scratch).
    - ``auto``: the latest complete checkpoint under ``default_local_dir`` when given (taken as the final,
      already namespaced root), else under :func:`checkpoint_root`; None if there is none.
    - ``resume_path``: ``trainer.resume_from_path`` (a ``global_step_N`` dir); a missing value or path raises.
    """
    mode = _cfg_get(trainer_config, "resume_mode", "auto")
    if mode not in RESUME_MODES:
        raise ValueError(f"trainer.resume_mode={mode!r} is not one of {', '.join(RESUME_MODES)}")
    if mode == "disable":
        return None
    if mode == "auto":
        return find_latest_ckpt_path(default_local_dir or checkpoint_root(trainer_config))
    path = _cfg_get(trainer_config, "resume_from_path")
    if not path:
        raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N dir)")
    path = str(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"trainer.resume_from_path={path} does not exist (expected a global_step_N dir)")
    if not _STEP_RE.fullmatch(os.path.basename(os.path.normpath(path))):
        raise ValueError(f"trainer.resume_from_path={path} is not a global_step_N directory")
    return os.path.abspath(path)
