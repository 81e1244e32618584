"""``FSDPCheckpointManager``: save/load one role (actor or critic) of a (possibly FSDP2-sharded) model.

Composes the helpers of :mod:`checkpoint_manager` and :mod:`sharded_state` into verl's checkpoint manager API:
``save_checkpoint(local_path, global_step)`` / ``load_checkpoint(local_path)`` where ``local_path`` is
``<default_local_dir>/global_step_N/<role>``. Every rank calls both methods (they contain collectives when a
process group is up). Completion marking and retention are the driver's job, after all roles are saved:
``finalize_checkpoint`` then ``remove_old_checkpoints`` (see :mod:`layout`), so an older checkpoint is only
deleted once a newer one is complete.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from verl.utils.checkpoint.checkpoint_manager import (
    HF_SUBDIR,
    LORA_SUBDIR,
    check_checkpoint_files,
    is_peft_model,
    load_extra_state,
    load_optimizer,
    save_extra_state,
    save_model_hf,
    save_optimizer,
)
from verl.utils.checkpoint.sharded_state import (
    load_full_state_dict,
    load_model_shard,
    model_shard_filename,
    save_sharded_model,
)

__all__ = ["ALL_CONTENTS", "FSDPCheckpointManager"]

ALL_CONTENTS = ("model", "optimizer", "extra", "hf_model")


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


class FSDPCheckpointManager:
    """Save and restore model shards, optimizer, lr scheduler + RNG, and a Hugging Face copy of one role.

    Args:
        model: the (FSDP2-sharded or plain) module; a PEFT model saves its adapter to ``lora_adapter/``.
        optimizer: its optimizer, or None (e.g. a reference model).
        lr_scheduler: its scheduler, or None.
        processing_class: tokenizer/processor saved with the Hugging Face copy, or None.
        save_contents: subset of ``model``, ``optimizer``, ``extra``, ``hf_model`` to save.
        load_contents: subset to load (``hf_model`` is never loaded; ``model`` falls back to it).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        save_contents: Sequence[str] = ALL_CONTENTS,
        load_contents: Sequence[str] = ("model", "optimizer", "extra"),
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

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """The gathered full state dict on CPU (rank 0 gets it; a collective when distributed)."""
        if not (dist.is_available() and dist.is_initialized()):
            return {k: v.detach().to("cpu") for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def save_checkpoint(self, local_path: str, global_step: int = 0, extra: dict[str, Any] | None = None) -> None:
        """Write this role's checkpoint into ``local_path`` (every rank calls this).

        ``extra`` (plain types/tensors) is stored with the RNG state, e.g. ``{"global_step": 10}``; the step is
        added as ``global_step`` when absent.
        """
        rank, world_size = _rank_world()
        os.makedirs(local_path, exist_ok=True)
        _barrier()  # the directory exists before any rank writes into it
        if "model" in self.save_contents:
            save_sharded_model(self.model.state_dict(), local_path, rank, world_size)
        if "optimizer" in self.save_contents and self.optimizer is not None:
            save_optimizer(self.optimizer, local_path, rank, world_size)
        if "extra" in self.save_contents:
            body = {"global_step": int(global_step), **(extra or {})}
            save_extra_state(local_path, rank, world_size, lr_scheduler=self.lr_scheduler, extra=body)
        if "hf_model" in self.save_contents:
            full = self._full_state_dict()
            if rank == 0:
                module = _unwrap(self.model)
                if is_peft_model(module):
                    save_model_hf(module, self.processing_class, os.path.join(local_path, LORA_SUBDIR), state_dict=full)
                    # The base config + tokenizer, so the merger can rebuild the architecture.
                    hf_dir = os.path.join(local_path, HF_SUBDIR)
                    module.get_base_model().config.save_pretrained(hf_dir)
                    if self.processing_class is not None:
                        self.processing_class.save_pretrained(hf_dir)
                else:
                    save_model_hf(module, self.processing_class, os.path.join(local_path, HF_SUBDIR), state_dict=full)
            del full
        _barrier()

    def _load_model(self, local_path: str, rank: int, world_size: int) -> None:
        current = self.model.state_dict()
        if os.path.isfile(os.path.join(local_path, model_shard_filename(rank, world_size))):
            local = load_model_shard(local_path, rank, world_size)
            missing = sorted(set(current) - set(local))
            if missing:
                raise ValueError(f"{local_path}: model shard of rank {rank} lacks {missing[:8]}")
            try:
                from torch.distributed.tensor import DTensor
            except ImportError:  # pragma: no cover
                DTensor = None  # type: ignore[assignment,misc]
            new_sd = {}
            for key, ref in current.items():
                value = local[key].to(ref.device)
                if DTensor is not None and isinstance(ref, DTensor):
                    value = DTensor.from_local(
                        value, ref.device_mesh, ref.placements, shape=ref.shape, stride=ref.stride()
                    )
                new_sd[key] = value
            self.model.load_state_dict(new_sd)
            return
        # Different world size (or no shards saved): load the full Hugging Face weights and re-shard.
        full = load_full_state_dict(local_path)
        if full is None:
            raise FileNotFoundError(
                f"{local_path}: no {model_shard_filename(rank, world_size)} and no full weights in "
                f"{os.path.join(local_path, HF_SUBDIR)}"
            )
        if dist.is_available() and dist.is_initialized():
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(self.model, full, options=StateDictOptions(full_state_dict=True, strict=True))
        else:
            self.model.load_state_dict(full)

    def load_checkpoint(self, local_path: str | None, restore_rng: bool = True) -> dict[str, Any]:
        """Restore from ``local_path`` (None: no-op) and return the saved ``extra`` dict (empty if not loaded)."""
        if local_path is None:
            return {}
        rank, world_size = _rank_world()
        needed = [c for c in self.load_contents if c != "model" and (c != "optimizer" or self.optimizer is not None)]
        check_checkpoint_files(local_path, rank, world_size, needed)
        extra: dict[str, Any] = {}
        if "model" in self.load_contents:
            self._load_model(local_path, rank, world_size)
        if "optimizer" in self.load_contents and self.optimizer is not None:
            load_optimizer(self.optimizer, local_path, rank, world_size)
        if "extra" in self.load_contents:
            extra = load_extra_state(
                local_path, rank, world_size, lr_scheduler=self.lr_scheduler, restore_rng=restore_rng
            )
        _barrier()
        return extra
