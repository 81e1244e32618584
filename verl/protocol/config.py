"""``DataProtoConfig``: process-wide DataProto switches (verl's name), ``auto_padding`` or ``VERL_AUTO_PADDING=1``."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["AUTO_PADDING_ENV", "DataProtoConfig"]

AUTO_PADDING_ENV = "VERL_AUTO_PADDING"


class _DataProtoConfigMeta(type):
    """Class-level properties (``DataProtoConfig.auto_padding = True``), as verl spells them."""

    _config: dict[str, Any] = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        """Pad DataProto batches that do not divide by the number of ranks in DP dispatch (and strip the padding
        from the result). Also on when the environment sets ``VERL_AUTO_PADDING=1`` / ``true``."""
        by_env = os.environ.get(AUTO_PADDING_ENV, "").strip().upper() in ("1", "TRUE")
        return by_env or bool(cls._config.get(cls.auto_padding_key, False))

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        cls._config[cls.auto_padding_key] = bool(enabled)


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide DataProto settings: ``DataProtoConfig.auto_padding`` (default False)."""
