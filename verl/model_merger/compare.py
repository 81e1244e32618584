"""``python -m verl.model_merger test``: check that a checkpoint's merged weights equal a Hugging Face directory's.

Upstream verl's CI saves a run with ``hf_model`` in ``checkpoint.save_contents`` and then runs ``test --local_dir
global_step_N/actor --test_hf_dir global_step_N/actor/huggingface``: the weights reassembled from the rank shards
must be the weights written in Hugging Face form. Here the same check reads both sides as state dicts (no model is
built): every tensor name on both sides, the same shapes, and the same values once the checkpoint's tensor is cast
to the reference's dtype (the reference is often saved in bf16 while the shards hold fp32).
"""

from __future__ import annotations

import os

import torch

from verl.checkpoint.sharded_state import hf_weights_state_dict
from verl.model_merger.base_model_merger import load_full_state_dict

__all__ = ["compare_with_hf_dir"]


def _tied_head(hf_dir: str) -> bool:
    """Whether the reference model ties its output head to the input embedding (``tie_word_embeddings``): then
    ``lm_head.weight`` may be stored on one side only."""
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        return False
    from transformers import AutoConfig

    # transformers' own reading of config.json (its default, and a nested text_config's, included)
    config = AutoConfig.from_pretrained(hf_dir)
    return bool(config.get_text_config().tie_word_embeddings)


def compare_with_hf_dir(
    local_dir: str, test_hf_dir: str, *, atol: float = 1e-6, rtol: float = 1e-6, merge_lora: bool = True
) -> tuple[int, list[str]]:
    """Compare the full weights of ``local_dir`` (a role dir's rank shards, or its ``huggingface/``; a LoRA run's
    adapters merged: ``W + (alpha / r) B A``) with the weights stored in ``test_hf_dir``.

    Returns ``(tensors compared, problems)``; each problem names the tensor (missing on one side, a shape, or the
    largest absolute difference). Values are compared after casting the checkpoint's tensor to the reference's
    dtype, within ``atol + rtol * |reference|``.

    Raises:
        FileNotFoundError: a side holds no weights.
    """
    state = load_full_state_dict(local_dir, merge_lora) if os.path.isdir(local_dir) else None
    if state is None:
        raise FileNotFoundError(
            f"no weights in {local_dir}: expected model_world_size_W_rank_R.safetensors shards or huggingface/"
        )
    reference = hf_weights_state_dict(test_hf_dir) if os.path.isdir(test_hf_dir) else None
    if reference is None:
        raise FileNotFoundError(f"no weights in {test_hf_dir}: expected model.safetensors (or its index)")
    tied = _tied_head(test_hf_dir)
    problems: list[str] = []
    for name in sorted(set(reference) - set(state)):
        if not (tied and name == "lm_head.weight"):
            problems.append(f"{name}: in {test_hf_dir}, not in the checkpoint")
    for name in sorted(set(state) - set(reference)):
        if not (tied and name == "lm_head.weight"):
            problems.append(f"{name}: in the checkpoint, not in {test_hf_dir}")
    compared = 0
    for name in sorted(set(state) & set(reference)):
        ours, ref = state[name], reference[name]
        compared += 1
        if ours.shape != ref.shape:
            problems.append(f"{name}: shape {tuple(ours.shape)} in the checkpoint, {tuple(ref.shape)} in {test_hf_dir}")
            continue
        ours, ref = ours.to(ref.dtype).float(), ref.float()
        if not torch.allclose(ours, ref, atol=atol, rtol=rtol):
            diff = (ours - ref).abs().max().item()
            problems.append(f"{name}: values differ (largest absolute difference {diff:.3g}, in {ref.dtype})")
    return compared, problems
