"""``FSDPCheckpointManager``: the one writer and reader of a role's checkpoint (actor, critic, an offline policy).

Used by the PPO workers (and so by ``main_ppo``, the driver and the Python API) and by the offline trainers (SFT,
DPO, KTO). A role directory (``<default_local_dir>/global_step_N/<role>``) holds::

    model_world_size_W_rank_R.safetensors    every rank's own block of every weight (sharded_state.py)
    optim_world_size_W_rank_R.safetensors    every rank's own block of the optimizer state (optimizer_state.py)
    extra_state_world_size_W_rank_R.pt       lr scheduler, RNG states, caller's extras (torch.save, weights_only)
    huggingface/                             rank 0: config, generation config, tokenizer; with ``hf_model`` in
                                             ``save_contents`` also the full weights (gathered: opt-in)
    lora_adapter/                            PEFT models: adapter weights + adapter_config.json (rank 0)

No rank gathers the model or the optimizer for a regular save; every file is written atomically. Loading works
onto any world size: each rank reads its own block of every tensor from whichever files hold it, so a run saved
on 4 ranks resumes on 2 with the same weights and optimizer state, and on the same world size bit-exactly (the
RNG states of the saving ranks come back too). ``python -m verl.model_merger`` turns the shards into a Hugging Face
directory. Completion marking and retention are the caller's job, after every role is saved (``layout.py``): the
marker is written last, so a crash mid-save leaves the previous checkpoint the one that is resumed.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from verl.checkpoint.checkpoint_manager import (
    HF_SUBDIR,
    LORA_SUBDIR,
    is_peft_model,
    load_extra_state,
    save_extra_state,
    save_model_hf,
)
from verl.checkpoint.optimizer_state import load_optimizer_shards, save_optimizer_shards
from verl.checkpoint.sharded_state import (
    ShardReader,
    has_shards,
    hf_weights_state_dict,
    load_state_shards,
    save_state_shards,
)
from verl.models.log_z_head import without_training_only

__all__ = ["ALL_CONTENTS", "DEFAULT_CONTENTS", "FSDPCheckpointManager"]

ALL_CONTENTS = ("model", "optimizer", "extra", "hf_model")
DEFAULT_CONTENTS = ("model", "optimizer", "extra")


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    # Compiled modules keep the real one in ``_orig_mod``; FSDP2 wraps in place, so nothing else to peel.
    return getattr(model, "_orig_mod", model)


def _transformers_model(module: torch.nn.Module) -> torch.nn.Module | None:
    """The transformers model whose config describes ``module``'s weights (a PEFT base, a wrapper's inner model)."""
    if is_peft_model(module):
        module = module.get_base_model()
    inner = getattr(module, "hf_model", None)  # verl.ActorModel wraps a transformers model
    if isinstance(inner, torch.nn.Module):
        module = inner
    return module if hasattr(module, "save_pretrained") and getattr(module, "config", None) is not None else None


def model_meta(module: torch.nn.Module) -> dict[str, Any]:
    """What the merger needs beside the tensors: the prefix to strip for transformers names, and LoRA scaling."""
    meta: dict[str, Any] = {"class": f"{type(module).__module__}.{type(module).__qualname__}"}
    prefix = getattr(module, "weights_prefix", "")
    if isinstance(prefix, str) and prefix:
        meta["weights_prefix"] = prefix
    if is_peft_model(module):
        cfg = module.peft_config[module.active_adapter]
        meta["lora"] = {"r": int(cfg.r), "lora_alpha": float(cfg.lora_alpha), "adapter": module.active_adapter}
    return meta


class FSDPCheckpointManager:
    """Save and restore one role: weight shards, optimizer shards, lr scheduler + RNG, and a Hugging Face config.

    Args:
        model: the (FSDP2-sharded or plain) module.
        optimizer: its optimizer, or None (e.g. a reference model).
        lr_scheduler: its scheduler, or None.
        processing_class: tokenizer/processor saved into ``huggingface/``, or None.
        save_contents: subset of ``model``, ``optimizer``, ``extra``, ``hf_model`` to save.
        load_contents: subset to load (``hf_model`` is never loaded: ``model`` falls back to it when a checkpoint
            holds no shards).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        save_contents: Sequence[str] = DEFAULT_CONTENTS,
        load_contents: Sequence[str] = DEFAULT_CONTENTS,
    ) -> None:
        for name in (*save_contents, *load_contents):
            if name not in ALL_CONTENTS:
                raise ValueError(f"unknown checkpoint content {name!r}; expected a subset of {list(ALL_CONTENTS)}")
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        self.save_contents = list(save_contents)
        self.load_contents = [c for c in load_contents if c != "hf_model"]

    # --------------------------------------------------------------------------------------------------- save
    def save_checkpoint(self, local_path: str, global_step: int = 0, extra: dict[str, Any] | None = None) -> None:
        """Write this role's checkpoint into ``local_path``; every rank calls it (collective under FSDP).

        ``extra`` (plain types/tensors) is stored with the RNG state, e.g. ``{"epoch": 1}``; ``global_step`` is
        added to it.
        """
        rank, world_size = _rank_world()
        module = _unwrap(self.model)
        os.makedirs(local_path, exist_ok=True)
        if "model" in self.save_contents:
            save_state_shards(module.state_dict(), local_path, "model", rank, world_size, meta=model_meta(module))
        if "optimizer" in self.save_contents and self.optimizer is not None:
            save_optimizer_shards(module, self.optimizer, local_path, rank, world_size)
        if "extra" in self.save_contents:
            body = {"global_step": int(global_step), **(extra or {})}
            save_extra_state(local_path, rank, world_size, lr_scheduler=self.lr_scheduler, extra=body)
        if is_peft_model(module):
            self._save_adapter(module, os.path.join(local_path, LORA_SUBDIR), rank)
        self._save_hf(module, os.path.join(local_path, HF_SUBDIR), rank)
        _barrier()

    def _save_adapter(self, module: torch.nn.Module, adapter_dir: str, rank: int) -> None:
        """The LoRA adapter alone (small: only its tensors are gathered), loadable by PEFT and vLLM."""
        from verl.utils.fsdp_utils import full_tensor_cpu

        adapter = {k: full_tensor_cpu(v) for k, v in module.state_dict(keep_vars=True).items() if "lora_" in k}
        if rank == 0:
            save_model_hf(module, None, adapter_dir, state_dict=adapter)

    def _save_hf(self, module: torch.nn.Module, hf_dir: str, rank: int) -> None:
        """Config, generation config and tokenizer (rank 0); the full weights too with ``hf_model`` (gathered)."""
        inner = _transformers_model(module)
        if "hf_model" in self.save_contents and inner is not None:
            from verl.utils.fsdp_utils import get_full_model_state_dict

            full = get_full_model_state_dict(module)  # collective: every rank takes part
            if rank == 0:
                full = dict(without_training_only(full.items()))  # a loss's head (FlowRL's log Z) is no model weight
                if is_peft_model(module):
                    from verl.models.lora import merged_state_dict

                    lora = model_meta(module)["lora"]
                    full = merged_state_dict(full, lora["lora_alpha"] / lora["r"])
                prefix = model_meta(module).get("weights_prefix", "")
                full = {k.removeprefix(prefix): v for k, v in full.items()}
                save_model_hf(inner, self.processing_class, hf_dir, state_dict=full)
            return
        if rank != 0:
            return
        os.makedirs(hf_dir, exist_ok=True)
        if inner is not None:
            config = copy.deepcopy(inner.config)
            config.architectures = [type(inner).__name__]  # as save_pretrained records it: the merger builds it
            config.save_pretrained(hf_dir)
            if getattr(inner, "generation_config", None) is not None:
                inner.generation_config.save_pretrained(hf_dir)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(hf_dir)

    # --------------------------------------------------------------------------------------------------- load
    def load_checkpoint(self, local_path: str | None, restore_rng: bool = True) -> dict[str, Any]:
        """Restore from ``local_path`` (None: no-op) and return the saved ``extra`` dict (empty if not loaded).

        Works onto any world size; a checkpoint without shards but with full weights in ``huggingface/`` (saved
        with ``save_contents=[hf_model]``) loads its weights from there.
        """
        if local_path is None:
            return {}
        if not os.path.isdir(local_path):
            raise FileNotFoundError(f"checkpoint directory {local_path} does not exist")
        module = _unwrap(self.model)
        extra: dict[str, Any] = {}
        if "model" in self.load_contents:
            self._load_model(module, local_path)
        if "optimizer" in self.load_contents and self.optimizer is not None:
            if has_shards(local_path, "optim"):
                load_optimizer_shards(module, self.optimizer, local_path)
            elif _rank_world()[0] == 0:  # saved without it (checkpoint.save_contents without optimizer)
                logging.getLogger(__name__).warning(
                    "%s holds no optimizer state (saved with checkpoint.save_contents without 'optimizer'): the "
                    "optimizer restarts from zero moments",
                    local_path,
                )
        if "extra" in self.load_contents:
            rank, world_size = _rank_world()
            extra = load_extra_state(
                local_path, rank, world_size, lr_scheduler=self.lr_scheduler, restore_rng=restore_rng
            )
        _barrier()
        return extra

    def _load_model(self, module: torch.nn.Module, local_path: str) -> None:
        target = module.state_dict()
        if has_shards(local_path, "model"):
            module.load_state_dict(load_state_shards(ShardReader(local_path, "model"), target))
            return
        hf_dir = os.path.join(local_path, HF_SUBDIR)
        full = hf_weights_state_dict(hf_dir) if os.path.isdir(hf_dir) else None
        if full is None:
            raise FileNotFoundError(
                f"{local_path}: no model shards (model_world_size_W_rank_R.safetensors) and no full weights in {hf_dir}"
            )
        prefix = model_meta(module).get("weights_prefix", "")
        full = {prefix + k: v for k, v in full.items()}
        for tied, source in (getattr(_transformers_model(module), "all_tied_weights_keys", None) or {}).items():
            if prefix + tied not in full and prefix + source in full:
                full[prefix + tied] = full[prefix + source]
        from verl.utils.fsdp_utils import set_full_model_state_dict

        set_full_model_state_dict(module, full)
