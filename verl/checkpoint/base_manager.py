"""``BaseCheckpointManager``: upstream verl's base class of a role's checkpoint manager, for recipes that write
their own (a subclass implements ``save_checkpoint`` / ``load_checkpoint``).

It holds what upstream's base holds: the model, optimizer, scheduler and processing class, which contents to save
and load (``checkpoint_config.save_contents`` / ``load_contents``, default ``model``, ``optimizer``, ``extra``), the
rank and world size, and the retention of the directories this manager saved (``previous_saved_paths``): before a
save :meth:`ensure_checkpoint_capacity` keeps ``max_ckpt_to_keep - 1`` of them (none removed when the limit is 1,
so the last good checkpoint survives a failed save), after it :meth:`register_checkpoint` keeps ``max_ckpt_to_keep``.
``max_ckpt_to_keep`` of ``None`` or ``0`` keeps everything. This project's FSDP manager
(:class:`verl.checkpoint.fsdp_checkpoint_manager.FSDPCheckpointManager`) leaves retention to the trainer
(``trainer.max_actor_ckpt_to_keep``, :func:`verl.checkpoint.layout.remove_old_checkpoints`).
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

import torch

from verl.checkpoint.rng_state import get_rng_state, set_rng_state

logger = logging.getLogger(__name__)

DEFAULT_CONTENTS = ("model", "optimizer", "extra")


def _contents(checkpoint_config: Any, key: str) -> list[str]:
    if checkpoint_config is None:
        return list(DEFAULT_CONTENTS)
    value = checkpoint_config.get(key) if hasattr(checkpoint_config, "get") else getattr(checkpoint_config, key, None)
    return list(DEFAULT_CONTENTS) if value is None else list(value)


def _keeps(max_ckpt_to_keep: Any, minimum: int) -> bool:
    return isinstance(max_ckpt_to_keep, int) and not isinstance(max_ckpt_to_keep, bool) and max_ckpt_to_keep > minimum


class BaseCheckpointManager:
    """Base of a checkpoint manager (upstream's constructor); see the module docstring.

    Args:
        model: the module whose state is saved.
        optimizer: its optimizer (or None).
        lr_scheduler: its scheduler (or None).
        processing_class: the tokenizer / processor saved alongside (or None).
        checkpoint_config: a mapping or object with ``save_contents`` / ``load_contents`` (and optionally
            ``save_lora_only``); None: the defaults.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        lr_scheduler: Any = None,
        processing_class: Any = None,
        checkpoint_config: Any = None,
    ) -> None:
        self.checkpoint_config = checkpoint_config
        self.checkpoint_save_contents = _contents(checkpoint_config, "save_contents")
        self.checkpoint_load_contents = _contents(checkpoint_config, "load_contents")
        self.previous_global_step: int | None = None
        self.previous_saved_paths: list[str] = []
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.rank = torch.distributed.get_rank() if distributed else 0
        self.world_size = torch.distributed.get_world_size() if distributed else 1

    # what to save / load
    @property
    def should_save_model(self) -> bool:
        return "model" in self.checkpoint_save_contents

    @property
    def should_save_optimizer(self) -> bool:
        return "optimizer" in self.checkpoint_save_contents

    @property
    def should_save_extra(self) -> bool:
        return "extra" in self.checkpoint_save_contents

    @property
    def should_save_hf_model(self) -> bool:
        return "hf_model" in self.checkpoint_save_contents

    @property
    def should_save_lora_only(self) -> bool:
        """``checkpoint_config.save_lora_only`` (upstream's key, not one of this project's sections: absent is off)."""
        cfg = self.checkpoint_config
        if not cfg:
            return False
        return bool(cfg.get("save_lora_only") if hasattr(cfg, "get") else getattr(cfg, "save_lora_only", None))

    @staticmethod
    def is_lora_only_state_dict(state_dict: dict[str, Any]) -> bool:
        """True for a non-empty state dict whose every key is a LoRA adapter weight."""
        return bool(state_dict) and all("lora_" in k or ".adapter_" in k for k in state_dict)

    @property
    def should_load_model(self) -> bool:
        return "model" in self.checkpoint_load_contents

    @property
    def should_load_optimizer(self) -> bool:
        return "optimizer" in self.checkpoint_load_contents

    @property
    def should_load_extra(self) -> bool:
        return "extra" in self.checkpoint_load_contents

    @property
    def should_load_hf_model(self) -> bool:
        return "hf_model" in self.checkpoint_load_contents

    # the subclass's job
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False):
        raise NotImplementedError(f"{type(self).__name__} must implement load_checkpoint")

    def save_checkpoint(
        self,
        local_path: str,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ):
        raise NotImplementedError(f"{type(self).__name__} must implement save_checkpoint")

    @staticmethod
    def checkpath(local_path: str | None, hdfs_path: str | None) -> tuple[bool, str]:
        """``(is_local, path)``: the local path when given, else the remote one; both None is an error."""
        if local_path is None and hdfs_path is None:
            raise ValueError("local_path and hdfs_path cannot be both None")
        return local_path is not None, local_path if local_path is not None else hdfs_path

    # retention
    def remove_previous_save_local_path(self, path: str | list[str]) -> None:
        """Delete one or several checkpoint directories (missing ones are skipped)."""
        for p in [path] if isinstance(path, str) else path:
            abs_path = os.path.abspath(p)
            if os.path.exists(abs_path):
                logger.info("removing checkpoint %s", abs_path)
                shutil.rmtree(abs_path, ignore_errors=True)

    def ensure_checkpoint_capacity(self, max_ckpt_to_keep: int | None) -> None:
        """Before a save: keep the newest ``max_ckpt_to_keep - 1`` saved directories (nothing removed for 1)."""
        if not _keeps(max_ckpt_to_keep, 1) or len(self.previous_saved_paths) < max_ckpt_to_keep:
            return
        cut = len(self.previous_saved_paths) - max_ckpt_to_keep + 1
        self.remove_previous_save_local_path(self.previous_saved_paths[:cut])
        self.previous_saved_paths = self.previous_saved_paths[cut:]

    def register_checkpoint(self, new_path: str, max_ckpt_to_keep: int | None) -> None:
        """After a successful save: record ``new_path`` and keep the newest ``max_ckpt_to_keep`` directories."""
        self.previous_saved_paths.append(new_path)
        if not _keeps(max_ckpt_to_keep, 0) or len(self.previous_saved_paths) <= max_ckpt_to_keep:
            return
        cut = len(self.previous_saved_paths) - max_ckpt_to_keep
        self.remove_previous_save_local_path(self.previous_saved_paths[:cut])
        self.previous_saved_paths = self.previous_saved_paths[cut:]

    # RNG state (this project's format: tensors and plain types, loadable with weights_only=True)
    get_rng_state = staticmethod(get_rng_state)
    load_rng_state = staticmethod(set_rng_state)
