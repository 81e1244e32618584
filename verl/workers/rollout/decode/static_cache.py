"""The forward of a Llama-family causal LM (Llama, Qwen2, Qwen3, Mistral without a sliding window) on a static KV
cache: the decode loop's fast path.

``transformers`` spends most of a small model's decode step in Python: cache objects, mask building, output
bookkeeping. This forward calls the model's own submodules (embeddings, norms, projections, MLPs, rotary embedding,
LM head) in the same order with the same weights, so the logits are the model's logits, but keeps the per-token work
to the minimum:

- one preallocated KV cache per layer, keys and values in one tensor ``[2, batch, kv_heads, capacity, head_dim]``
  (no concatenation, no reallocation; the decode step on the weight copy writes both with one kernel);
- the attention bias of one decode step built from a key mask ``[batch, capacity]`` (prompt padding) and the
  current cache slot (the causal part is implicit while decoding one token at a time);
- grouped-query attention as one matmul per key/value head; prefill uses
  ``torch.nn.functional.scaled_dot_product_attention``;
- Qwen3's per-head RMS norms of the queries and keys (``q_norm``, ``k_norm``, before the rotary embedding) where
  the model has them.

The decode step reads and writes fixed-shape tensors only (the slot is a device tensor), so the loop can compile it
or capture it as a CUDA graph (:mod:`verl.workers.rollout.decode.loop`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from verl.workers.rollout.decode.decode_weights import DecodeWeights, decode_weights_unsupported, rms_norm
from verl.workers.rollout.decode.state import DecodeState

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Prompt tokens per prefill forward: a batch of more rows x prompt length runs in row chunks, so the prefill's
# activations (the MLP's [rows, L, 2 * ffn]) and its attention mask ([rows, 1, L, L]) stay bounded for long prompts
# (256 rows of 8k tokens would need a 34 GB bf16 mask in one forward); 32k tokens keep a GPU's matmuls saturated.
PREFILL_TOKENS = 32768
StaticKV = list[torch.Tensor]  # per layer [2, rows, kv_heads, capacity, head_dim]: keys, then values


def causal_lm(module: torch.nn.Module) -> Any:
    """The transformers ``*ForCausalLM`` a module decodes with: the model under a PEFT wrapper (LoRA layers stay in
    place inside it) or under the Python API's ``ActorModel`` (its ``hf_model``), else the module itself."""
    get_base = getattr(module, "get_base_model", None)
    if callable(get_base):
        return get_base()
    inner = getattr(module, "hf_model", None)
    return inner if isinstance(inner, torch.nn.Module) else module


def supports_static_cache(module: torch.nn.Module) -> bool:
    """True for an unsharded Llama/Qwen2/Qwen3/Mistral causal LM with full attention in every layer (Mistral: no
    sliding window) and rotary positions."""
    lm = causal_lm(module)
    hf_config = getattr(lm, "config", None)
    if hf_config is None or getattr(hf_config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    backbone = getattr(lm, "model", None)
    if backbone is None or not hasattr(lm, "lm_head"):
        return False
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(backbone, name):
            return False
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False  # sliding-window layers need a windowed mask: the model's own forward handles them
    if getattr(hf_config, "use_sliding_window", False):
        return False
    if hf_config.model_type == "mistral" and getattr(hf_config, "sliding_window", None) is not None:
        return False  # Mistral's window applies whenever set (it has no use_sliding_window switch)
    from torch.distributed.tensor import DTensor

    # sharded parameters (FSDP2) only exist as full tensors inside the sharding wrapper's own forward
    return not any(isinstance(p, DTensor) for p in lm.parameters())


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, RoFormer), half-split layout: ``x cos + rotate_half(x) sin``.

    ``x [bs, heads, L, head_dim]``, ``cos``/``sin`` ``[bs, 1, L, head_dim]``.
    """
    return x * cos + _rotate_half(x) * sin


def rotary_tables(
    cos: torch.Tensor, sin: torch.Tensor, rotated_heads: int, passed_heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-head cos and sin tables of :func:`apply_rope_heads`, built once per decode step.

    ``cos``/``sin`` ``[bs, 1, L, head_dim]`` (one row per position) -> ``[bs, rotated_heads + passed_heads, L,
    head_dim]`` each: the first ``rotated_heads`` heads get ``cos`` and ``sin`` with its first half negated
    (``rotate_half(x) * sin == swap_halves(x) * sin'``: the sign moves from every layer's tensor to the step's
    table, exactly), the last ``passed_heads`` get cos 1 and sin 0 (the heads pass through unchanged).
    """
    bs, _, length, dim = cos.shape
    half = dim // 2
    sin_rot = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    rotated, passed = (bs, rotated_heads, length, dim), (bs, passed_heads, length, dim)
    cos_all = torch.cat((cos.expand(rotated), torch.ones_like(cos).expand(passed)), dim=1)
    sin_all = torch.cat((sin_rot.expand(rotated), torch.zeros_like(sin_rot).expand(passed)), dim=1)
    return cos_all, sin_all


