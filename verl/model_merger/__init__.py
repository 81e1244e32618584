"""Checkpoint -> Hugging Face directory (``python -m verl.model_merger merge ...`` or :func:`merge_checkpoint`)."""

from verl.model_merger.base_model_merger import load_full_state_dict, merge_checkpoint

__all__ = ["load_full_state_dict", "merge_checkpoint"]
