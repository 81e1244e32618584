"""``hf_tokenizer`` / ``hf_processor``: load a Hugging Face tokenizer or processor the way verl's code expects."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["hf_processor", "hf_tokenizer", "set_pad_token_id", "use_chat_template"]

logger = logging.getLogger(__name__)


def set_pad_token_id(tokenizer: Any) -> None:
    """Give a tokenizer without a pad token its EOS token as pad token (generation and batching need one)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id
        logger.warning("tokenizer has no pad token; using eos_token_id %s", tokenizer.eos_token_id)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def use_chat_template(tokenizer: Any, template: str | None) -> Any:
    """``tokenizer`` with its chat template replaced by ``template`` (``actor_rollout_ref.model.custom_chat_template``,
    a Jinja template; None or empty: unchanged). The tokenizer saved with checkpoints and exports keeps it."""
    if template:
        tokenizer.chat_template = str(template)
    return tokenizer


def hf_tokenizer(name_or_path: str, correct_pad_token: bool = True, correct_gemma2: bool = True, **kwargs: Any):
    """``AutoTokenizer.from_pretrained(name_or_path, **kwargs)``, with the pad token set to EOS when missing
    (``correct_pad_token``). For Gemma-2 checkpoints (``correct_gemma2``) the EOS token is ``<end_of_turn>``, the
    end of a chat turn, as verl sets it."""
    from transformers import AutoTokenizer

    if correct_gemma2 and isinstance(name_or_path, str) and "gemma-2-2b-it" in name_or_path:
        kwargs["eos_token"] = "<end_of_turn>"
        kwargs["eos_token_id"] = 107
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if correct_pad_token:
        set_pad_token_id(tokenizer)
    return tokenizer


def hf_processor(name_or_path: str, **kwargs: Any):
    """``AutoProcessor.from_pretrained(name_or_path, **kwargs)`` for multimodal models; ``None`` when the model has
    no processor or the processor is only a tokenizer (text-only models)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(name_or_path, **kwargs)
    except (OSError, ValueError) as e:
        logger.info("no processor for %s (%s)", name_or_path, e)
        return None
    if processor is not None and "Processor" not in type(processor).__name__:
        return None
    return processor
