"""Utilities. ``from verl.utils import hf_tokenizer, hf_processor`` works as in verl (loaded on first use)."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("hf_tokenizer", "hf_processor"):
        from verl.utils import tokenizer

        return getattr(tokenizer, name)
    raise AttributeError(f"module 'verl.utils' has no attribute {name!r}")
