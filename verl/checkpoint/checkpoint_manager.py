"""Helpers of a role's checkpoint directory: extra state (lr scheduler, RNG), Hugging Face saving, safe loading.

The weights and the optimizer state are shard files (:mod:`.sharded_state`, :mod:`.optimizer_state`); the
writer and reader of a whole role directory is :class:`.fsdp_checkpoint_manager.FSDPCheckpointManager`.
Everything written with ``torch.save`` here is read back with ``torch.load(weights_only=True)``: no arbitrary
unpickling. That is why RNG states are stored as tensors and plain Python types only. The directory-level helpers
(tracker, retention, resume) live in :mod:`verl.checkpoint.layout` and are re-exported here under verl's
names.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
from typing import Any

import torch

from verl.checkpoint.layout import (  # noqa: F401  (re-exported under verl's module path)
    finalize_checkpoint,
    find_latest_ckpt_path,
    get_checkpoint_step,
    get_checkpoint_tracker_filename,
    get_step_dir,
    remove_old_checkpoints,
    resolve_resume_path,
)
from verl.checkpoint.rng_state import get_rng_state, set_rng_state  # noqa: F401  (verl's names, also here)
from verl.utils.fs import atomic_binary_file, atomic_write_text

logger = logging.getLogger(__name__)

__all__ = [
    "HF_SUBDIR",
    "LORA_SUBDIR",
    "drop_tied_duplicates",
    "extra_state_filename",
    "get_rng_state",
    "is_peft_model",
    "load_extra_state",
    "load_model_state_dict",
    "safe_torch_load",
    "save_extra_state",
    "save_model_hf",
    "set_rng_state",
]

HF_SUBDIR = "huggingface"
LORA_SUBDIR = "lora_adapter"


def extra_state_filename(rank: int, world_size: int) -> str:
    """``extra_state_world_size_{W}_rank_{R}.pt``."""
    return f"extra_state_world_size_{world_size}_rank_{rank}.pt"


def _atomic_torch_save(obj: Any, path: str) -> None:
    """``torch.save`` into a temp file next to ``path``, fsync, then rename over ``path``."""
    with atomic_binary_file(path) as f:
        torch.save(obj, f)


def safe_torch_load(path: str, what: str, map_location: str | torch.device = "cpu") -> Any:
    """``torch.load(path, weights_only=True)`` with errors that name ``path`` and what it should hold."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint file missing: {path} (expected {what})")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Unsupported global" in str(e):
            raise ValueError(
                f"{path} ({what}) holds objects that weights_only loading refuses (only tensors and plain Python "
                f"types are allowed): {e}"
            ) from e
        raise ValueError(f"{path} ({what}) is corrupt or not a torch.save file: {e}") from e
    except (RuntimeError, EOFError) as e:
        raise ValueError(f"{path} ({what}) is corrupt or truncated: {e}") from e


# ------------------------------------------------------------------------------------------------ model weights


def is_peft_model(model: torch.nn.Module) -> bool:
    """True for a PEFT-wrapped model (LoRA etc.)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def drop_tied_duplicates(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the tied copies (e.g. ``lm_head.weight`` tied to ``embed_tokens``) from a gathered state dict.

    A gathered state dict holds separate copies of tied weights, so storage-sharing checks cannot see the tie;
    the model's active ties (``all_tied_weights_keys``: target -> source) tell which key to keep.
    """
    ties = getattr(model, "all_tied_weights_keys", None) or {}
    return {k: v for k, v in state_dict.items() if not (k in ties and ties[k] in state_dict)}


