"""Resolve dataset paths: local files, ``~`` and ``bundled://`` names for the data shipped inside the package."""

from __future__ import annotations

import os

BUNDLED_SCHEME = "bundled://"


def bundled_data_root() -> str:
    """Return the directory holding the package's bundled data files (``verl/data``)."""
    import verl

    return os.path.join(os.path.dirname(os.path.abspath(verl.__file__)), "data")


def resolve_data_path(path: str) -> str:
    """Turn a user-facing data path into a local filesystem path.

    ``bundled://arithmetic/train.parquet`` maps to ``<verl package>/data/arithmetic/train.parquet``; ``~`` is
    expanded; everything else is returned as an absolute path. The path is not required to exist here (callers
    report missing files with their own context), except for bundled names, which are checked because a typo
    there can only be a programming error.
    """
    if not isinstance(path, str) or not path:
        raise ValueError(f"data path must be a non-empty string, got {path!r}")
    if path.startswith(BUNDLED_SCHEME):
        rel = path[len(BUNDLED_SCHEME) :].lstrip("/")
        root = bundled_data_root()
        resolved = os.path.normpath(os.path.join(root, rel))
        # Refuse names that climb out of the bundled directory (e.g. bundled://../../etc/passwd).
        if os.path.commonpath([root, resolved]) != root:
            raise ValueError(f"bundled data path {path!r} points outside the bundled data directory {root}")
        if not os.path.isfile(resolved):
            available = sorted(
                os.path.relpath(os.path.join(d, f), root)
                for d, _, files in os.walk(root)
                for f in files
                if f.endswith(".parquet")
            )
            raise ValueError(f"bundled data file {path!r} not found (looked in {resolved}); available: {available}")
        return resolved
    return os.path.abspath(os.path.expanduser(path))
