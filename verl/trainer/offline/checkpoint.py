"""Checkpoints and the final export of the offline trainers, in the layout PPO uses.

::

    <root> = <default_local_dir>[/<namespace>]
        global_step_N/actor/huggingface/           full weights + config + tokenizer (transformers models)
        global_step_N/actor/model.safetensors      plain torch modules (no Hugging Face config to save)
        global_step_N/actor/optim.pt               optimizer state keyed by parameter names (world-size free)
        global_step_N/actor/extra_state_world_size_1_rank_0.pt   lr scheduler, RNG, step/epoch
        global_step_N/checkpoint_complete.json
        latest_checkpointed_iteration.txt
        hf_model/                                  final export, loadable by AutoModelForCausalLM

Each step directory is written into a temp sibling and renamed in whole (``atomic_directory``), then marked
complete and pointed to by the tracker, so a crash never leaves a half checkpoint where resume would look.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from verl.utils import fsdp_utils
from verl.utils.checkpoint.checkpoint_manager import (
    HF_SUBDIR,
    is_peft_model,
    load_extra_state,
    safe_torch_load,
    save_extra_state,
    save_model_hf,
)
from verl.utils.checkpoint.layout import finalize_checkpoint, get_step_dir, remove_old_checkpoints
from verl.utils.fs import atomic_directory

logger = logging.getLogger(__name__)

ROLE = "actor"
OPTIM_FILE = "optim.pt"
PLAIN_WEIGHTS_FILE = "model.safetensors"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def is_hf_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` can be saved as a Hugging Face directory (``save_pretrained`` + a config)."""
    return hasattr(model, "save_pretrained") and getattr(model, "config", None) is not None


def _write_weights(model: torch.nn.Module, tokenizer: Any, state: dict[str, torch.Tensor], role_dir: str) -> None:
    if is_hf_model(model):
        save_model_hf(model, tokenizer, os.path.join(role_dir, HF_SUBDIR), state_dict=state)
    else:
        from safetensors.torch import save_file

        os.makedirs(role_dir, exist_ok=True)
        save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(role_dir, PLAIN_WEIGHTS_FILE))


def save_checkpoint(
    root: str,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, Any],
    max_to_keep: int | None,
) -> str:
    """Write ``<root>/global_step_<step>`` atomically, mark it complete, apply retention; returns its path.

    Collective under torch.distributed (every rank gathers its shards); only rank 0 writes.
    """
    state = fsdp_utils.get_full_model_state_dict(model)
    optim_state = fsdp_utils.get_full_optimizer_state_dict(model, optimizer)
    step_dir = get_step_dir(root, step)
    if _rank() == 0:
        with atomic_directory(step_dir) as tmp:
            role_dir = os.path.join(tmp, ROLE)
            _write_weights(model, tokenizer, state, role_dir)
            torch.save(optim_state, os.path.join(role_dir, OPTIM_FILE))
            save_extra_state(role_dir, 0, 1, lr_scheduler=scheduler, extra=extra)
        finalize_checkpoint(root, step, roles=[ROLE])
        remove_old_checkpoints(root, max_to_keep, subdir=ROLE, current_step=step)
    _barrier()
    return step_dir


def _read_weights(role_dir: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    plain = os.path.join(role_dir, PLAIN_WEIGHTS_FILE)
    files = [plain] if os.path.isfile(plain) else sorted(glob.glob(os.path.join(role_dir, HF_SUBDIR, "*.safetensors")))
    if not files:
        raise FileNotFoundError(
            f"checkpoint {role_dir} has no weights ({HF_SUBDIR}/*.safetensors or {PLAIN_WEIGHTS_FILE})"
        )
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(f))
        except Exception as e:  # safetensors raises its own error types for a truncated or garbled header
            raise ValueError(f"checkpoint weights {f} are corrupt or truncated: {type(e).__name__}: {e}") from e
    return state


def load_checkpoint(
    step_dir: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and RNG from ``step_dir``; returns the saved ``extra`` dict."""
    role_dir = os.path.join(step_dir, ROLE)
    if not os.path.isdir(role_dir):
        raise FileNotFoundError(f"checkpoint {step_dir} has no {ROLE}/ directory")
    state = _read_weights(role_dir)
    if is_peft_model(model):
        # the checkpoint holds the adapter only: the frozen base weights come from the live model
        from verl.utils.lora import adapter_to_model_keys

        full = fsdp_utils.get_full_model_state_dict(model)
        full.update(adapter_to_model_keys(state))
        state = full
    # Tied weights (lm_head = embed_tokens) are stored once; give the tied name its source tensor back.
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target not in state and source in state:
            state[target] = state[source]
    expected = set(model.state_dict().keys())
    missing = sorted(expected - set(state))
    if missing:
        raise ValueError(f"checkpoint {role_dir} lacks weights {missing[:5]} (of {len(missing)} missing)")
    fsdp_utils.set_full_model_state_dict(model, state)
    optim_state = safe_torch_load(os.path.join(role_dir, OPTIM_FILE), "optimizer state")
    fsdp_utils.set_full_optimizer_state_dict(model, optimizer, optim_state)
    return load_extra_state(role_dir, 0, 1, lr_scheduler=scheduler)


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
        from verl.utils.lora import merged_state_dict

        lora_cfg = model.peft_config[model.active_adapter]
        state = merged_state_dict(state, float(lora_cfg.lora_alpha) / float(lora_cfg.r)) if _rank() == 0 else {}
        model = model.get_base_model()
    if _rank() == 0:
        with atomic_directory(target) as tmp:
            save_model_hf(model, tokenizer, tmp, state_dict=state)
    _barrier()
    return target
