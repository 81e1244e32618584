"""How a worker sets up one role on FSDP2 (or one process): its config copy, threads, sharding, optimizer,
offload and checkpoint manager, shared by the actor/rollout/ref, critic and reward-model workers."""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
from omegaconf import DictConfig, OmegaConf

from verl.single_controller.base import Worker
from verl.utils import fsdp_utils
from verl.utils.checkpoint.fsdp_checkpoint_manager import DEFAULT_CONTENTS, FSDPCheckpointManager
from verl.workers.parallel_state import OffloadPolicy


def mutable_copy(config: DictConfig) -> DictConfig:
    """A resolved, writable copy: workers adjust batch sizes per rank without touching the driver's config."""
    return OmegaConf.create(OmegaConf.to_container(config, resolve=True))


def per_rank_sequences(prompts: int, n: int, world_size: int, what: str) -> int:
    """Turn a count of prompts into a count of sequences on one rank (verl's convention), explaining failures."""
    sequences = prompts * n
    if sequences % world_size != 0 or sequences // world_size == 0:
        raise ValueError(
            f"{what}={prompts} prompts x rollout.n={n} = {sequences} sequences cannot be split evenly over "
            f"{world_size} ranks; choose {what} so that {what} * n is a positive multiple of {world_size}"
        )
    return sequences // world_size


def set_torch_threads() -> None:
    threads = os.environ.get("VERL_TORCH_THREADS")
    if threads:
        torch.set_num_threads(int(threads))


class ModelHolder:
    """Builds the torch objects of one trainable role (model, optimizer, scheduler) the same way for all roles."""

    @staticmethod
    def build_optimizer(module: torch.nn.Module, optim_config: DictConfig):
        from verl.utils.optim import build_lr_scheduler, build_optimizer

        params = [p for p in module.parameters() if p.requires_grad]
        optimizer = build_optimizer(params, optim_config)
        scheduler = build_lr_scheduler(optimizer, optim_config, int(optim_config.get("total_training_steps", -1)))
        return optimizer, scheduler


def is_already_placed(module: torch.nn.Module) -> bool:
    """True when the owner already distributed ``module`` (FSDP wrapper or DTensor parameters): never re-shard it."""
    if fsdp_utils.is_fsdp_module(module) or any(fsdp_utils.is_fsdp_module(m) for m in module.modules()):
        return True
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def shard(worker: Worker, module: torch.nn.Module, fsdp_config: DictConfig) -> torch.nn.Module:
    """FSDP2 over all ranks, or hybrid sharding over groups of ``fsdp_config.fsdp_size`` ranks; one rank: as is."""
    if worker.world_size <= 1 or is_already_placed(module):
        return module
    mesh = fsdp_utils.fsdp_mesh(worker.compute_device.type, int(fsdp_config.get("fsdp_size", -1)))
    return fsdp_utils.apply_fsdp2(
        module, reshard_after_forward=bool(fsdp_config.get("reshard_after_forward", True)), mesh=mesh
    )


def loaded(policy: OffloadPolicy | None, with_optimizer: bool = False):
    """The offloaded model (and optimizer state) on the device for a block; nothing without a policy."""
    return policy.loaded(with_optimizer) if policy is not None else nullcontext()


def enable_ulysses(module: torch.nn.Module) -> None:
    """Give the transformers model under ``module`` (a PEFT wrapper, ...) the sequence-parallel attention."""
    from verl.utils.ulysses import enable_ulysses_attention

    inner = module.get_base_model() if hasattr(module, "get_base_model") else module
    enable_ulysses_attention(inner)


def checkpoint_manager(
    worker: Worker, module, optimizer, scheduler, section: DictConfig, contents: list[str] | None = None
) -> FSDPCheckpointManager:
    """The role's checkpoint writer/reader; ``contents`` overrides ``<section>.checkpoint.save_contents``."""
    ckpt_cfg = section.get("checkpoint", {})
    return FSDPCheckpointManager(
        module,
        optimizer,
        scheduler,
        processing_class=getattr(worker, "tokenizer", None),
        save_contents=list(contents if contents is not None else ckpt_cfg.get("save_contents", DEFAULT_CONTENTS)),
        load_contents=list(ckpt_cfg.get("load_contents", DEFAULT_CONTENTS)),
    )