def save_model_hf(
    model: torch.nn.Module,
    tokenizer: Any,
    path: str,
    state_dict: dict[str, torch.Tensor] | None = None,
    max_shard_size: str | int = "5GB",
    base_model_path: str | None = None,
) -> str:
    """Save ``model`` in Hugging Face format into ``path`` (rank 0 only) and return ``path``.

    Plain models: ``config.json``, ``model.safetensors`` (split with an index above ``max_shard_size``),
    ``generation_config.json`` and the tokenizer files. ``state_dict`` is the full (gathered) state dict when
    the live module is sharded; tied weights (e.g. ``lm_head`` = ``embed_tokens``) are stored once, as
    transformers does. PEFT models: only the adapter (``adapter_model.safetensors`` + ``adapter_config.json``)
    plus the tokenizer; ``base_model_path`` (default: the base model's ``name_or_path``) is recorded as
    ``base_model_name_or_path`` in ``adapter_config.json`` so the merger can find the base.
    """
    os.makedirs(path, exist_ok=True)
    if is_peft_model(model):
        model.save_pretrained(path, state_dict=state_dict, safe_serialization=True)
        cfg_path = os.path.join(path, "adapter_config.json")
        with open(cfg_path, encoding="utf-8") as f:
            adapter_cfg = json.load(f)
        base = base_model_path or adapter_cfg.get("base_model_name_or_path")
        if not base:
            base = getattr(model.get_base_model().config, "name_or_path", None)
        adapter_cfg["base_model_name_or_path"] = base
        atomic_write_text(cfg_path, json.dumps(adapter_cfg, indent=2, sort_keys=True))
    else:
        if state_dict is not None:
            state_dict = drop_tied_duplicates(model, {k: v.detach().to("cpu") for k, v in state_dict.items()})
        model.save_pretrained(path, state_dict=state_dict, max_shard_size=max_shard_size)
        gen_cfg = getattr(model, "generation_config", None)
        if gen_cfg is not None and not os.path.exists(os.path.join(path, "generation_config.json")):
            gen_cfg.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def load_model_state_dict(hf_dir: str) -> dict[str, torch.Tensor]:
    """The full state dict stored in a Hugging Face dir (``model.safetensors`` or its sharded index), on CPU."""
    from verl.checkpoint.sharded_state import hf_weights_state_dict

    state = hf_weights_state_dict(hf_dir)
    if state is None:
        raise FileNotFoundError(
            f"no weights in {hf_dir}: expected model.safetensors or model.safetensors.index.json with its shards"
        )
    return state


# -------------------------------------------------------------------------------------------------- extra state


def save_extra_state(
    path: str,
    rank: int,
    world_size: int,
    lr_scheduler: Any = None,
    rng_state: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """Save lr scheduler state, RNG state (default: the current one) and ``extra`` (plain types/tensors only).

    Written to ``<path>/extra_state_world_size_W_rank_R.pt``; returns the file path.
    """
    body = {
        "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None,
        "rng": rng_state if rng_state is not None else get_rng_state(),
        "extra": extra or {},
    }
    target = os.path.join(path, extra_state_filename(rank, world_size))
    _atomic_torch_save(body, target)
    return target


def _extra_state_file(path: str, rank: int, world_size: int) -> str:
    """This rank's extra-state file; after a change of world size, the saving rank of the same number (rank 0
    for ranks the save did not have). The lr scheduler state is the same on every rank; the RNG streams then
    continue from that rank's."""
    own = os.path.join(path, extra_state_filename(rank, world_size))
    if os.path.isfile(own):
        return own
    saved = sorted(
        int(m.group(1))
        for name in (os.listdir(path) if os.path.isdir(path) else [])
        if (m := re.fullmatch(r"extra_state_world_size_(\d+)_rank_0\.pt", name))
    )
    if len(saved) != 1 or saved[0] == world_size:
        return own  # missing: safe_torch_load names it
    source = rank if rank < saved[0] else 0
    logger.warning(
        "%s was saved on %d ranks, resumed on %d: rank %d restores the lr scheduler and RNG state of saved rank %d",
        path,
        saved[0],
        world_size,
        rank,
        source,
    )
    return os.path.join(path, extra_state_filename(source, saved[0]))


def load_extra_state(
    path: str, rank: int, world_size: int, lr_scheduler: Any = None, restore_rng: bool = True
) -> dict[str, Any]:
    """Load the extra state (weights_only), restore ``lr_scheduler`` and the RNGs, and return ``extra``.

    Reads ``extra_state_world_size_W_rank_R.pt`` of this rank, or, when the checkpoint was saved on another
    number of ranks, the one of the same rank number (rank 0's for ranks beyond the saved world size)."""
    target = _extra_state_file(path, rank, world_size)
    body = safe_torch_load(target, f"lr scheduler + RNG state of rank {rank} of world size {world_size}")
    if not isinstance(body, dict) or "rng" not in body:
        raise ValueError(f"{target}: not an extra-state file (expected keys lr_scheduler, rng, extra)")
    if lr_scheduler is not None:
        if body.get("lr_scheduler") is None:
            raise ValueError(f"{target}: no lr scheduler state saved, but a scheduler was given to restore")
        lr_scheduler.load_state_dict(body["lr_scheduler"])
    if restore_rng:
        set_rng_state(body["rng"])
    return body.get("extra") or {}


def __getattr__(name: str) -> Any:
    """``BaseCheckpointManager`` at upstream's path (it lives in :mod:`.base_manager`, which imports this module)."""
    if name == "BaseCheckpointManager":
        from verl.checkpoint.base_manager import BaseCheckpointManager

        return BaseCheckpointManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
