"""Utilities. ``from verl.utils import hf_tokenizer, hf_processor, omega_conf_to_dataclass`` works as in verl
(loaded on first use)."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("hf_tokenizer", "hf_processor"):
        from verl.utils import tokenizer

        return getattr(tokenizer, name)
    if name == "omega_conf_to_dataclass":
        from verl.utils.config import omega_conf_to_dataclass

        return omega_conf_to_dataclass
    raise AttributeError(f"module 'verl.utils' has no attribute {name!r}")
