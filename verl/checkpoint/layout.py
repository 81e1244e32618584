"""Checkpoint directory layout: step directories, the latest-step tracker, retention and resume resolution.

Layout (verl's)::

    <default_local_dir>/
        global_step_N/
            actor/    critic/          written by the workers
            checkpoint_complete.json   written by the driver once every role is saved
        latest_checkpointed_iteration.txt   "N", written atomically after the step dir is complete

A step directory is *complete* when its marker exists and every role the marker lists is present; it is *intact*
when every file still matches the size and SHA-256 the marker recorded (:mod:`.integrity`). Readers take the
tracker's step when it is complete and intact and otherwise fall back, with a warning naming the bad files, to the
highest complete and intact step directory, so a crash at any moment of a save, or a file damaged later, leaves
the previous checkpoint usable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Optional, Union

from verl.base_config import get_config_value
from verl.checkpoint.identity import check_resume_identity
from verl.utils.fs import TMP_PREFIX, atomic_directory, atomic_write_text, namespaced_path

__all__ = [
    "COMPLETE_MARKER",
    "STEP_DIR_PREFIX",
    "TRACKER_FILENAME",
    "atomic_step_dir",
    "check_checkpoint_root",
    "checkpoint_root",
    "finalize_checkpoint",
    "find_latest_ckpt_path",
    "get_checkpoint_step",
    "get_checkpoint_tracker_filename",
    "checkpoint_problems",
    "get_step_dir",
    "is_complete_step_dir",
    "list_step_dirs",
    "newest_complete_step_dir",
    "prepare_checkpoint_root",
    "read_tracker",
    "remove_old_checkpoints",
    "require_intact",
    "resolve_resume_path",
    "write_complete_marker",
]

logger = logging.getLogger(__name__)

STEP_DIR_PREFIX = "global_step_"
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
COMPLETE_MARKER = "checkpoint_complete.json"
_STEP_RE = re.compile(r"global_step_(\d+)")
RESUME_MODES = ("auto", "disable", "resume_path")


def resume_mode(trainer_config: Mapping[str, Any]) -> str:
    """``trainer.resume_mode`` of a trainer section (PPO's, SFT's, DPO's: each trainer's dataclass holds the default,
    so a section built from one always has it); one of :data:`RESUME_MODES`, else a ``ValueError`` naming it."""
    mode = get_config_value(trainer_config, "resume_mode")
    if mode not in RESUME_MODES:
        raise ValueError(f"trainer.resume_mode={mode!r} is not one of {', '.join(RESUME_MODES)}")
    return str(mode)


# a run identity, or a zero-argument callable computing it when there is a checkpoint to compare it with
IdentityArg = Optional[Union[dict[str, Any], Callable[[], Optional[dict[str, Any]]]]]


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


def finalize_checkpoint(
    root: str, global_step: int, roles: list[str] | None = None, identity: dict[str, Any] | None = None
) -> str:
    """Mark ``global_step_N`` complete and point the tracker at it; call after every role has been saved.

    ``roles`` defaults to the sub-directories present; ``identity`` (:func:`.identity.make_identity`) records what
    the checkpoint is of. Writes ``checkpoint_complete.json`` into the step dir, then
    ``latest_checkpointed_iteration.txt`` (both atomically), in that order. Returns the step dir.
    """
    step_dir = get_step_dir(root, global_step)
    write_complete_marker(step_dir, global_step, roles, who="finalize_checkpoint", identity=identity)
    atomic_write_text(get_checkpoint_tracker_filename(root), f"{int(global_step)}\n")
    return step_dir


def write_complete_marker(
    step_dir: str,
    global_step: int,
    roles: list[str] | None = None,
    who: str = "write_complete_marker",
    identity: dict[str, Any] | None = None,
) -> str:
    """Write ``checkpoint_complete.json`` (atomically) into ``step_dir`` once every role in it is saved.

    The tracker-free half of :func:`finalize_checkpoint`, for a checkpoint saved to a directory of the caller's
    choosing (``PPOTrainer.save_checkpoint(path=...)``): :func:`is_complete_step_dir` then accepts it for resume.
    ``roles`` defaults to the sub-directories present. ``identity`` (:func:`.identity.make_identity`: model,
    architecture, algorithm, roles, LoRA rank) is stored under ``"identity"``, so a later run can tell before
    loading anything whether this is a checkpoint of its own model (:func:`.identity.check_resume_identity`).
    Returns the marker's path.
    """
    if not os.path.isdir(step_dir):
        raise FileNotFoundError(f"{who}: {step_dir} does not exist; save the roles first")
    if roles is None:
        roles = sorted(
            n for n in os.listdir(step_dir) if os.path.isdir(os.path.join(step_dir, n)) and not n.startswith(".")
        )
    missing = [r for r in roles if not os.path.isdir(os.path.join(step_dir, r))]
    if missing:
        raise FileNotFoundError(f"{who}: {step_dir} lacks role directories {missing}")
    from verl.checkpoint.integrity import compute_checksums

    # The checksums make a later change to any file (overwritten, truncated, removed) visible before a resume.
    files = compute_checksums(step_dir, exclude=(COMPLETE_MARKER,))
    body: dict[str, Any] = {"global_step": int(global_step), "roles": roles, "time": time.time(), "files": files}
    if identity is not None:
        body["identity"] = identity
    marker = os.path.join(step_dir, COMPLETE_MARKER)
    atomic_write_text(marker, json.dumps(body))
    return marker


@contextmanager
def atomic_step_dir(step_dir: str) -> Iterator[str]:
    """:func:`~verl.utils.fs.atomic_directory` for ranks that all write into one step directory (SPMD trainers).

    Collective: rank 0 creates the temp sibling and tells the others its path; every rank fills it; once all
    succeeded, rank 0 renames it to ``step_dir``. If any rank fails, the temp directory is removed and
    ``step_dir`` keeps what it held. Multi-node runs need ``step_dir`` on a filesystem every node mounts.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        with atomic_directory(step_dir) as tmp:
            yield tmp
        return
    rank = dist.get_rank()
    manager = atomic_directory(step_dir) if rank == 0 else None
    path = [manager.__enter__() if manager is not None else None]
    dist.broadcast_object_list(path, src=0)
    error: BaseException | None = None
    try:
        yield path[0]
    except BaseException as err:  # every rank must still reach the vote below
        error = err
    failed: list[bool | None] = [None] * dist.get_world_size()
    dist.all_gather_object(failed, error is not None)
    if manager is not None:
        if any(failed):
            failure = error or RuntimeError(f"another rank failed to write its part of {step_dir}")
            manager.__exit__(type(failure), failure, failure.__traceback__)
        else:
            manager.__exit__(None, None, None)
    dist.barrier()  # no rank reads the step directory before the rename
    if error is not None:
        raise error
    if any(failed):
        raise RuntimeError(f"checkpoint {step_dir} not saved: ranks {[i for i, f in enumerate(failed) if f]} failed")


