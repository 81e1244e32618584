"""Model helpers verl's code imports from ``verl.utils.model``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.utils.torch_functional import compute_position_id_with_mask

__all__ = ["compute_position_id_with_mask", "create_random_mask", "update_model_config"]


def update_model_config(module_config: Any, override_config_kwargs: dict[str, Any]) -> None:
    """Set each ``key: value`` of ``override_config_kwargs`` on ``module_config`` (a ``transformers`` config), in
    place; a dict value updates the nested config of that name recursively."""
    for key, value in override_config_kwargs.items():
        nested = getattr(module_config, key, None)
        if isinstance(value, dict) and nested is not None and not isinstance(nested, dict):
            update_model_config(nested, value)
        else:
            setattr(module_config, key, value)


def create_random_mask(
    input_ids: torch.Tensor,
    max_ratio_of_valid_token: float,
    max_ratio_of_left_padding: float,
    min_ratio_of_valid_token: float = 0,
) -> torch.Tensor:
    """A random 0/1 attention mask shaped like ``input_ids`` ``[batch, seq_len]``, for tests of padding code.

    Each row gets ``left ~ U{0..floor(seq_len * max_ratio_of_left_padding)}`` zeros, then
    ``valid ~ U{max(1, floor(seq_len * min_ratio_of_valid_token))..floor(seq_len * max_ratio_of_valid_token)}``
    ones, then zeros to the end (left and right padding), drawn with numpy's global generator (upstream
    ``verl.utils.model.create_random_mask``). Returns an int64 tensor; ValueError on ratios that cannot fit.
    """
    batch_size, seq_len = input_ids.shape
    if not 0 < max_ratio_of_valid_token <= 1.0 or not 0 <= max_ratio_of_left_padding < 1.0:
        raise ValueError(
            f"create_random_mask: max_ratio_of_valid_token={max_ratio_of_valid_token} must be in (0, 1] and "
            f"max_ratio_of_left_padding={max_ratio_of_left_padding} in [0, 1)"
        )
    if min_ratio_of_valid_token > max_ratio_of_valid_token:
        raise ValueError(
            f"create_random_mask: min_ratio_of_valid_token={min_ratio_of_valid_token} > "
            f"max_ratio_of_valid_token={max_ratio_of_valid_token}"
        )
    max_valid = int(seq_len * max_ratio_of_valid_token)
    min_valid = max(1, int(seq_len * min_ratio_of_valid_token))
    max_left = int(seq_len * max_ratio_of_left_padding)
    if max_valid < 1 or max_valid + max_left > seq_len:
        raise ValueError(f"create_random_mask: {max_valid} valid + {max_left} left-padding tokens exceed {seq_len}")
    masks = torch.zeros_like(input_ids, dtype=torch.int64)
    for row in range(batch_size):
        left = int(np.random.randint(0, max_left + 1))
        valid = int(np.random.randint(min_valid, max_valid + 1))
        masks[row, left : left + valid] = 1
    return masks
