"""How a worker sets up one role on FSDP2 (or one process): its config copy, threads, sharding, optimizer,
offload and checkpoint manager, shared by the actor/rollout/ref, critic and reward-model workers."""

from __future__ import annotations

import copy
import os
from contextlib import nullcontext
from typing import Any, TypeVar

import torch

from verl.base_config import omega_conf_to_dataclass
from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.sections.engine import MixedPrecisionConfig
from verl.single_controller.base import Worker
from verl.utils import fsdp_utils
from verl.workers.config import CheckpointContentsConfig, FSDPConfig, OptimConfig, RefFSDPConfig
from verl.workers.parallel_state import OffloadPolicy

T = TypeVar("T")


def private_section(config: Any, section_type: type[T]) -> T:
    """The worker's own typed copy of its config section (``DictConfig``, dict or dataclass; interpolations
    resolved, missing keys at their dataclass defaults): workers adjust batch sizes per rank without touching the
    driver's config."""
    section = omega_conf_to_dataclass(config, section_type)
    return copy.deepcopy(section) if section is config else section


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
    def build_optimizer(module: torch.nn.Module, optim_config: OptimConfig):
        from verl.utils.optim import build_lr_scheduler, build_optimizer

        params = [p for p in module.parameters() if p.requires_grad]
        optimizer = build_optimizer(params, optim_config)
        scheduler = build_lr_scheduler(optimizer, optim_config, int(optim_config.total_training_steps))
        return optimizer, scheduler


def is_already_placed(module: torch.nn.Module) -> bool:
    """True when the owner already distributed ``module`` (FSDP wrapper or DTensor parameters): never re-shard it."""
    if fsdp_utils.is_fsdp_module(module) or any(fsdp_utils.is_fsdp_module(m) for m in module.modules()):
        return True
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def shard(worker: Worker, module: torch.nn.Module, fsdp_config: FSDPConfig | RefFSDPConfig) -> torch.nn.Module:
    """FSDP2 over all ranks, or hybrid sharding over groups of ``fsdp_config.fsdp_size`` ranks; one rank: as is,
    except with ``fsdp_config.offload_policy`` on CUDA: FSDP2 over a one-rank group with its ``CPUOffloadPolicy``
    (parameters, gradients and the optimizer step in CPU memory, each layer's weights on the GPU only while it
    computes), so a model whose weights, gradients and Adam state exceed the card trains on one GPU."""
    if is_already_placed(module):
        return module
    cpu_offload = bool(fsdp_config.offload_policy) and worker.compute_device.type == "cuda"
    mixed = MixedPrecisionConfig(**dict(fsdp_config.mixed_precision))  # keys not given: the class's (fp32 reduction)
    if worker.world_size <= 1:
        if not cpu_offload:
            return module
        mesh = fsdp_utils.single_rank_mesh(worker.compute_device)
    else:
        mesh = fsdp_utils.fsdp_mesh(worker.compute_device.type, int(fsdp_config.fsdp_size))
    return fsdp_utils.apply_fsdp2(
        module,
        reshard_after_forward=bool(fsdp_config.reshard_after_forward),
        param_dtype=fsdp_utils.gather_dtype(str(fsdp_config.model_dtype)),
        mesh=mesh,
        forward_prefetch=bool(fsdp_config.forward_prefetch),
        cpu_offload=cpu_offload,
        reduce_dtype=fsdp_utils.gather_dtype(str(mixed.reduce_dtype)) or torch.float32,
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
    worker: Worker, module, optimizer, scheduler, section: Any, contents: list[str] | None = None
) -> FSDPCheckpointManager:
    """The role's checkpoint writer/reader; ``contents`` overrides ``<section>.checkpoint.save_contents``."""
    # the actor's section has ``checkpoint``; the critic's has none and saves verl's default contents
    ckpt_cfg = section.get("checkpoint") or CheckpointContentsConfig()
    return FSDPCheckpointManager(
        module,
        optimizer,
        scheduler,
        # a vision-language model's processor (tokenizer + image processor), else the tokenizer
        processing_class=getattr(worker, "processor", None) or getattr(worker, "tokenizer", None),
        save_contents=list(contents if contents is not None else ckpt_cfg.save_contents),
        load_contents=list(ckpt_cfg.load_contents),
    )
