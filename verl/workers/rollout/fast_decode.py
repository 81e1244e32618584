"""A lean KV-cache decode loop for Llama-family transformers models (Llama, Qwen2), used by the ``hf`` rollout.

``transformers.generate`` spends most of a small model's decode step in Python: cache objects, mask building,
logits-processor and stopping-criteria lists, output bookkeeping. This loop calls the model's own submodules
(embeddings, norms, projections, MLPs, rotary embedding, LM head) in the same order with the same weights, so the
logits are the model's logits, but keeps the per-token work to the minimum:

- one preallocated KV cache per layer ``[batch, kv_heads, prompt_len + response_len, head_dim]`` (a static cache:
  no concatenation, no reallocation);
- one additive attention bias ``[batch, 1, 1, total_len]`` for the padding of left-padded prompts, built once
  (the causal part is implicit while decoding one token at a time);
- ``torch.nn.functional.scaled_dot_product_attention`` (grouped-query attention through ``enable_gqa``).

Sampling follows the rollout settings exactly as the generic decode loop of :mod:`hf_rollout` does: EOS is
forbidden before ``min_new_tokens``, then temperature, top-k and nucleus filtering, then one multinomial draw per
row (greedy: argmax); rows that produced EOS continue with the pad id and the loop stops once every row has
finished. The sampled distribution is therefore the one ``generate`` samples from (Holtzman et al. 2020 for top-p).

Only plain (unsharded) modules of the supported architectures take this path; anything else falls back to
``generate`` (see :func:`supports_fast_decode`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from verl.workers.rollout.base import StepHook, sample_from_logits

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")


def _causal_lm(module: torch.nn.Module) -> Any:
    """The transformers ``*ForCausalLM`` under a PEFT wrapper (LoRA layers stay in place inside it)."""
    get_base = getattr(module, "get_base_model", None)
    return get_base() if callable(get_base) else module


def supports_fast_decode(module: torch.nn.Module) -> bool:
    """True for an unsharded Llama/Qwen2 causal LM with full attention in every layer and rotary positions."""
    lm = _causal_lm(module)
    config = getattr(lm, "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    backbone = getattr(lm, "model", None)
    if backbone is None or not hasattr(lm, "lm_head"):
        return False
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(backbone, name):
            return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False  # sliding-window layers need a windowed mask: leave them to generate()
    if getattr(config, "use_sliding_window", False):
        return False
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


class FastDecoder:
    """Decode with a static KV cache on the submodules of a Llama/Qwen2 causal LM (see the module docstring).

    Args:
        module: the causal LM (possibly PEFT-wrapped); must pass :func:`supports_fast_decode`.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        if not supports_fast_decode(module):
            raise ValueError(f"{type(module).__name__} is not supported by the fast decode loop")
        lm = _causal_lm(module)
        self.lm = lm
        self.backbone = lm.model
        config = lm.config
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.num_heads)

    def _forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        caches: list[tuple[torch.Tensor, torch.Tensor]],
        start: int,
        attn_bias: torch.Tensor,
    ) -> torch.Tensor:
        """Run ``input_ids [bs, L]`` at cache slots ``[start, start + L)``; returns last-position logits
        ``[bs, vocab]``. ``attn_bias [bs, 1, L, start + L]`` is added to the attention scores."""
        bs, length = input_ids.shape
        hidden = self.backbone.embed_tokens(input_ids)
        cos, sin = self.backbone.rotary_emb(hidden, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        end = start + length
        gqa = self.num_kv_heads != self.num_heads
        for layer, (k_cache, v_cache) in zip(self.backbone.layers, caches):
            attn = layer.self_attn
            scale = float(getattr(attn, "scaling", self.head_dim**-0.5))
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(bs, length, self.num_heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(bs, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(bs, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q = _apply_rope(q, cos, sin).to(v.dtype)
            k_cache[:, :, start:end] = _apply_rope(k, cos, sin)
            v_cache[:, :, start:end] = v
            if length == 1:
                out = _decode_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], attn_bias, scale)
            else:
                out = F.scaled_dot_product_attention(
                    q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=attn_bias.to(q.dtype), scale=scale,
                    enable_gqa=gqa,
                )  # fmt: skip
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(bs, length, self.num_heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        last = self.backbone.norm(hidden[:, -1:, :])
        return self.lm.lm_head(last)[:, -1, :]

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        settings: Any,
        eos_ids: Sequence[int],
        pad_id: int,
        on_step: StepHook | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Sample up to ``settings.response_length`` tokens after left-padded prompts.

        Args:
            input_ids, attention_mask, position_ids: ``[bs, prompt_len]`` (left padding, positions of real tokens
                counted from 0).
            settings: the rollout's :class:`~verl.workers.rollout.base.SamplingSettings`.
            eos_ids: token ids that end a response; pad_id: the id written after the end.
            on_step: optional :data:`~verl.workers.rollout.base.StepHook` called after each token; the rows it
                returns stop as if they had produced EOS.

        Returns:
            ``(responses [bs, T], log_probs [bs, T] | None)`` with ``T <= response_length`` (shorter when every row
            finished early); log-probs are ``log_softmax(logits / logprob_temperature)`` of the chosen tokens.
        """
        from verl.workers.rollout.hf_rollout import filter_top_k_top_p

        bs, prompt_len = input_ids.shape
        device = input_ids.device
        total = prompt_len + settings.response_length
        probe = self.backbone.embed_tokens(input_ids[:1, :1])
        # under autocast the projections return the autocast dtype: size the cache for what will be written
        cache_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else probe.dtype
        shape = (bs, self.num_kv_heads, total, self.head_dim)
        caches = [
            (torch.empty(shape, dtype=cache_dtype, device=device), torch.empty(shape, dtype=cache_dtype, device=device))
            for _ in self.backbone.layers
        ]
        neg_inf = torch.finfo(torch.float32).min
        key_valid = torch.ones(bs, total, dtype=torch.bool, device=device)
        key_valid[:, :prompt_len] = attention_mask.bool()
        # Prefill: causal and padding mask; a padded query may see itself, so no row is fully masked (a fully
        # masked row would give NaN that then leaks through the cache even at zero attention weight).
        causal = torch.ones(prompt_len, prompt_len, dtype=torch.bool, device=device).tril()
        allowed = causal.unsqueeze(0) & key_valid[:, None, :prompt_len]
        allowed |= torch.eye(prompt_len, dtype=torch.bool, device=device).unsqueeze(0)
        prefill_bias = torch.zeros(bs, 1, prompt_len, prompt_len, device=device)
        prefill_bias.masked_fill_(~allowed.unsqueeze(1), neg_inf)
        decode_bias = torch.zeros(bs, 1, 1, total, device=device)
        decode_bias.masked_fill_(~key_valid[:, None, None, :], neg_inf)

        eos = torch.tensor(list(eos_ids), device=device, dtype=torch.long)
        finished = torch.zeros(bs, dtype=torch.bool, device=device)
        tokens = torch.full((bs, settings.response_length), pad_id, dtype=torch.long, device=device)
        token_log_probs = (
            torch.zeros(bs, settings.response_length, device=device) if settings.calculate_log_probs else None
        )
        position = position_ids[:, -1:].clone()
        logits = self._forward(input_ids, position_ids, caches, 0, prefill_bias)
        steps = 0
        for step in range(settings.response_length):
            scores = logits.float()
            if step < settings.min_new_tokens:
                # out of place: ``logits`` itself still feeds the (unmasked) log-probs below
                scores = scores.index_fill(-1, eos, float("-inf"))
            if settings.greedy:
                next_tokens = scores.argmax(dim=-1)
            else:
                filtered = filter_top_k_top_p(scores / settings.temperature, settings.top_k, settings.top_p)
                next_tokens = sample_from_logits(filtered)
            next_tokens = next_tokens.masked_fill(finished, pad_id)
            tokens[:, step] = next_tokens
            if token_log_probs is not None:
                lp = torch.log_softmax(logits.float() / settings.logprob_temperature, dim=-1)
                token_log_probs[:, step] = lp.gather(-1, next_tokens.unsqueeze(-1)).squeeze(-1)
            steps = step + 1
            finished |= torch.isin(next_tokens, eos)
            if on_step is not None:
                stop = on_step(step, next_tokens, finished)
                if stop is not None:
                    finished |= stop.to(device=device, dtype=torch.bool)
            # the last token needs no forward pass; min_new_tokens forbids stopping earlier, so skip the check
            if steps == settings.response_length or (steps >= settings.min_new_tokens and bool(finished.all())):
                break
            position = position + 1
            cur = prompt_len + step
            logits = self._forward(next_tokens.unsqueeze(-1), position, caches, cur, decode_bias[..., : cur + 1])
        responses = tokens[:, :steps]
        return responses, None if token_log_probs is None else token_log_probs[:, :steps]
