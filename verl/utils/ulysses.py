"""Ulysses sequence parallelism (Jacobs et al. 2023, "DeepSpeed Ulysses"): one sequence split over ``sp`` ranks.

Each rank of a sequence-parallel group runs the model on ``1 / sp`` of every sequence's positions. Everything but
attention is position-wise, so only attention needs the other positions: before it, an all-to-all turns
``[batch, heads, seq / sp, head_dim]`` (all heads, local positions) into ``[batch, heads / sp, seq, head_dim]``
(local heads, all positions); attention runs on whole sequences for those heads; a second all-to-all turns the
output back. Per rank, activation memory of a sequence drops by ``sp`` and the communication per layer is four
all-to-alls of the attention tensors.

The attention wrapper is registered with transformers' ``AttentionInterface`` under ``verl_ulysses_<impl>`` and
delegates to ``<impl>`` (eager or sdpa): outside :func:`ulysses_context` it is exactly ``<impl>``. Inside, the mask
the model built for its local positions is replaced by one for the whole sequence, made from the full
``attention_mask`` / ``position_ids`` given to the context (causal, padding and packed-sequence boundaries).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

ULYSSES_PREFIX = "verl_ulysses_"


@dataclass
class _UlyssesState:
    group: Any
    size: int
    rank: int
    mask: torch.Tensor | None  # additive [batch, 1, seq, seq]; built lazily per dtype
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None


_STATE: contextvars.ContextVar[_UlyssesState | None] = contextvars.ContextVar("verl_ulysses_state", default=None)


# ----------------------------------------------------------------------------------------------- collectives
def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any) -> torch.Tensor:
    """Split ``x`` along ``scatter_dim`` into one piece per rank, exchange, and concatenate the received pieces
    (in rank order) along ``gather_dim``."""
    world = dist.get_world_size(group)
    inputs = [t.contiguous() for t in torch.chunk(x, world, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(world)]
    dist.all_to_all(outputs, inputs, group=group)
    return torch.cat(outputs, dim=gather_dim)


class _SeqAllToAll(torch.autograd.Function):
    """All-to-all whose backward is the inverse all-to-all (scatter and gather dims swapped)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, scatter_dim: int, gather_dim: int) -> torch.Tensor:
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return _all_to_all(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _all_to_all(grad, ctx.gather_dim, ctx.scatter_dim, ctx.group), None, None, None


class _GatherSeq(torch.autograd.Function):
    """All-gather of the local sequence slices along ``dim``; backward keeps this rank's slice of the gradient,
    times ``grad_scale``. Every rank of the group computes the same loss from the gathered tensor, so the local
    slice of its gradient is already the whole gradient of the local outputs (no sum over ranks)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, dim: int, grad_scale: float) -> torch.Tensor:
        ctx.group, ctx.dim, ctx.grad_scale = group, dim, grad_scale
        ctx.rank, ctx.local = dist.get_rank(group), x.shape[dim]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        local = grad.narrow(ctx.dim, ctx.rank * ctx.local, ctx.local)
        return local * ctx.grad_scale, None, None, None


def gather_sequence(x: torch.Tensor, dim: int = 1, grad_scale: float = 1.0) -> torch.Tensor:
    """The whole sequence from the local slices of the active sequence-parallel group (``x`` unchanged outside
    :func:`ulysses_context`). ``grad_scale``: see :func:`ulysses_loss_scale`."""
    state = _STATE.get()
    if state is None:
        return x
    return _GatherSeq.apply(x, state.group, dim, float(grad_scale))


# ------------------------------------------------------------------------------------------------- context
def pad_to_multiple(x: torch.Tensor, multiple: int, value: int | float, dim: int = 1) -> torch.Tensor:
    """``x`` right-padded with ``value`` along ``dim`` to a length divisible by ``multiple``."""
    extra = (-x.shape[dim]) % multiple
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, torch.full(shape, value, dtype=x.dtype, device=x.device)], dim=dim)


def local_slice(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """This rank's contiguous slice of ``x`` along ``dim`` (length divisible by the group size)."""
    state = _STATE.get()
    if state is None:
        return x
    chunk = x.shape[dim] // state.size
    return x.narrow(dim, state.rank * chunk, chunk)


@contextmanager
def ulysses_context(
    group: Any, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None
) -> Iterator[None]:
    """Run model forwards on local sequence slices: the attention of models prepared with
    :func:`enable_ulysses_attention` exchanges heads for positions within ``group``.

    Args:
        group: the sequence-parallel process group (its ranks hold consecutive slices, in rank order).
        attention_mask: ``[batch, seq]`` (1 = token) of the whole (padded) sequences, or None for packed rows.
        position_ids: ``[batch, seq]`` of the whole sequences; with no ``attention_mask`` a position that does not
            follow its predecessor starts a new packed sequence.
    """
    state = _UlyssesState(group, dist.get_world_size(group), dist.get_rank(group), None, attention_mask, position_ids)
    token = _STATE.set(state)
    try:
        yield
    finally:
        _STATE.reset(token)


def full_sequence_mask(
    attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, seq: int, dtype: torch.dtype, device: Any
) -> torch.Tensor:
    """Additive ``[batch, 1, seq, seq]`` mask: query ``i`` sees key ``j`` when ``j <= i``, ``j`` is a token
    (``attention_mask``) and, for packed rows, both are in the same sequence; 0 where allowed, the dtype's minimum
    elsewhere."""
    causal = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
    if attention_mask is not None:
        allowed = causal[None] & attention_mask.to(device=device, dtype=torch.bool)[:, None, :]
    elif position_ids is not None:
        diff = torch.diff(position_ids.to(device), prepend=position_ids[:, :1].to(device) - 1, dim=-1)
        segment = (diff != 1).cumsum(-1)
        allowed = causal[None] & (segment[:, :, None] == segment[:, None, :])
    else:
        allowed = causal[None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


class _KVGroupsProxy:
    """The attention module as the wrapped implementation sees it, with ``num_key_value_groups`` overridden (the
    keys/values were already repeated to one head per query head)."""

    def __init__(self, module: torch.nn.Module, groups: int) -> None:
        self._module, self.num_key_value_groups = module, groups

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _base_attention(impl: str) -> Any:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return eager_attention_forward if impl == "eager" else ALL_ATTENTION_FUNCTIONS[impl]


def _make_ulysses_attention(impl: str) -> Any:
    def attention(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        base = _base_attention(impl)
        state = _STATE.get()
        if state is None:
            return base(module, query, key, value, attention_mask, **kwargs)
        sp, heads, kv_heads = state.size, query.shape[1], key.shape[1]
        if heads % sp != 0:
            raise ValueError(
                f"ulysses_sequence_parallel_size={sp} must divide the number of attention heads ({heads}) of "
                f"{type(module).__name__}"
            )
        target = module
        if kv_heads % sp != 0:  # too few key/value heads to split: give every query head its own copy
            from transformers.models.llama.modeling_llama import repeat_kv

            key, value = repeat_kv(key, heads // kv_heads), repeat_kv(value, heads // kv_heads)
            target = _KVGroupsProxy(module, 1)
        # [b, h, s/sp, d] -> [b, h/sp, s, d]
        query, key, value = (_SeqAllToAll.apply(t, state.group, 1, 2) for t in (query, key, value))
        seq = query.shape[2]
        if state.mask is None or state.mask.dtype != query.dtype or state.mask.shape[-1] != seq:
            state.mask = full_sequence_mask(state.attention_mask, state.position_ids, seq, query.dtype, query.device)
        out, _ = base(target, query, key, value, state.mask, **kwargs)
        # out: [b, s, h/sp, d] -> [b, s/sp, h, d]
        return _SeqAllToAll.apply(out, state.group, 1, 2), None

    return attention


def enable_ulysses_attention(model: torch.nn.Module) -> str:
    """Switch a transformers model to the sequence-parallel wrapper of its attention implementation (eager or
    sdpa); the model computes exactly as before outside :func:`ulysses_context`. Returns the new name."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl is None:
        raise TypeError(f"ulysses sequence parallelism needs a transformers model, got {type(model).__name__}")
    if impl.startswith(ULYSSES_PREFIX):
        return impl
    if impl not in ("eager", "sdpa"):
        raise ValueError(
            f"ulysses sequence parallelism wraps the eager or sdpa attention; the model uses {impl!r} "
            "(set actor_rollout_ref.model.attn_implementation=sdpa or eager)"
        )
    name = ULYSSES_PREFIX + impl
    AttentionInterface.register(name, _make_ulysses_attention(impl))
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[impl])
    model.set_attn_implementation(name)
    return name


def sequence_parallel_group(device_type: str, sp_size: int) -> Any:
    """The process group of this rank's sequence-parallel group: ``sp_size`` consecutive ranks (a ``(dp, sp)``
    device mesh). None when ``sp_size`` is 1."""
    if sp_size <= 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world % sp_size != 0:
        raise ValueError(f"ulysses_sequence_parallel_size={sp_size} does not divide the world size {world}")
    mesh = init_device_mesh(device_type, (world // sp_size, sp_size), mesh_dim_names=("dp", "sp"))
    return mesh["sp"].get_group()
