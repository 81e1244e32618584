"""File-system helpers: atomic writes, atomic directories, namespaces and local copies.

Everything a run saves (metrics, checkpoints, merged models) goes through these helpers so that a crash or an
exception half-way through never leaves a truncated file or a half-written directory where a complete one was
expected, and never damages what an earlier step already saved.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import BinaryIO

__all__ = [
    "copy_local_path_from_hdfs",
    "atomic_binary_file",
    "atomic_directory",
    "atomic_write_bytes",
    "atomic_write_text",
    "copy_to_local",
    "fsync_dir",
    "is_non_local",
    "makedirs",
    "namespaced_path",
    "validate_namespace",
]

_NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# Temp siblings start with this prefix so that listing a directory can tell them from real entries.
TMP_PREFIX = ".tmp-"


def makedirs(path: str, mode: int = 0o777, exist_ok: bool = True) -> str:
    """Create ``path`` and its parents (no error if it exists when ``exist_ok``) and return it."""
    if not path:
        raise ValueError("makedirs: empty path")
    os.makedirs(path, mode=mode, exist_ok=exist_ok)
    return path


def _fsync_path(path: str) -> None:
    """fsync a file or directory by path; nothing where it cannot be opened or the OS refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Flush a directory entry to disk so a preceding rename survives a power loss (no-op where unsupported)."""
    _fsync_path(path)


@contextlib.contextmanager
def atomic_binary_file(path: str) -> Iterator[BinaryIO]:
    """Yield a binary file whose contents replace ``path`` atomically when the block ends without an error.

    The file is a temp sibling of ``path`` (parents are created); on success it is fsynced, renamed over ``path``
    with ``os.replace`` and the directory entry is flushed, so readers see either the old file or the complete new
    one. On an error the temp file is removed and ``path`` is left untouched.
    """
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + os.path.basename(path) + ".", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    fsync_dir(parent)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_binary_file`).

    Readers see either the old file or the complete new one, never a partial write.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"atomic_write_bytes({path!r}): data must be bytes, got {type(data).__name__}")
    with atomic_binary_file(path) as f:
        f.write(data)


def atomic_write_text(path: str, data: str, encoding: str = "utf-8") -> None:
    """Write the string ``data`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    if not isinstance(data, str):
        raise TypeError(f"atomic_write_text({path!r}): data must be str, got {type(data).__name__}")
    atomic_write_bytes(path, data.encode(encoding))


def _fsync_tree(root: str) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fpath = os.path.join(dirpath, name)
            if not os.path.islink(fpath):
                _fsync_path(fpath)
        fsync_dir(dirpath)


@contextlib.contextmanager
def atomic_directory(final_path: str, overwrite: bool = True) -> Iterator[str]:
    """Yield a temp sibling directory to fill; on success it becomes ``final_path`` in one rename.

    On an exception inside the block the temp directory is deleted and ``final_path`` (if it existed) is left
    exactly as it was. If ``final_path`` exists and ``overwrite`` is true it is replaced: the old directory is
    first renamed aside, the new one renamed in, and only then the old one deleted, so at every instant either
    the old or the new complete directory is at ``final_path`` (POSIX cannot rename over a non-empty directory
    in one step). With ``overwrite=False`` an existing ``final_path`` raises ``FileExistsError`` before anything
    is written.

    Example::

        with atomic_directory("out/hf_model") as tmp:
            model.save_pretrained(tmp)
    """
    final_path = os.path.abspath(final_path)
    parent = os.path.dirname(final_path)
    base = os.path.basename(final_path)
    if not base:
        raise ValueError(f"atomic_directory: {final_path!r} has no final component")
    if os.path.exists(final_path) and not overwrite:
        raise FileExistsError(f"atomic_directory: {final_path} already exists and overwrite=False")
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{base}.", dir=parent)
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old: str | None = None
    if os.path.lexists(final_path):
        if not overwrite:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(f"atomic_directory: {final_path} appeared while writing and overwrite=False")
        old = os.path.join(parent, f"{TMP_PREFIX}{base}.old-{uuid.uuid4().hex[:8]}")
        os.replace(final_path, old)
    try:
        os.replace(tmp, final_path)
    except BaseException:
        # Put the previous directory back so nothing already saved is lost.
        if old is not None:
            os.replace(old, final_path)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(parent)
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.remove(old)


def validate_namespace(ns: str) -> str:
    """Check that ``ns`` is a safe single path component and return it.

    Allowed: 1-64 characters from ``[A-Za-z0-9._-]``, starting with a letter or digit. This refuses the empty
    string, ``/`` and ``\\``, ``.``/``..``, leading dots or dashes, whitespace and anything else that could escape
    or alias the base directory.
    """
    if not isinstance(ns, str):
        raise ValueError(f"namespace must be a string, got {type(ns).__name__}: {ns!r}")
    if not _NAMESPACE_RE.fullmatch(ns):
        raise ValueError(
            f"invalid namespace {ns!r}: expected 1-64 characters from [A-Za-z0-9._-] starting with a letter or "
            "digit (no '/', '..', spaces or empty names)"
        )
    return ns


def namespaced_path(base: str, namespace: str | None) -> str:
    """Return ``<base>/<namespace>`` when a namespace is set (validated), else ``base`` unchanged."""
    if namespace is None:
        return base
    return os.path.join(base, validate_namespace(namespace))


def is_non_local(path: str) -> bool:
    """True when ``path`` is a remote URL (``scheme://...`` other than ``file://``)."""
    return "://" in path and not path.startswith("file://")


def copy_to_local(src: str, cache_dir: str | None = None, use_shm: bool = False) -> str:
    """Return a local path for ``src``: local paths are returned as is, remote ones are copied with fsspec.

    Remote files/directories (``hdfs://``, ``s3://`` ...) are copied under ``cache_dir`` (default: a temp dir, or
    ``/dev/shm`` when ``use_shm``) and the local copy's path is returned. The copy is atomic, so an interrupted
    download is never mistaken for a complete one.
    """
    if src.startswith("file://"):
        src = src[len("file://") :]
    if not is_non_local(src):
        if not os.path.exists(src):
            raise FileNotFoundError(f"copy_to_local: {src} does not exist")
        return src
    import fsspec

    root = cache_dir or ("/dev/shm/verl-cache" if use_shm else os.path.join(tempfile.gettempdir(), "verl-cache"))
    name = re.sub(r"[^A-Za-z0-9._-]", "_", src.split("://", 1)[1]).strip("_") or "remote"
    dst = os.path.join(root, name)
    if os.path.exists(dst):
        return dst
    fs, remote = fsspec.core.url_to_fs(src)
    if fs.isdir(remote):
        with atomic_directory(dst) as tmp:
            fs.get(remote.rstrip("/") + "/", tmp, recursive=True)
    else:
        with fs.open(remote, "rb") as f:
            atomic_write_bytes(dst, f.read())
    return dst


def copy_local_path_from_hdfs(src: str, cache_dir: str | None = None, use_shm: bool = False) -> str:
    """verl's older name of :func:`copy_to_local` (same arguments, same result)."""
    return copy_to_local(src, cache_dir=cache_dir, use_shm=use_shm)
