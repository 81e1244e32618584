"""Checkpoint integrity: the checksum of every file of a step directory, recorded in its completion marker and
verified before a resume; removal of the temp directories that killed saves leave behind.

Every checkpoint writer (PPO driver, offline trainers, the Python API) marks a step directory complete through
:func:`verl.checkpoint.layout.write_complete_marker`, which stores :func:`compute_checksums` of the directory
in the marker (``"files": {relative path: {"size": bytes, "sha256": hex}}``). Every reader resolves the directory
to resume from through :func:`verl.checkpoint.layout.find_latest_ckpt_path` or
:func:`~verl.checkpoint.layout.resolve_resume_path`, which call :func:`verify_checkpoint` here, so a file
overwritten, truncated or removed after the save is named before anything is loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil

from verl.utils.fs import TMP_PREFIX

__all__ = [
    "CheckpointCorruptError",
    "compute_checksums",
    "file_sha256",
    "remove_stale_temp_dirs",
    "verify_checkpoint",
]

logger = logging.getLogger(__name__)

_CHUNK = 8 << 20  # 8 MiB reads: hashing runs at disk speed without holding a shard in memory


class CheckpointCorruptError(ValueError):
    """A checkpoint directory whose files do not match the checksums recorded when it was saved."""


def file_sha256(path: str) -> str:
    """Hex SHA-256 of the file at ``path``, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _checkpoint_files(step_dir: str, exclude: set[str]) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(step_dir):
        # temp files of an atomic write in progress are not part of the checkpoint
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(TMP_PREFIX))
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), step_dir)
            if name.startswith(TMP_PREFIX) or rel in exclude or os.path.islink(os.path.join(dirpath, name)):
                continue
            out.append(rel)
    return sorted(out)


def compute_checksums(step_dir: str, exclude: tuple[str, ...] = ()) -> dict[str, dict[str, int | str]]:
    """``{relative path: {"size": bytes, "sha256": hex}}`` for every regular file under ``step_dir``.

    ``exclude`` lists relative paths to leave out (the completion marker itself). Paths use ``/``.
    """
    out: dict[str, dict[str, int | str]] = {}
    for rel in _checkpoint_files(step_dir, set(exclude)):
        path = os.path.join(step_dir, rel)
        out[rel.replace(os.sep, "/")] = {"size": os.path.getsize(path), "sha256": file_sha256(path)}
    return out


def verify_checkpoint(step_dir: str, marker_name: str) -> list[str]:
    """Compare ``step_dir`` with the checksums in its marker; returns the problems (empty: intact).

    Each problem names a file: missing, a different size (truncated or grown) or a different SHA-256 (bytes
    changed). A marker without ``files`` (written before checksums existed) yields no problem and a warning;
    a missing or unreadable marker is a problem. Files added after the save are ignored.
    """
    marker = os.path.join(step_dir, marker_name)
    try:
        with open(marker, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return [f"{marker}: no readable completion marker ({type(e).__name__})"]
    files = body.get("files") if isinstance(body, dict) else None
    if files is None:
        logger.warning("%s records no checksums (saved by an older version): its files are not verified", marker)
        return []
    problems = []
    for rel, expected in sorted(files.items()):
        path = os.path.join(step_dir, *rel.split("/"))
        if not os.path.isfile(path):
            problems.append(f"{path}: missing")
            continue
        size = os.path.getsize(path)
        if size != expected.get("size"):
            problems.append(f"{path}: {size} bytes, {expected.get('size')} when saved (truncated or rewritten)")
        elif file_sha256(path) != expected.get("sha256"):
            problems.append(f"{path}: content differs from the checksum recorded when saved")
    return problems


def remove_stale_temp_dirs(root: str) -> list[str]:
    """Delete what killed saves left in ``root`` and its step directories: ``.tmp-*`` entries (temp step
    directories, directories renamed aside for deletion, temp files of atomic writes). Call at the start of a
    run, before anything saves; returns the removed paths."""
    if not os.path.isdir(root):
        return []
    removed = []
    # the root (temp step dirs) and each step dir (role dirs renamed aside by retention, temp files)
    parents = [root] + [
        os.path.join(root, n)
        for n in os.listdir(root)
        if n.startswith("global_step_") and os.path.isdir(os.path.join(root, n))
    ]
    candidates = [os.path.join(d, n) for d in parents for n in sorted(os.listdir(d)) if n.startswith(TMP_PREFIX)]
    for path in candidates:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:
                continue
        removed.append(path)
    if removed:
        logger.warning("removed %d temp entries left by interrupted saves in %s: %s", len(removed), root, removed)
    return removed
