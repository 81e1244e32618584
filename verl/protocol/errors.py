"""The error DataProto raises for bad shapes, uneven chunks and union conflicts."""

from __future__ import annotations

__all__ = ["DataProtoError"]


class DataProtoError(ValueError, AssertionError):
    """A DataProto operation got data it cannot use (mismatched batch sizes, an uneven chunk, a union conflict).

    It is a ``ValueError`` (the project's convention for bad input) and also an ``AssertionError``, because verl
    raises these cases with ``assert`` and its tests and recipes catch ``AssertionError``.
    """
