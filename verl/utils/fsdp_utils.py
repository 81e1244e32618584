"""FSDP2 (``torch.distributed.fsdp.fully_shard``) helpers shared by the actor, reference and critic workers.

Sharding is per decoder layer plus the root, so a forward gathers one layer at a time. The same helpers are
no-ops on a module that is not sharded (one process), which keeps the worker code free of branches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn


def _layer_class_names(model: nn.Module) -> set[str]:
    """Names of the transformer block classes (transformers lists them in ``_no_split_modules``)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    return names


def is_fsdp_module(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def apply_fsdp2(
    model: nn.Module, reshard_after_forward: bool = True, param_dtype: torch.dtype | None = None
) -> nn.Module:
    """Shard ``model`` in place over the default process group: each decoder layer, then the root.

    ``param_dtype`` (e.g. bf16) makes FSDP gather parameters in that dtype for compute while the sharded master
    copy and the gradients' reduction stay fp32.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else None
    kwargs = {"reshard_after_forward": reshard_after_forward}
    if mp is not None:
        kwargs["mp_policy"] = mp
    layer_names = _layer_class_names(model)
    for module in model.modules():
        if type(module).__name__ in layer_names:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


@contextmanager
def full_params(model: nn.Module) -> Iterator[None]:
    """Gather the full parameters of an FSDP2 model for the duration of the block (e.g. generation), then release.

    While gathered, forwards run without collectives, so ranks may run different numbers of decoding steps.
    A module that is not sharded is left alone.
    """
    from torch.distributed.fsdp import FSDPModule

    fsdp_modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not fsdp_modules:
        yield
        return
    for module in fsdp_modules:
        module.unshard()
        module.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for module in fsdp_modules:
            module.reshard()
            module.set_reshard_after_forward(True, recurse=False)


def get_full_model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full (unsharded) state dict on CPU. Under FSDP every rank must call it; only rank 0 receives the tensors."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not dist.is_initialized():
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def set_full_model_state_dict(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a full state dict (present on rank 0 at least) into a possibly sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if not dist.is_initialized():
        model.load_state_dict(state_dict)
        return
    set_model_state_dict(
        model, state_dict, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True)
    )


def get_full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Optimizer state keyed by parameter names (independent of the world size), gathered to rank 0 on CPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = dist.is_initialized()
    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=full, cpu_offload=full))


def set_full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state_dict: dict) -> None:
    """Inverse of :func:`get_full_optimizer_state_dict`; under FSDP the state is broadcast from rank 0."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    full = dist.is_initialized()
    set_optimizer_state_dict(
        model, optimizer, state_dict, options=StateDictOptions(full_state_dict=full, broadcast_from_rank0=full)
    )


def iter_full_params(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, full tensor)`` for every parameter and buffer, e.g. to push weights into a rollout engine.

    Names are the underlying transformers names (a PEFT wrapper's adapters are merged by the caller first).
    """
    state = get_full_model_state_dict(model)
    yield from state.items()
