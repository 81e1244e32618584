"""verl's module path for config conversion: :func:`omega_conf_to_dataclass` (defined in :mod:`verl.base_config`)."""

from verl.base_config import omega_conf_to_dataclass

__all__ = ["omega_conf_to_dataclass"]
