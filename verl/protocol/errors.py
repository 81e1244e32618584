"""The error DataProto raises for bad shapes, uneven chunks and union conflicts (defined on the ground floor,
:mod:`verl.utils.errors`, so ``verl.utils`` helpers raise it without importing ``verl.protocol``)."""

from __future__ import annotations

from verl.utils.errors import DataProtoError

__all__ = ["DataProtoError"]
