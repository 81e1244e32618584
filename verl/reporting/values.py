"""Metric values as plain numbers: what every tracking backend and the progress bar show.

Metric values may be Python ints/floats/bools, 0-d (or one-element) torch tensors, numpy scalars or 0-d arrays;
:func:`to_scalar` turns one into an int or a float, or raises a ValueError naming the metric.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

__all__ = ["config_to_dict", "fmt", "to_scalar", "to_scalars"]


def to_scalar(key: str, value: Any) -> int | float:
    """Convert one metric value to a Python int or float; anything else raises a ValueError naming ``key``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "numel") and hasattr(value, "item"):  # torch tensor
        if value.numel() != 1:
            raise ValueError(f"metric {key!r}: expected a scalar, got a tensor of shape {tuple(value.shape)}")
        item = value.item()
        return int(item) if isinstance(item, (bool, int)) else float(item)
    if hasattr(value, "shape") and hasattr(value, "item"):  # numpy scalar / array
        if getattr(value, "size", 1) != 1:
            raise ValueError(f"metric {key!r}: expected a scalar, got an array of shape {tuple(value.shape)}")
        return to_scalar(key, value.item())
    raise ValueError(
        f"metric {key!r}: expected a number (int, float, 0-d tensor, numpy scalar), got {type(value).__name__}: "
        f"{value!r:.80}"
    )


def to_scalars(data: Mapping[str, Any]) -> dict[str, int | float]:
    if not isinstance(data, Mapping):
        raise TypeError(f"Tracking.log: data must be a dict of metric name -> number, got {type(data).__name__}")
    out: dict[str, int | float] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"metric names must be strings, got {key!r}")
        out[key] = to_scalar(key, value)
    return out


def config_to_dict(config: Any) -> dict[str, Any] | None:
    """Turn an OmegaConf config, dataclass or mapping into plain JSON-able containers."""
    if config is None:
        return None
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            try:
                return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
            except Exception:  # unresolved interpolations: keep them as written
                return OmegaConf.to_container(config, resolve=False)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    import dataclasses

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"Tracking: config must be a DictConfig, dataclass or dict, got {type(config).__name__}")


def fmt(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"
