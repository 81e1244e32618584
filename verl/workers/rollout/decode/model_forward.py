"""The decode loop's forwards for modules without a static-cache forward: the model's own forward with its KV cache
(any transformers causal LM: other architectures, sliding windows, FSDP-sharded modules), or, for a bare module
``forward(input_ids, attention_mask=None, position_ids=None) -> logits``, a full forward over the sequence so far.

Both are eager only (their per-step work depends on the step: a cache that grows, a sequence that grows). Both read
the loop's key mask (``st.key_ok``: prompt padding masked, every later slot open) and position ids, so left padding
means what it means in the static-cache forward.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from verl.models.loader import forward_logits
from verl.workers.rollout.decode.state import DecodeState
from verl.workers.rollout.decode.static_cache import causal_lm


def supports_model_cache(module: torch.nn.Module) -> bool:
    """True for a transformers causal LM (possibly PEFT- or FSDP-wrapped) that generates with a KV cache."""
    from transformers import PreTrainedModel

    lm = causal_lm(module)
    hf_config = getattr(lm, "config", None)
    return (
        isinstance(lm, PreTrainedModel)
        and callable(getattr(lm, "generate", None))
        and not getattr(hf_config, "is_encoder_decoder", False)
    )


@dataclass
class ModelCache:
    """The model's own cache object (``past_key_values``), filled by prefill."""

    past: Any = None


class ModelCacheForward:
    """Prefill and decode through the transformers model's own ``forward`` with ``past_key_values`` (its cache).

    The model called is :func:`~verl.workers.rollout.decode.static_cache.causal_lm` of the module (the model under
    a PEFT or ``ActorModel`` wrapper, whose own ``forward`` may not take a cache); an FSDP module is called as it is.

    ``model_inputs`` given to :meth:`prefill` (e.g. a vision model's ``pixel_values``) go to the prefill forward
    only: the decode steps read them from the cache.
    """

    graphable = False

    def __init__(self, module: torch.nn.Module) -> None:
        if not supports_model_cache(module):
            raise ValueError(f"{type(module).__name__} is not a transformers causal LM with a KV cache")
        self.module = module
        lm = self.lm = causal_lm(module)
        self.vocab = int(lm.get_output_embeddings().weight.shape[0])
        # ask for the last position's logits only where the forward takes it (transformers >= 4.45)
        params = inspect.signature(lm.forward).parameters
        self._last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    @staticmethod
    def cache_dtype(input_ids: torch.Tensor) -> torch.dtype:
        return torch.float32  # the loop allocates no cache tensors for this forward

    @staticmethod
    def alloc_cache(rows: int, capacity: int, dtype: torch.dtype, device: Any) -> ModelCache:
        return ModelCache()

    @staticmethod
    def copy_rows(src: ModelCache, dst: ModelCache, keep: torch.Tensor) -> ModelCache:
        src.past.batch_select_indices(keep)
        dst.past = src.past
        return dst

    def _logits(self, **inputs: Any) -> tuple[torch.Tensor, Any]:
        out = self.lm(use_cache=True, **self._last_only, **inputs)
        return out.logits[:, -1, :], out.past_key_values

    def prefill(
        self,
        cache: ModelCache,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        **model_inputs: Any,
    ) -> torch.Tensor:
        """Prompts ``[bs, L]`` (left padding) -> last-position logits ``[bs, vocab]``; the cache holds their keys."""
        logits, cache.past = self._logits(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **model_inputs
        )
        return logits

    def decode(self, st: DecodeState, live: int | None) -> torch.Tensor:
        """``st.last_tokens [B]`` at slot ``live - 1`` -> logits ``[B, vocab]``."""
        mask = st.key_ok[:, :live].long()
        logits, st.cache.past = self._logits(
            input_ids=st.last_tokens.unsqueeze(-1),
            attention_mask=mask,
            position_ids=st.position,
            past_key_values=st.cache.past,
        )
        return logits


@dataclass
class TokenHistory:
    """The tokens and position ids of every slot so far, ``[rows, capacity]`` each (a cache of inputs)."""

    ids: torch.Tensor
    positions: torch.Tensor


class FullForward:
    """Decode a bare logits module by running it over the whole sequence at every step (no KV cache)."""

    graphable = False

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.vocab: int | None = None  # known from the first logits

    @staticmethod
    def cache_dtype(input_ids: torch.Tensor) -> torch.dtype:
        return torch.float32

    @staticmethod
    def alloc_cache(rows: int, capacity: int, dtype: torch.dtype, device: Any) -> TokenHistory:
        zeros = torch.zeros(rows, capacity, dtype=torch.long, device=device)
        return TokenHistory(ids=zeros, positions=zeros.clone())

    @staticmethod
    def copy_rows(src: TokenHistory, dst: TokenHistory, keep: torch.Tensor) -> TokenHistory:
        n = keep.numel()
        dst.ids[:n].copy_(src.ids.index_select(0, keep))
        dst.positions[:n].copy_(src.positions.index_select(0, keep))
        return dst

    def prefill(
        self,
        cache: TokenHistory,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        **model_inputs: Any,
    ) -> torch.Tensor:
        if model_inputs:
            raise ValueError(f"a bare logits module takes token inputs only, got {sorted(model_inputs)}")
        bs, length = input_ids.shape
        cache.ids[:bs, :length] = input_ids
        cache.positions[:bs, :length] = position_ids
        logits = forward_logits(self.module, input_ids, attention_mask, position_ids)[:, -1, :]
        self.vocab = int(logits.shape[-1])
        return logits

    def decode(self, st: DecodeState, live: int | None) -> torch.Tensor:
        """Write ``st.last_tokens`` at slot ``live - 1`` and run the module over slots ``[0, live)``."""
        history = st.cache
        history.ids[:, live - 1] = st.last_tokens
        history.positions[:, live - 1] = st.position[:, 0]
        ids, positions = history.ids[:, :live], history.positions[:, :live]
        return forward_logits(self.module, ids, st.key_ok[:, :live].long(), positions)[:, -1, :]
