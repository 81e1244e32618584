"""The static-cache forward's own copy of a Llama-family model's weights for decoding: in the compute dtype,
with the q/k/v projections stacked into one matrix and the gate/up projections into another (vLLM keeps its weights
the same way: ``QKVParallelLinear``, ``MergedColumnParallelLinear``).

Why a copy: a decode step of a small model is bound by the number of kernels it launches, not by the bytes it reads.

- Under autocast over fp32 weights, a CUDA graph cannot keep autocast's weight cache (a cast cached outside the
  capture is freed when the call's autocast region ends while the graph still reads it), so every replayed step
  casts every weight again: 7 cast kernels per layer, and 6 bytes moved per parameter per token. With the copy in
  the compute dtype, the step casts nothing.
- One matmul for q/k/v and one for gate/up: 2 matmuls where there were 5; the rotary embedding of q, k and v at
  once in 3 kernels where 5 ran, and one cache write for keys and values
  (:func:`~verl.workers.rollout.decode.static_cache.apply_rope_heads`).

Each decoded token is the model's up to floating-point rounding: the copy holds the same values autocast would cast
to, a stacked matmul computes every output column with the same dot product as the separate ones (the library may
block the sum differently), and the rotary embedding's sum may be fused with its product. The copy follows the
model: :meth:`DecodeWeights.refresh` copies every weight again at the start of each ``generate`` call, whatever
changed it (an optimizer step, a weight sync through ``.data``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

SILU_ACTIVATIONS = ("silu", "swish")


def decode_weights_unsupported(lm: Any) -> str | None:
    """Why ``lm`` (a Llama-family ``*ForCausalLM`` that the static-cache forward takes) cannot decode with a
    :class:`DecodeWeights` copy, or None when it can: every projection a plain ``torch.nn.Linear`` (no LoRA or
    quantized layer), RMS norms (Qwen3's q/k norms with one eps), a SiLU-gated MLP, and q/k/v (and gate/up) either
    all with biases or all without."""
    act = getattr(lm.config, "hidden_act", None)
    if act not in SILU_ACTIVATIONS:
        return f"hidden_act={act!r} (the stacked MLP computes silu(gate) * up)"
    if type(lm.lm_head) is not torch.nn.Linear:
        return f"lm_head is a {type(lm.lm_head).__name__}"
    norms = [lm.model.norm]
    for i, layer in enumerate(lm.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        projections = {
            "q_proj": attn.q_proj, "k_proj": attn.k_proj, "v_proj": attn.v_proj, "o_proj": attn.o_proj,
            "gate_proj": mlp.gate_proj, "up_proj": mlp.up_proj, "down_proj": mlp.down_proj,
        }  # fmt: skip
        for name, proj in projections.items():
            if type(proj) is not torch.nn.Linear:
                return f"layer {i} {name} is a {type(proj).__name__}"
        for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
            if len({projections[n].bias is None for n in group}) > 1:
                return f"layer {i}: {'/'.join(group)} differ in having a bias"
        norms += [layer.input_layernorm, layer.post_attention_layernorm]
        if getattr(attn, "q_norm", None) is not None:
            norms += [attn.q_norm, attn.k_norm]
            if attn.q_norm.variance_epsilon != attn.k_norm.variance_epsilon:
                return f"layer {i}: q_norm and k_norm differ in eps (the copy normalises q and k heads together)"
    for norm in norms:
        if not hasattr(norm, "variance_epsilon") or not isinstance(getattr(norm, "weight", None), torch.Tensor):
            return f"{type(norm).__name__} is not an RMS norm with a weight and variance_epsilon"
    return None


def rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    """A transformers Llama-family RMS norm of ``x [..., hidden]`` (Zhang & Sennrich 2019): ``w * (x / rms(x))``,
    normalised in fp32 and cast back to ``x``'s dtype before the weight, as the module does; one fused kernel where
    PyTorch has one (``F.rms_norm``, CUDA) for an fp32 ``x``."""
    shape = (x.shape[-1],)
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, shape, norm.weight, norm.variance_epsilon)
    return norm.weight * F.rms_norm(x.float(), shape, None, norm.variance_epsilon).to(x.dtype)


@dataclass
class LayerWeights:
    """One decoder layer's matrices in the compute dtype; norms stay the model's modules (they compute in fp32)."""

    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]: q_proj, k_proj, v_proj stacked
    qkv_bias: torch.Tensor | None
    o: torch.Tensor  # [hidden, heads * head_dim]
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor  # [2 * ffn, hidden]: gate_proj, up_proj stacked
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor  # [hidden, ffn]
    down_bias: torch.Tensor | None
    input_norm: Any
    post_norm: Any
    q_norm: Any = None  # Qwen3's per-head norms of the queries and keys (the model's modules), else None
    k_norm: Any = None


def _sources(lm: Any) -> list[tuple[str, list[torch.Tensor | None]]]:
    """(destination name, the model's tensors stacked into it in order) for every copied tensor."""
    out: list[tuple[str, list[torch.Tensor | None]]] = []
    for i, layer in enumerate(lm.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        out += [
            (f"{i}.qkv", [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
            (f"{i}.qkv_bias", [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]),
            (f"{i}.o", [attn.o_proj.weight]),
            (f"{i}.o_bias", [attn.o_proj.bias]),
            (f"{i}.gate_up", [mlp.gate_proj.weight, mlp.up_proj.weight]),
            (f"{i}.gate_up_bias", [mlp.gate_proj.bias, mlp.up_proj.bias]),
            (f"{i}.down", [mlp.down_proj.weight]),
            (f"{i}.down_bias", [mlp.down_proj.bias]),
        ]
    out += [("lm_head", [lm.lm_head.weight]), ("lm_head_bias", [lm.lm_head.bias])]
    return out


class DecodeWeights:
    """The decode step's weights of ``lm`` in ``dtype`` on ``device`` (see the module docstring).

    Args:
        lm: the causal LM (must pass :func:`decode_weights_unsupported` with None).
        dtype: the compute dtype (the autocast dtype under autocast, else the parameters').
    """

    def __init__(self, lm: Any, dtype: torch.dtype, device: Any) -> None:
        reason = decode_weights_unsupported(lm)
        if reason is not None:
            raise ValueError(f"decode weights: {reason}")
        self.lm = lm
        self.dtype = dtype
        self._sources = _sources(lm)
        self.tensors: dict[str, torch.Tensor | None] = {}
        for name, parts in self._sources:
            if parts[0] is None:
                self.tensors[name] = None
                continue
            rows = sum(int(p.shape[0]) for p in parts)
            self.tensors[name] = torch.empty((rows, *parts[0].shape[1:]), dtype=dtype, device=device)
        self.refresh()
        t = self.tensors
        self.layers = [
            LayerWeights(
                qkv=t[f"{i}.qkv"],
                qkv_bias=t[f"{i}.qkv_bias"],
                o=t[f"{i}.o"],
                o_bias=t[f"{i}.o_bias"],
                gate_up=t[f"{i}.gate_up"],
                gate_up_bias=t[f"{i}.gate_up_bias"],
                down=t[f"{i}.down"],
                down_bias=t[f"{i}.down_bias"],
                input_norm=layer.input_layernorm,
                post_norm=layer.post_attention_layernorm,
                q_norm=getattr(layer.self_attn, "q_norm", None),
                k_norm=getattr(layer.self_attn, "k_norm", None),
            )
            for i, layer in enumerate(lm.model.layers)
        ]
        self.lm_head, self.lm_head_bias = t["lm_head"], t["lm_head_bias"]

    def matches(self, dtype: torch.dtype, device: Any) -> bool:
        """True when this copy is in ``dtype`` on ``device`` (else a new one is built)."""
        return self.dtype == dtype and self.lm_head.device == torch.device(device)

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy (and cast) every weight of the model into this copy's buffers, in place: captured CUDA graphs keep
        reading the same storage."""
        for name, parts in self._sources:
            dst = self.tensors[name]
            if dst is None:
                continue
            row = 0
            for p in parts:
                n = int(p.shape[0])
                dst[row : row + n].copy_(p)
                row += n

    def nbytes(self) -> int:
        """Bytes held by the copy."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values() if t is not None)