def checkpoint_problems(step_dir: str) -> list[str]:
    """Why ``step_dir`` cannot be resumed from: no valid completion marker, a role directory the marker lists
    is missing, or a file differs from the checksum recorded at save time. Empty when it is intact."""
    from verl.checkpoint.integrity import verify_checkpoint

    if not is_complete_step_dir(step_dir):
        return [f"{step_dir} is incomplete: no valid {COMPLETE_MARKER} (its save did not finish) or a role is missing"]
    return verify_checkpoint(step_dir, COMPLETE_MARKER)


def find_latest_ckpt_path(default_local_dir: str | None) -> str | None:
    """Path of the latest complete, intact ``global_step_N`` directory under ``default_local_dir``, or None.

    The tracker file names the candidate; its directory is used only when it has its completion marker and every
    file matches the checksums recorded at save time. Otherwise (tracker missing, corrupt, naming a directory
    that does not exist, is incomplete or corrupt) this warns, naming the bad files, and falls back to the
    highest step directory that is complete and intact (None when there is none): never a partial or corrupt one.
    """
    if not default_local_dir or not os.path.isdir(default_local_dir):
        return None
    step = read_tracker(default_local_dir)
    rejected: set[str] = set()
    if step is not None:
        step_dir = get_step_dir(default_local_dir, step)
        if os.path.isdir(step_dir):
            problems = checkpoint_problems(step_dir)
            if not problems:
                return step_dir
            logger.warning("checkpoint %s is not usable: %s", step_dir, "; ".join(problems))
            rejected.add(step_dir)
        else:
            logger.warning("checkpoint tracker in %s names %s, which does not exist", default_local_dir, step_dir)
    step_dirs = list_step_dirs(default_local_dir)
    for _step, path in reversed(step_dirs):
        if path in rejected or not is_complete_step_dir(path):
            continue
        problems = checkpoint_problems(path)
        if problems:
            logger.warning("checkpoint %s is not usable: %s", path, "; ".join(problems))
            continue
        logger.warning("using %s, the newest complete and intact checkpoint (the tracker's is not usable)", path)
        return path
    if step_dirs:
        logger.warning("no usable checkpoint in %s (none is complete and intact)", default_local_dir)
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