def apply_rope_heads(x: torch.Tensor, cos_all: torch.Tensor, sin_all: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """:func:`_apply_rope` over every head of ``x [bs, heads, L, head_dim]`` with the tables of
    :func:`rotary_tables`, written in ``dtype``: ``addcmul(x * cos, swap_halves(x), sin')``, three kernels (the
    products and their sum in the wider of the input dtypes, one rounding to ``dtype``). The values are
    ``_apply_rope(x).to(dtype)``'s up to one rounding (the kernel may fuse the second product into the sum, an FMA:
    one bf16 unit in the last place on a few elements). A passed-through head comes back exactly as it went in
    (``v * 1 + swap_halves(v) * 0 == v`` for finite ``v``)."""
    half = x.shape[-1] // 2
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    torch.addcmul(x * cos_all, torch.cat((x[..., half:], x[..., :half]), dim=-1), sin_all, out=out)
    return out


def _project_qk(attn: Any, x: torch.Tensor, q_shape: tuple[int, ...], kv_heads: int) -> tuple[torch.Tensor, ...]:
    """The attention's queries ``[bs, heads, L, d]`` and keys ``[bs, kv_heads, L, d]`` of ``x [bs, L, hidden]``
    before the rotary embedding: the projections, then Qwen3's per-head RMS norms (``q_norm``, ``k_norm``) where the
    attention has them, in the model's order (``q_shape``: ``(bs, L, heads, d)``)."""
    bs, length, _, dim = q_shape
    q = attn.q_proj(x).view(q_shape)
    k = attn.k_proj(x).view(bs, length, kv_heads, dim)
    if getattr(attn, "q_norm", None) is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    return q.transpose(1, 2), k.transpose(1, 2)


def norm_qk_heads(qkv: torch.Tensor, q_norm: Any, k_norm: Any, heads: int, kv_heads: int) -> torch.Tensor:
    """Qwen3's per-head RMS norms over the q and k heads of the stacked projection ``qkv [bs, L, width, d]`` (q,
    k, then v heads), the v heads passed through: ``w * (x / rms(x))`` normalised in fp32 and cast back to ``qkv``'s
    dtype before the weight, as the modules do (so under autocast the result is fp32, as theirs). One fused norm
    over the q and k heads together (their eps is the same, see ``decode_weights_unsupported``)."""
    dim = qkv.shape[-1]
    qk = qkv[:, :, : heads + kv_heads]
    weight = torch.cat((q_norm.weight.expand(heads, dim), k_norm.weight.expand(kv_heads, dim)))
    normed = weight * F.rms_norm(qk.float(), (dim,), None, q_norm.variance_epsilon).to(qkv.dtype)
    return torch.cat((normed, qkv[:, :, heads + kv_heads :].to(normed.dtype)), dim=2)


def _decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """softmax(q k^T * scale + bias) v for one query token, grouped-query heads without copying the cache.

    ``q [bs, heads, 1, d]``, ``k``/``v`` ``[bs, kv_heads, S, d]``, ``bias [bs, 1, 1, S]`` -> ``[bs, heads, 1, d]``.
    The query heads sharing a key/value head are stacked as rows of one matmul (CPU SDPA kernels are slow for a
    single query row).
    """
    bs, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    qg = q.reshape(bs, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(qg, k.transpose(-1, -2)).float() * scale + bias
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v).reshape(bs, heads, 1, dim)


def _decode_attention_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """:func:`_decode_attention` as one fused kernel (``F.scaled_dot_product_attention``, memory-efficient backend on
    CUDA): the query heads sharing a key/value head are the rows of one query block, so no GQA expansion of the cache
    is needed, and scores stay in fp32 inside the kernel. Shapes as :func:`_decode_attention`; ``bias`` in ``q``'s
    dtype (cast once per step by the caller, not once per layer)."""
    bs, heads, _, dim = q.shape
    kv_heads = k.shape[1]
    qg = q.reshape(bs, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(qg, k, v, attn_mask=bias, scale=scale)
    return out.reshape(bs, heads, 1, dim)


class StaticCacheForward:
    """Prefill and one-token decode of a Llama/Qwen2/Qwen3 causal LM on a static cache (see the module docstring).

    Args:
        module: the causal LM (possibly PEFT-wrapped); must pass :func:`supports_static_cache`.
    """

    graphable = True  # the decode step is a function of fixed-shape tensors: compile and CUDA graphs may take it

    def __init__(self, module: torch.nn.Module) -> None:
        if not supports_static_cache(module):
            raise ValueError(f"{type(module).__name__} is not supported by the static-cache forward")
        lm = causal_lm(module)
        self.module = module
        self.lm = lm
        self.backbone = lm.model
        config = lm.config
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.num_heads)
        self.vocab = int(lm.lm_head.weight.shape[0])
        self.prefill_tokens = PREFILL_TOKENS
        # the decode step's own weights (decode_weights.py), when the loop asks for them
        self.decode_weights: DecodeWeights | None = None

    def stacked_weights_unsupported(self) -> str | None:
        """Why this model cannot decode with a :class:`DecodeWeights` copy, or None."""
        return decode_weights_unsupported(self.lm)

    def load_decode_weights(self, dtype: torch.dtype, device: Any) -> bool:
        """Decode from here on with a copy of the weights in ``dtype``: refreshed from the model in place, or
        built (True: new storage)."""
        if self.decode_weights is not None and self.decode_weights.matches(dtype, device):
            self.decode_weights.refresh()
            return False
        self.decode_weights = None  # free the old copy before allocating the new one
        self.decode_weights = DecodeWeights(self.lm, dtype, device)
        return True

    def drop_decode_weights(self) -> None:
        """Decode with the model's own modules again (and free the copy)."""
        self.decode_weights = None

    def weights_key(self) -> tuple[int, ...]:
        """Storage of every parameter (captured graphs read these addresses)."""
        return tuple(p.data_ptr() for p in self.lm.parameters())

    def cache_dtype(self, input_ids: torch.Tensor) -> torch.dtype:
        """The dtype the projections write: the autocast dtype under autocast, else the embeddings'."""
        device = input_ids.device
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
        return self.backbone.embed_tokens(input_ids[:1, :1]).dtype

    def alloc_cache(self, rows: int, capacity: int, dtype: torch.dtype, device: Any) -> StaticKV:
        """Per layer, keys and values in one tensor ``[2, rows, kv_heads, capacity, head_dim]`` (``kv[0]`` and
        ``kv[1]`` are each contiguous, as the attention kernels read them)."""
        # zeros, not empty: the compiled and graph steps read the whole cache (masked), and masked garbage could be NaN
        shape = (2, rows, self.num_kv_heads, capacity, self.head_dim)
        return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(len(self.backbone.layers))]

    @staticmethod
    def copy_rows(src: StaticKV, dst: StaticKV, keep: torch.Tensor) -> StaticKV:
        """Rows ``keep`` of ``src`` into the first rows of ``dst`` (a smaller bucket); returns ``dst``."""
        n = keep.numel()
        for kv, new_kv in zip(src, dst):
            new_kv[:, :n].copy_(kv.index_select(1, keep))
        return dst

    def prefill(
        self,
        cache: StaticKV,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        **model_inputs: Any,
    ) -> torch.Tensor:
        """Run the prompts ``[bs, L]`` (left padding) at cache slots ``[0, L)`` of the first ``bs`` rows; returns
        last-position logits ``[bs, vocab]``. Runs in chunks of ``prefill_tokens // L`` rows (at least one) when the
        batch holds more tokens (see :data:`PREFILL_TOKENS`)."""
        if model_inputs:
            raise ValueError(f"the static-cache forward takes token inputs only, got {sorted(model_inputs)}")
        bs, length = input_ids.shape
        rows = max(1, self.prefill_tokens // length)
        if bs <= rows:
            return self._prefill_rows(cache, 0, input_ids, attention_mask, position_ids)
        chunks = [
            self._prefill_rows(cache, r, input_ids[r : r + rows], attention_mask[r : r + rows],
                               position_ids[r : r + rows])
            for r in range(0, bs, rows)
        ]  # fmt: skip
        return torch.cat(chunks)

    def _prefill_rows(
        self,
        cache: StaticKV,
        first: int,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`prefill` of the prompts ``[n, L]`` into cache rows ``[first, first + n)``."""
        bs, length = input_ids.shape
        rows = slice(first, first + bs)
        device = input_ids.device
        # causal and padding mask; a padded query may see itself, so no row is fully masked (a fully masked row
        # would give NaN that then leaks through the cache even at zero attention weight)
        prompt_ok = attention_mask.bool()
        allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril().unsqueeze(0) & prompt_ok[:, None]
        allowed |= torch.eye(length, dtype=torch.bool, device=device).unsqueeze(0)
        # built in the compute dtype (the cache's: the projections' output dtype) once, not cast in every layer
        dtype = cache[0].dtype
        bias = torch.zeros(bs, 1, length, length, dtype=dtype, device=device)
        bias.masked_fill_(~allowed.unsqueeze(1), torch.finfo(dtype).min)

        hidden = self.backbone.embed_tokens(input_ids)
        cos, sin = self.backbone.rotary_emb(hidden, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        gqa = self.num_kv_heads != self.num_heads
        for layer, kv in zip(self.backbone.layers, cache):
            k_cache, v_cache = kv[0], kv[1]
            attn = layer.self_attn
            scale = float(getattr(attn, "scaling", self.head_dim**-0.5))
            x = layer.input_layernorm(hidden)
            q, k = _project_qk(attn, x, (bs, length, self.num_heads, self.head_dim), self.num_kv_heads)
            v = attn.v_proj(x).view(bs, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q = _apply_rope(q, cos, sin).to(v.dtype)
            k_cache[rows, :, :length] = _apply_rope(k, cos, sin)
            v_cache[rows, :, :length] = v
            out = F.scaled_dot_product_attention(
                q, k_cache[rows, :, :length], v_cache[rows, :, :length], attn_mask=bias, scale=scale, enable_gqa=gqa
            )
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(bs, length, self.num_heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        last = self.backbone.norm(hidden[:, -1:, :])
        return self.lm.lm_head(last)[:, -1, :]

    def _decode_inputs(self, st: DecodeState, live: int | None) -> tuple[torch.Tensor, ...]:
        """The attention bias ``[B, 1, 1, live]``, the embedded tokens ``[B, 1, hidden]``, rotary cos/sin
        ``[B, 1, 1, head_dim]`` and the cache slot ``[1]`` of one decode step."""
        # the mask of the slots read only: a window's bias is built fresh, so its rows stay aligned for fused kernels
        key_ok, slots = (st.key_ok, st.slots) if live is None else (st.key_ok[:, :live], st.slots[:live])
        allowed = key_ok & (slots <= st.cur)
        bias = torch.zeros(allowed.shape, device=allowed.device).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        bias = bias[:, None, None, :]
        hidden = self.backbone.embed_tokens(st.last_tokens.unsqueeze(-1))
        cos, sin = self.backbone.rotary_emb(hidden, st.position)
        return bias, hidden, cos.unsqueeze(1), sin.unsqueeze(1), st.cur.view(1)

    def decode(self, st: DecodeState, live: int | None) -> torch.Tensor:
        """One token per row (``st.last_tokens`` at slot ``st.cur``) -> logits ``[B, vocab]``; ``live`` limits
        attention to the first ``live`` slots (the eager loop's filled part, or the ``cuda_graph`` mode's attention
        window: a fixed length per captured graph), else the whole cache is read under the mask."""
        if self.decode_weights is not None:
            return self._decode_stacked(self.decode_weights, st, live)
        bs = st.last_tokens.shape[0]
        bias, hidden, cos, sin, slot = self._decode_inputs(st, live)
        for layer, kv in zip(self.backbone.layers, st.cache):
            k_cache, v_cache = kv[0], kv[1]
            attn = layer.self_attn
            scale = float(getattr(attn, "scaling", self.head_dim**-0.5))
            x = layer.input_layernorm(hidden)
            q, k = _project_qk(attn, x, (bs, 1, self.num_heads, self.head_dim), self.num_kv_heads)
            v = attn.v_proj(x).view(bs, 1, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q = _apply_rope(q, cos, sin).to(v.dtype)
            # a tensor slot, not a Python int: the same captured graph serves every position
            k_cache.index_copy_(2, slot, _apply_rope(k, cos, sin).to(k_cache.dtype))
            v_cache.index_copy_(2, slot, v.to(v_cache.dtype))
            out = _decode_attention(q, k_cache[:, :, :live], v_cache[:, :, :live], bias, scale)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(bs, 1, self.num_heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return self.lm.lm_head(self.backbone.norm(hidden))[:, -1, :]

    def _decode_stacked(self, w: DecodeWeights, st: DecodeState, live: int | None) -> torch.Tensor:
        """:meth:`decode` on the stacked copy ``w``: per layer one q/k/v matmul, one rotary embedding over q, k and v
        together (v with cos 1 and sin 0), one write of the layer's keys and values into the cache, one gate/up
        matmul, no weight cast (decode_weights.py), fused RMS norm and attention kernels on CUDA.

        The rotary embedding (:func:`apply_rope_heads`) takes three kernels where ``_apply_rope`` and a cast take
        five, and extending it to v (which it passes through exactly) puts the layer's new key and value side by
        side, so one ``index_copy_`` writes both: a CUDA graph of a small model's step is bound by its kernel
        count (docs/benchmarks.md, the H200 profile).
        """
        bs = st.last_tokens.shape[0]
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        width = heads + 2 * kv_heads  # q, k and v heads of the stacked projection
        bias, hidden, cos, sin, slot = self._decode_inputs(st, live)
        # q and k heads rotate, v heads pass through: one table pair per step for every layer
        cos_all, sin_all = rotary_tables(cos, sin, heads + kv_heads, kv_heads)
        # one fused attention kernel on CUDA (its mask in the compute dtype, cast once for every layer); on CPU the
        # two matmuls are faster than SDPA for one query row
        attention = _decode_attention_fused if hidden.is_cuda else _decode_attention
        if hidden.is_cuda:
            bias = bias.to(w.dtype)
        for lw, layer, kv in zip(w.layers, self.backbone.layers, st.cache):
            scale = float(getattr(layer.self_attn, "scaling", dim**-0.5))
            qkv = F.linear(rms_norm(hidden, lw.input_norm), lw.qkv, lw.qkv_bias)  # [bs, 1, width * dim]
            qkv = qkv.view(bs, 1, width, dim)
            if lw.q_norm is not None:
                qkv = norm_qk_heads(qkv, lw.q_norm, lw.k_norm, heads, kv_heads)
            rotated = apply_rope_heads(qkv.transpose(1, 2), cos_all, sin_all, kv.dtype)
            # keys and values [bs, 2 * kv_heads, 1, dim] -> [2, bs, kv_heads, 1, dim]: the cache's layout, one write
            kv.index_copy_(3, slot, rotated[:, heads:].view(bs, 2, kv_heads, 1, dim).transpose(0, 1))
            out = attention(rotated[:, :heads], kv[0, :, :, :live], kv[1, :, :, :live], bias, scale)
            hidden = hidden + F.linear(out.transpose(1, 2).reshape(bs, 1, heads * dim), lw.o, lw.o_bias)
            gate_up = F.linear(rms_norm(hidden, lw.post_norm), lw.gate_up, lw.gate_up_bias)
            ffn = gate_up.shape[-1] // 2
            hidden = hidden + F.linear(F.silu(gate_up[..., :ffn]) * gate_up[..., ffn:], lw.down, lw.down_bias)
        return F.linear(rms_norm(hidden, self.backbone.norm), w.lm_head, w.lm_head_bias)[:, -1, :]
