"""``model.use_shm`` (upstream verl's key): load a model from a copy in shared memory (``/dev/shm``).

Upstream copies the checkpoint into ``/dev/shm`` before loading so that the ranks of a node read it from RAM rather
than from a (network) file system. Here :func:`copy_to_shm` does the same for a resolved local model directory: one
copy per node and source directory (``/dev/shm/verl-models/<hash>-<name>``), made once (ranks racing for it copy into
private temporary directories and the first rename wins), reused by later runs while the source is unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile

logger = logging.getLogger(__name__)

SHM_ROOT = "/dev/shm"


def _fingerprint(src: str) -> str:
    """A short hash of the source directory's path and its files' names, sizes and modification times."""
    h = hashlib.sha1(os.path.abspath(src).encode())
    for base, dirs, files in sorted(os.walk(src)):
        dirs.sort()
        for name in sorted(files):
            st = os.stat(os.path.join(base, name))
            h.update(f"{os.path.relpath(os.path.join(base, name), src)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def copy_to_shm(src: str, shm_root: str = SHM_ROOT) -> str:
    """The path of a copy of the model directory ``src`` under ``<shm_root>/verl-models`` (made when missing).

    Returns ``src`` itself, with a warning, when ``shm_root`` does not exist (no shared memory file system) or has
    too little free space for the copy.
    """
    if not os.path.isdir(shm_root):
        logger.warning("model.use_shm: %s does not exist here; loading %s in place", shm_root, src)
        return src
    size = sum(os.path.getsize(os.path.join(b, f)) for b, _, fs in os.walk(src) for f in fs)
    free = shutil.disk_usage(shm_root).free
    root = os.path.join(shm_root, "verl-models")
    dest = os.path.join(root, f"{_fingerprint(src)}-{os.path.basename(os.path.normpath(src))}")
    if os.path.isdir(dest):
        return dest
    if size > free:
        logger.warning("model.use_shm: %s needs %d bytes, %s has %d free; loading in place", src, size, shm_root, free)
        return src
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".partial-", dir=root)
    try:
        shutil.copytree(src, os.path.join(tmp, "m"), dirs_exist_ok=False)
        try:
            os.rename(os.path.join(tmp, "m"), dest)
        except OSError:
            if not os.path.isdir(dest):  # not another rank's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
