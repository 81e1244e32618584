"""Upstream verl's ``verl.utils.hdfs_io`` (``from verl.utils.hdfs_io import copy, makedirs`` in its data
preprocessing scripts): ``exists``, ``makedirs`` and ``copy`` for local paths and remote URLs.

Local paths use the file system directly; a remote URL (``hdfs://``, ``s3://``, ... as
:func:`verl.utils.fs.is_non_local` tells) goes through fsspec, which needs the scheme's filesystem package
(``pyarrow`` for HDFS, ``s3fs`` for S3) -- fsspec's own error names it when missing.
"""

from __future__ import annotations

import os
import shutil

from verl.utils.fs import is_non_local

__all__ = ["copy", "exists", "makedirs"]


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def exists(path: str, **kwargs) -> bool:
    """Whether ``path`` (a local path or a remote URL) exists."""
    if is_non_local(path):
        import fsspec

        fs, remote = fsspec.core.url_to_fs(path)
        return bool(fs.exists(remote))
    return os.path.exists(_local(path))


def makedirs(name: str, mode: int = 0o777, exist_ok: bool = False, **kwargs) -> None:
    """Create directory ``name`` and its parents; an existing one is an error unless ``exist_ok`` (as
    ``os.makedirs``). Remote URLs are created through fsspec."""
    if is_non_local(name):
        import fsspec

        fs, remote = fsspec.core.url_to_fs(name)
        if fs.exists(remote) and not exist_ok:
            raise FileExistsError(f"makedirs: {name} exists (pass exist_ok=True)")
        fs.makedirs(remote, exist_ok=True)
        return
    os.makedirs(_local(name), mode=mode, exist_ok=exist_ok)


def copy(src: str, dst: str, **kwargs) -> bool:
    """Copy a file or a directory tree from ``src`` to ``dst`` (either may be remote); returns True.

    A directory copied onto an existing directory merges into it (files of the same name are replaced), as
    upstream's scripts expect when they re-run a preprocessing step.
    """
    if is_non_local(src) or is_non_local(dst):
        import fsspec

        if is_non_local(dst):
            fs, remote = fsspec.core.url_to_fs(dst)
            fs.put(_local(src), remote, recursive=os.path.isdir(_local(src)))
        else:
            fs, remote = fsspec.core.url_to_fs(src)
            fs.get(remote, _local(dst), recursive=fs.isdir(remote))
        return True
    src, dst = _local(src), _local(dst)
    if not os.path.exists(src):
        raise FileNotFoundError(f"copy: {src} does not exist")
    if os.path.isdir(src):
        shutil.copytree(src, dst, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst)
    return True
