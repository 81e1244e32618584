"""Model helpers verl's code imports from ``verl.utils.model``."""

from __future__ import annotations

from typing import Any

from verl.utils.torch_functional import compute_position_id_with_mask

__all__ = ["compute_position_id_with_mask", "update_model_config"]


def update_model_config(module_config: Any, override_config_kwargs: dict[str, Any]) -> None:
    """Set each ``key: value`` of ``override_config_kwargs`` on ``module_config`` (a ``transformers`` config), in
    place; a dict value updates the nested config of that name recursively."""
    for key, value in override_config_kwargs.items():
        nested = getattr(module_config, key, None)
        if isinstance(value, dict) and nested is not None and not isinstance(nested, dict):
            update_model_config(nested, value)
        else:
            setattr(module_config, key, value)
