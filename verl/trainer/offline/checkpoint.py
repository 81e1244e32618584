"""Checkpoints and the final export of the offline trainers (SFT, DPO, KTO), in the layout PPO uses.

::

    <root> = <default_local_dir>[/<namespace>]
        global_step_N/actor/    per-rank model and optimizer shards, extra state, huggingface/ config + tokenizer
        global_step_N/checkpoint_complete.json
        latest_checkpointed_iteration.txt
        hf_model/               final export, loadable by AutoModelForCausalLM

The role directory is written by :class:`~verl.checkpoint.FSDPCheckpointManager` (the same writer as the PPO
workers): every rank saves its own shards, so nothing is gathered, and a run resumes on another number of ranks.
The step directory is filled in a temp sibling and renamed in whole (``layout.atomic_step_dir``), then
marked complete and pointed to by the tracker, so a crash never leaves a half checkpoint where resume looks.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from verl.checkpoint.checkpoint_manager import is_peft_model, save_model_hf
from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.checkpoint.layout import atomic_step_dir, finalize_checkpoint, get_step_dir, remove_old_checkpoints
from verl.utils import fsdp_utils
from verl.utils.fs import atomic_directory

logger = logging.getLogger(__name__)

ROLE = "actor"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def is_hf_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` can be saved as a Hugging Face directory (``save_pretrained`` + a config)."""
    return hasattr(model, "save_pretrained") and getattr(model, "config", None) is not None


def save_checkpoint(
    root: str,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, Any],
    max_to_keep: int | None,
    identity: dict[str, Any] | None = None,
) -> str:
    """Write ``<root>/global_step_<step>`` atomically, mark it complete (recording ``identity``: what it is a
    checkpoint of, see :mod:`verl.checkpoint.identity`), apply retention; returns its path.

    Collective under torch.distributed: every rank writes its own shards."""
    step_dir = get_step_dir(root, step)
    manager = FSDPCheckpointManager(model, optimizer, scheduler, processing_class=tokenizer)
    with atomic_step_dir(step_dir) as tmp:
        manager.save_checkpoint(os.path.join(tmp, ROLE), global_step=step, extra=extra)
    if _rank() == 0:
        finalize_checkpoint(root, step, roles=[ROLE], identity=identity)
        remove_old_checkpoints(root, max_to_keep, subdir=ROLE, current_step=step)
    _barrier()
    return step_dir


def load_checkpoint(
    step_dir: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and RNG from ``step_dir`` (saved on any number of ranks); returns
    the saved ``extra`` dict."""
    role_dir = os.path.join(step_dir, ROLE)
    if not os.path.isdir(role_dir):
        raise FileNotFoundError(f"checkpoint {step_dir} has no {ROLE}/ directory")
    return FSDPCheckpointManager(model, optimizer, scheduler).load_checkpoint(role_dir)


def export_hf(root: str, model: torch.nn.Module, tokenizer: Any) -> str | None:
    """Write the final model + tokenizer to ``<root>/hf_model`` (atomically); None for a plain torch module.

    A LoRA (PEFT) model is exported merged: plain weights ``W + (alpha / r) * B @ A`` under the base model's names.
    """
    state = fsdp_utils.get_full_model_state_dict(model)
    target = os.path.join(root, "hf_model")
    if not is_hf_model(model):
        logger.warning("not exporting %s: the model is a plain torch module without a Hugging Face config", target)
        return None
    if is_peft_model(model):
        # a directory transformers loads directly: the adapters merged into the base weights
        from verl.models.lora import merged_state_dict

        lora_cfg = model.peft_config[model.active_adapter]
        state = merged_state_dict(state, float(lora_cfg.lora_alpha) / float(lora_cfg.r)) if _rank() == 0 else {}
        model = model.get_base_model()
    if _rank() == 0:
        with atomic_directory(target) as tmp:
            save_model_hf(model, tokenizer, tmp, state_dict=state)
    _barrier()
    return target