def checkpoint_root(trainer_config: Mapping[str, Any]) -> str:
    """The checkpoint root of a run: ``trainer.default_local_dir``, under ``trainer.namespace`` when set."""
    base = get_config_value(trainer_config, "default_local_dir")
    if not base:
        raise ValueError("trainer.default_local_dir is not set")
    return namespaced_path(str(base), get_config_value(trainer_config, "namespace"))


def resolve_resume_path(
    trainer_config: Mapping[str, Any], default_local_dir: str | None = None, identity: IdentityArg = None
) -> str | None:
    """Which checkpoint to resume from, per ``trainer.resume_mode``.

    - ``disable``: None (train from scratch).
    - ``auto``: the latest complete checkpoint under ``default_local_dir`` when given (taken as the final,
      already namespaced root), else under :func:`checkpoint_root`; None if there is none.
    - ``resume_path``: ``trainer.resume_from_path`` (a ``global_step_N`` dir); a missing value or path raises.

    With ``identity`` (this run's :func:`.identity.make_identity`, or a zero-argument callable returning it, called
    only when there is a checkpoint to check), the chosen checkpoint must be one of this run's model:
    :func:`.identity.check_resume_identity` raises :class:`.identity.CheckpointMismatchError` otherwise, before
    anything is loaded.
    """
    mode = resume_mode(trainer_config)
    if mode == "disable":
        return None
    if mode == "auto":
        found = find_latest_ckpt_path(default_local_dir or checkpoint_root(trainer_config))
        if found is not None and identity is not None:
            check_resume_identity(found, identity, "auto")
        return found
    path = get_config_value(trainer_config, "resume_from_path")
    if not path:
        raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N dir)")
    path = str(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"trainer.resume_from_path={path} does not exist (expected a global_step_N dir)")
    if not _STEP_RE.fullmatch(os.path.basename(os.path.normpath(path))):
        raise ValueError(f"trainer.resume_from_path={path} is not a global_step_N directory")
    require_intact(path, "trainer.resume_from_path")
    if identity is not None:
        check_resume_identity(path, identity, "resume_path")
    return os.path.abspath(path)


def newest_complete_step_dir(root: str | None) -> str | None:
    """The step directory a resume under ``root`` would most likely take, from the completion markers alone: the
    tracker's step when it is complete, else the highest complete one; None when there is none. Unlike
    :func:`find_latest_ckpt_path` no file is hashed, so this is cheap enough to run before anything loads."""
    if not root or not os.path.isdir(root):
        return None
    step = read_tracker(root)
    if step is not None and is_complete_step_dir(get_step_dir(root, step)):
        return get_step_dir(root, step)
    for _step, path in reversed(list_step_dirs(root)):
        if is_complete_step_dir(path):
            return path
    return None


