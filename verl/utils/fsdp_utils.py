"""FSDP2 (``torch.distributed.fsdp.fully_shard``) helpers shared by the actor, reference and critic workers.

Sharding is per decoder layer plus the root, so a forward gathers one layer at a time. The same helpers are
no-ops on a module that is not sharded (one process), which keeps the worker code free of branches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from verl.utils.padding import varlen_attention

if TYPE_CHECKING:
    from verl.utils.logprob_kernels import ChunkKernels

logger = logging.getLogger(__name__)


def _layer_class_names(model: nn.Module) -> set[str]:
    """Names of the transformer block classes (transformers lists them in ``_no_split_modules``)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    return names


def is_fsdp_module(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def fsdp_size_problem(fsdp_size: int, world: int, key: str = "fsdp_config.fsdp_size") -> str | None:
    """None when :func:`fsdp_mesh` takes ``fsdp_size`` on ``world`` ranks, else one line naming ``key``, the value
    and the world size (upstream verl's rule: -1 or the world size and more shard over all ranks, a divisor of
    the world size is hybrid sharding)."""
    size = int(fsdp_size)
    if size == -1 or (size >= 1 and (size >= world or world % size == 0)):
        return None
    if size < 1:
        return f"{key}={size}: must be -1 (shard over all ranks) or a group size >= 1"
    return (
        f"{key}={size} does not divide the world size {world}: use a divisor of {world} (shard within groups of "
        f"that many ranks, replicate across the groups) or -1 (shard over all ranks)"
    )


def fsdp_mesh(device_type: str, fsdp_size: int = -1, key: str = "fsdp_config.fsdp_size"):
    """The device mesh of ``fsdp_config.fsdp_size`` over the default process group, or None for plain FSDP.

    ``-1`` (or the world size and more, as upstream verl) shards every parameter over all ranks: None, i.e. the
    default group. A divisor ``k`` of the world size gives a 2-D mesh ``(world / k, k)`` named ``("ddp", "fsdp")``:
    ``fully_shard`` on it shards within each group of ``k`` consecutive ranks and replicates across groups (hybrid
    sharding, HSDP), so gradients are reduce-scattered inside a group and all-reduced between groups.

    Raises:
        ValueError: another size (:func:`fsdp_size_problem`, naming ``key``).
    """
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size() if dist.is_initialized() else 1
    size = int(fsdp_size)
    problem = fsdp_size_problem(size, world, key)
    if problem is not None:
        raise ValueError(problem)
    if size == -1 or size >= world:
        return None
    return init_device_mesh(device_type, (world // size, size), mesh_dim_names=("ddp", "fsdp"))


def single_rank_mesh(device: torch.device):
    """A one-rank device mesh on ``device``'s type for FSDP2 in a process that runs alone (no launcher, no Ray
    group): the default process group is created in-process over a ``HashStore`` (no socket) when none exists
    (nccl on CUDA, gloo otherwise); an existing group must be of one rank."""
    from torch.distributed.device_mesh import init_device_mesh

    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise RuntimeError(f"a one-rank mesh needs a one-rank process group, this one has {dist.get_world_size()}")
    else:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return init_device_mesh(device.type, (1,))


def gather_dtype(model_dtype: str) -> torch.dtype | None:
    """``fsdp_config.model_dtype`` (upstream v0.9) -> the dtype FSDP2 gathers parameters in: None for fp32 (as
    stored), bf16 for ``bf16``/``bfloat16`` (the sharded master copy stays fp32)."""
    return torch.bfloat16 if model_dtype in ("bf16", "bfloat16") else None


def apply_fsdp2(
    model: nn.Module,
    reshard_after_forward: bool = True,
    param_dtype: torch.dtype | None = None,
    mesh=None,
    forward_prefetch: bool = False,
    cpu_offload: bool = False,
    reduce_dtype: torch.dtype = torch.float32,
) -> nn.Module:
    """Shard ``model`` in place: each decoder layer, then the root.

    ``mesh``: None shards over the default process group, on the device the parameters are on; a 2-D mesh from
    :func:`fsdp_mesh` gives hybrid sharding.
    ``param_dtype`` (e.g. bf16) makes FSDP gather parameters in that dtype for compute while the sharded master
    copy stays fp32; ``reduce_dtype`` is the dtype of the gradients' reduction across ranks (fp32 by default).
    ``forward_prefetch``: each decoder layer starts the all-gather of the next one before its own forward
    (``set_modules_to_forward_prefetch``; upstream's ``fsdp_config.forward_prefetch``).
    ``cpu_offload``: FSDP2's ``CPUOffloadPolicy`` (sharded parameters, gradients and optimizer step on CPU; upstream's
    ``fsdp_config.offload_policy``).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mixed = param_dtype is not None or reduce_dtype != torch.float32
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype) if mixed else None
    kwargs = {"reshard_after_forward": reshard_after_forward}
    if mp is not None:
        kwargs["mp_policy"] = mp
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    if mesh is None:
        # fully_shard's own default mesh is on CUDA whenever a GPU is visible, which would move a CPU model (gloo
        # group) to the GPU: shard on the device the parameters are on instead
        from torch.distributed.device_mesh import init_device_mesh

        device_type = next((p.device.type for p in model.parameters()), "cpu")
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    kwargs["mesh"] = mesh
    layer_names = _layer_class_names(model)
    layers = [module for module in model.modules() if type(module).__name__ in layer_names]
    for module in layers:
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    if forward_prefetch:
        for layer, nxt in zip(layers, layers[1:]):
            layer.set_modules_to_forward_prefetch([nxt])
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


def copy_module_weights(src: nn.Module, dst: nn.Module) -> None:
    """Copy the parameters of ``src`` into ``dst``, two instances of one model (a policy into its reference).

    Each rank copies its own shards when both are sharded alike (or neither is), so nothing is gathered; otherwise
    the full state dict goes through rank 0 (:func:`get_full_model_state_dict`). Names are compared without
    ``torch.compile``'s ``_orig_mod.``; a mismatch raises ValueError naming the first differing parameter."""
    from torch.distributed.tensor import DTensor

    def named(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
        return [(name.replace("_orig_mod.", ""), p) for name, p in module.named_parameters()]

    pairs = list(zip(named(src), named(dst)))
    if len(pairs) != len(list(dst.parameters())) or len(pairs) != len(list(src.parameters())):
        raise ValueError("copy_module_weights: the two modules hold different numbers of parameters")
    for (a_name, _), (b_name, _) in pairs:
        if a_name != b_name:
            raise ValueError(f"copy_module_weights: parameter {a_name!r} faces {b_name!r}: not the same model")

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if isinstance(t, DTensor) else t

    alike = all(
        isinstance(a, DTensor) == isinstance(b, DTensor)
        and (not isinstance(a, DTensor) or a.placements == b.placements)
        and local(a).shape == local(b).shape
        for (_, a), (_, b) in pairs
    )
    if not alike:
        set_full_model_state_dict(dst, get_full_model_state_dict(src))
        return
    with torch.no_grad():
        for (_, a), (_, b) in pairs:
            local(b).copy_(local(a))


def get_full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Optimizer state keyed by parameter names (independent of the world size), gathered to rank 0 on CPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = dist.is_initialized()
    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=full, cpu_offload=full))


def set_full_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer, state_dict: dict) -> None:
    """Inverse of :func:`get_full_optimizer_state_dict`; under FSDP the state is broadcast from rank 0."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    full = dist.is_initialized()
    # strict=False: a trainable parameter that never received a gradient (a critic's unused LM head) has no Adam
    # state when saved, exactly as in the optimizer that is being restored
    set_optimizer_state_dict(
        model,
        optimizer,
        state_dict,
        options=StateDictOptions(full_state_dict=full, broadcast_from_rank0=full, strict=False),
    )


def full_tensor_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of a parameter on CPU: a sharded (DTensor) one is gathered first, a collective on its mesh."""
    from torch.distributed.tensor import DTensor

    tensor = tensor.detach()
    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.cpu()


def iter_full_params_layered(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Like :func:`iter_full_params` but gathering one parameter at a time (``rollout.layered_summon``): the peak
    extra memory is one layer's largest tensor instead of the whole model. Every rank must drain the iterator (each
    step is a collective on sharded models); all ranks receive the tensors."""
    # state_dict(keep_vars=True) names exactly what the full state dict names, without gathering anything yet
    for name, tensor in model.state_dict(keep_vars=True).items():
        yield name, full_tensor_cpu(tensor)


def iter_full_params(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, full tensor)`` for every parameter and buffer, e.g. to push weights into a rollout engine.

    Names are the underlying transformers names (a PEFT wrapper's adapters are merged by the caller first).
    """
    state = get_full_model_state_dict(model)
    yield from state.items()


def resolve_remove_padding(setting: bool | None, model: nn.Module, prefix_grouper: bool = False) -> bool:
    """``model.use_remove_padding``: an explicit true/false as given. Null (auto) packs the valid tokens of each
    micro-batch (:mod:`verl.utils.padding`) wherever the packed forward is known to equal the padded one:

    - flash-attention (``flash_attention_2``/``_3``): one row, attended by the variable-length kernels;
    - a text model of transformers' own classes with ``sdpa``/``eager`` attention: rows as wide as the longest
      sequence, whose block-diagonal masks transformers builds from the restarting position ids. No more
      attention work than the padded rows, and the rest of the model runs on the valid tokens (plus the rows'
      tails): docs/benchmarks.md section 20 measures the update on CPU.

    It stays off for a vision-language model without flash-attention (its images pack into one row only, whose
    square mask is more work than the padded rows), for a model from remote code or another library (its own
    masks may ignore the position ids) and under ``actor.use_prefix_grouper`` (which needs the padded rows)."""
    if setting is not None:
        return bool(setting)
    if prefix_grouper:
        return False
    if varlen_attention(model):
        return True
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model  # PEFT
    config = getattr(base, "config", None)
    if config is None or getattr(config, "vision_config", None) is not None:
        return False
    # the model's own class: FSDP2's fully_shard swaps in a subclass defined in torch.distributed
    own = next((c for c in type(base).__mro__ if not c.__module__.startswith("torch.")), type(base))
    return own.__module__.startswith("transformers.models.")


def resolve_torch_compile(setting: bool | None, device: torch.device) -> bool:
    """``actor.use_torch_compile`` / ``ref.use_torch_compile``: an explicit true/false as given; null (auto) compiles
    the decoder layers (and the log-prob/entropy chunk kernels, :func:`log_prob_kernels_for`) on CUDA only.
    Measured (docs/benchmarks.md section 8, one H200, Qwen2.5-0.5B shape, 128 x (64+256) tokens): the update
    0.482 -> 0.354 s, MFU 21.5% -> 29.5%, peak 85 -> 61 GB (inductor fuses the fp32 norms, rotary embedding, casts
    and SwiGLU, and saves fewer activations). On CPU it does not pay for its
    compilation (section 9: 4% and 0%), so auto leaves it off there."""
    if setting is not None:
        return bool(setting)
    return device.type == "cuda"


def log_prob_kernels_for(setting: bool | None, device: torch.device) -> ChunkKernels | None:
    """The per-chunk kernels of the actor's log-probs and entropy (:mod:`verl.utils.logprob_kernels`) for
    ``use_torch_compile`` = ``setting``: the compiled set where :func:`resolve_torch_compile` says compile (under
    null a failed compilation falls back to eager with one warning, as the layers do), else None (eager)."""
    if not resolve_torch_compile(setting, device):
        return None
    from verl.utils.logprob_kernels import compiled_chunk_kernels

    return compiled_chunk_kernels(eager_on_failure=setting is None)


def compile_decoder_layers(model: nn.Module, eager_on_failure: bool = False, **compile_kwargs: Any) -> int:
    """``torch.compile`` each decoder layer of ``model`` in place (``nn.Module.compile``): the blocks of the first
    ``nn.ModuleList`` named ``layers`` or ``h``, else the whole module. Compiling per layer (rather than the
    whole model) keeps FSDP2's per-layer all-gather hooks outside the compiled graphs and compiles one graph that
    every layer of the same shape reuses. ``eager_on_failure`` (``use_torch_compile: null``): if compiling fails,
    log one warning and run every layer eagerly from then on, instead of raising. Returns the number of modules
    compiled."""
    modules = [model]
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.split(".")[-1] in ("layers", "h") and len(module) > 0:
            modules = list(module)
            break
    from verl.utils.compile_errors import CompiledOrEager

    state = {"failed": False}
    for module in modules:
        module.compile(**compile_kwargs)
        if eager_on_failure:
            compiled, eager = module._compiled_call_impl, module._call_impl
            module._compiled_call_impl = CompiledOrEager(compiled, eager, state, "decoder layers", logger)
    return len(modules)