def check_checkpoint_root(
    trainer_config: Mapping[str, Any], identity: IdentityArg, default_local_dir: str | None = None
) -> None:
    """Refuse, before anything is loaded, a run whose checkpoints would collide with another run's.

    Checked against this run's ``identity`` (:func:`.identity.check_resume_identity`): under ``resume_mode=auto``
    the checkpoint it would resume (the newest complete one of the root); under ``resume_path`` the named
    checkpoint (an algorithm change is then only a warning) and the newest checkpoint of the root this run will
    save into (its steps and retention would mix with another run's). ``disable`` checks nothing
    (:func:`prepare_checkpoint_root` refuses or clears a used root). ``default_local_dir`` is the final,
    namespaced root (default: :func:`checkpoint_root`). Reads completion markers only; raises
    :class:`.identity.CheckpointMismatchError`.
    """
    mode = resume_mode(trainer_config)
    if mode not in ("auto", "resume_path"):
        return
    memo: list[Any] = []

    def current() -> Any:  # computed once, and only when a marker records an identity to compare with
        if not memo:
            memo.append(identity() if callable(identity) else identity)
        return memo[0]

    root = default_local_dir or checkpoint_root(trainer_config)
    named = get_config_value(trainer_config, "resume_from_path") if mode == "resume_path" else None
    if named and os.path.isdir(str(named)) and is_complete_step_dir(str(named)):
        check_resume_identity(str(named), current, "resume_path")
        if os.path.abspath(os.path.dirname(os.path.normpath(str(named)))) == os.path.abspath(root):
            return  # a checkpoint of the root's own run, named explicitly: that run continues
    newest = newest_complete_step_dir(root)
    if newest is not None:
        check_resume_identity(newest, current, "auto")


def require_intact(step_dir: str, what: str = "checkpoint") -> None:
    """Raise :class:`~verl.checkpoint.integrity.CheckpointCorruptError` naming every bad file when
    ``step_dir`` is incomplete or differs from its recorded checksums (for a checkpoint the user named)."""
    from verl.checkpoint.integrity import CheckpointCorruptError

    problems = checkpoint_problems(step_dir)
    if problems:
        raise CheckpointCorruptError(f"{what} {step_dir} cannot be resumed from: " + "; ".join(problems))


def prepare_checkpoint_root(root: str, resume_mode: str, overwrite: bool = False) -> None:
    """Get ``root`` ready for a run, before anything is loaded or saved.

    Removes the temp directories of interrupted saves. With ``resume_mode=disable`` a root that already holds
    checkpoints (a tracker or ``global_step_N`` directories) is refused, since the new run would interleave
    its steps with the old ones, unless ``overwrite``: then the old checkpoints are deleted (with a warning).
    """
    from verl.checkpoint.integrity import remove_stale_temp_dirs

    remove_stale_temp_dirs(root)
    if resume_mode != "disable":
        return
    old = [p for _s, p in list_step_dirs(root)]
    tracker = get_checkpoint_tracker_filename(root)
    if not old and not os.path.exists(tracker):
        return
    if not overwrite:
        raise FileExistsError(
            f"trainer.resume_mode=disable but {root} already holds checkpoints ({len(old)} step directories, "
            f"newest {os.path.basename(old[-1]) if old else 'none'}): a new run there would mix its steps with "
            "the old ones. Use another trainer.default_local_dir (or trainer.namespace), resume with "
            "trainer.resume_mode=auto, or set trainer.overwrite_checkpoints=true to delete them"
        )
    logger.warning("trainer.overwrite_checkpoints=true: deleting %d old checkpoints in %s", len(old), root)
    if os.path.exists(tracker):
        os.remove(tracker)
    for path in old:
        _remove_dir_safely(path)
