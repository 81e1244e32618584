"""A lean KV-cache decode loop for Llama-family transformers models (Llama, Qwen2), used by the ``hf`` rollout.

``transformers.generate`` spends most of a small model's decode step in Python: cache objects, mask building,
logits-processor and stopping-criteria lists, output bookkeeping. This loop calls the model's own submodules
(embeddings, norms, projections, MLPs, rotary embedding, LM head) in the same order with the same weights, so the
logits are the model's logits, but keeps the per-token work to the minimum:

- one preallocated KV cache per layer ``[batch, kv_heads, capacity, head_dim]`` (a static cache: no
  concatenation, no reallocation);
- the attention bias of one decode step built from a key mask ``[batch, capacity]`` (prompt padding) and the
  current cache slot (the causal part is implicit while decoding one token at a time);
- grouped-query attention as one matmul per key/value head; prefill uses
  ``torch.nn.functional.scaled_dot_product_attention``.

One decode step (forward of the last tokens, sampling, bookkeeping) is a function of fixed-shape tensors only: the
cache slot and the response index are device tensors, every step's uniforms are drawn before the loop, and the
step never reads a value back to the host. So it can run three ways (``mode``):

- ``eager``: plain PyTorch, attending only over the filled part of the cache;
- ``compile``: ``torch.compile`` (inductor) of the step;
- ``cuda_graph``: the step captured once per batch-size bucket as a ``torch.cuda.CUDAGraph`` and replayed (one
  launch per token instead of hundreds of kernel launches: a small model's decode step is bound by launch
  overhead, not by reading its weights).

Prefill stays eager. In the compiled and graph modes the batch is padded up to a bucket (1, 2, 4, 8, then
multiples of 8: vLLM's CUDA-graph capture sizes), so a handful of graphs serve every batch size. Every few steps
the loop reads how many rows are still running: when at most half of the bucket is, the running rows are gathered
into a smaller bucket (finished rows stop costing work), and when none is, the loop ends.

Sampling follows the rollout settings exactly as the generic decode loop of :mod:`hf_rollout` does: EOS is
forbidden before ``min_new_tokens``, then temperature, top-k and nucleus filtering, then one inverse-CDF draw per
row with a uniform drawn up front (greedy: argmax); rows that produced EOS continue with the pad id. The sampled
distribution is therefore the one ``generate`` samples from (Holtzman et al. 2020 for top-p), and the eager,
compiled and graph modes produce the same tokens for the same seed.

Only plain (unsharded) modules of the supported architectures take this path; anything else falls back to
``generate`` (see :func:`supports_fast_decode`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from verl.workers.rollout.base import StepHook
from verl.workers.rollout.sampling import choose_tokens, token_log_probs

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
logger = logging.getLogger(__name__)


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


DECODE_MODES = ("eager", "compile", "cuda_graph")
# Decode mode on CPU when the config leaves the choice to the engine (enforce_eager=false): measured in
# docs/benchmarks.md ("Compiled decode on CPU"), inductor's step does not beat the eager one on CPU.
CPU_AUTO_MODE = "eager"


def resolve_decode_mode(enforce_eager: bool, device: torch.device) -> str:
    """The decode mode for ``rollout.enforce_eager`` on ``device``: ``eager`` when enforced, else CUDA graphs on
    CUDA and :data:`CPU_AUTO_MODE` elsewhere."""
    if enforce_eager:
        return "eager"
    return "cuda_graph" if device.type == "cuda" else CPU_AUTO_MODE


def bucket_size(rows: int) -> int:
    """The padded batch size of ``rows`` running rows: 1, 2, 4, 8, then the next multiple of 8."""
    if rows < 1:
        raise ValueError(f"bucket_size needs at least one row, got {rows}")
    if rows <= 8:
        return 1 << (rows - 1).bit_length()
    return -(-rows // 8) * 8


@dataclass
class _DecodeState:
    """Every tensor one decode step reads or writes, for ``B`` rows (a bucket). ``T``: response length,
    ``S``: cache capacity. Rows past the real ones are padding: finished from the start, ``row_ids = -1``."""

    caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, k and v [B, kv_heads, S, head_dim]
    key_ok: torch.Tensor  # [B, S] bool: slot may be attended apart from causality (real prompt tokens, responses)
    slots: torch.Tensor  # [S] long: 0..S-1
    last_tokens: torch.Tensor  # [B] long: the token fed at the next step
    position: torch.Tensor  # [B, 1] long: its position id
    cur: torch.Tensor  # [] long: its cache slot
    step: torch.Tensor  # [] long: the response index the next sampled token goes to
    finished: torch.Tensor  # [B] bool
    finish_step: torch.Tensor  # [B] long: response index at which the row finished (T: not yet, -1: padding)
    uniforms: torch.Tensor  # [B, T] float32: the uniform of each row and step (sampling)
    tokens: torch.Tensor  # [B, T] long
    log_probs: torch.Tensor  # [B, T] float32
    row_ids: torch.Tensor  # [B] long: row of the caller's batch (-1: padding)
    is_eos: torch.Tensor  # [vocab] bool: the end tokens of this call (data, not a constant: graphs outlive calls)

    def scalars(self) -> list[torch.Tensor]:
        """The small tensors a step advances (saved and restored around a warm-up run)."""
        return [self.last_tokens, self.position, self.cur, self.step, self.finished, self.finish_step]


def _alloc_state(
    rows: int,
    capacity: int,
    length: int,
    n_layers: int,
    kv_shape: tuple[int, int],
    vocab: int,
    dtype: torch.dtype,
    device: Any,
) -> _DecodeState:
    kv_heads, head_dim = kv_shape
    # zeros, not empty: the compiled and graph steps read the whole cache (masked), and masked garbage could be NaN
    shape = (rows, kv_heads, capacity, head_dim)
    caches = [
        (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        for _ in range(n_layers)
    ]
    return _DecodeState(
        caches=caches,
        key_ok=torch.zeros(rows, capacity, dtype=torch.bool, device=device),
        slots=torch.arange(capacity, device=device),
        last_tokens=torch.zeros(rows, dtype=torch.long, device=device),
        position=torch.zeros(rows, 1, dtype=torch.long, device=device),
        cur=torch.zeros((), dtype=torch.long, device=device),
        step=torch.zeros((), dtype=torch.long, device=device),
        finished=torch.ones(rows, dtype=torch.bool, device=device),
        finish_step=torch.full((rows,), -1, dtype=torch.long, device=device),
        uniforms=torch.zeros(rows, length, device=device),
        tokens=torch.zeros(rows, length, dtype=torch.long, device=device),
        log_probs=torch.zeros(rows, length, device=device),
        row_ids=torch.full((rows,), -1, dtype=torch.long, device=device),
        is_eos=torch.zeros(vocab, dtype=torch.bool, device=device),
    )


@dataclass(frozen=True)
class _StepConsts:
    """The sampling constants a step is specialised on (part of a graph's key)."""

    greedy: bool
    temperature: float
    top_k: int
    top_p: float
    min_new_tokens: int
    logprob_temperature: float
    calculate_log_probs: bool
    pad_id: int


class FastDecoder:
    """Decode with a static KV cache on the submodules of a Llama/Qwen2 causal LM (see the module docstring).

    Keep one instance per module to reuse its compiled step or captured graphs and their buffers across calls
    (they hold the KV caches of the buckets in use: ``release()`` frees them). Graphs are captured again when the
    module's parameters move to other storage.

    Args:
        module: the causal LM (possibly PEFT-wrapped); must pass :func:`supports_fast_decode`.
        mode: ``eager``, ``compile`` (``torch.compile`` of the decode step) or ``cuda_graph`` (CUDA only).
        check_every: read the number of running rows back to the host every this many steps (early exit and
            compaction); ``None``: every step on CPU, every 8 steps elsewhere (each read is a device sync).
    """

    def __init__(self, module: torch.nn.Module, mode: str = "eager", check_every: int | None = None) -> None:
        if not supports_fast_decode(module):
            raise ValueError(f"{type(module).__name__} is not supported by the fast decode loop")
        if mode not in DECODE_MODES:
            raise ValueError(f"decode mode {mode!r} is not one of {DECODE_MODES}")
        lm = _causal_lm(module)
        self.module = module
        self.requested_mode = mode  # ``mode`` itself falls back to eager if a CUDA graph cannot be captured
        self.lm = lm
        self.backbone = lm.model
        self.mode = mode
        self.check_every = check_every
        config = lm.config
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.num_heads)
        self.vocab = int(lm.lm_head.weight.shape[0])
        # eager mode attends over the filled part of the cache only (less to read); False reads the whole cache
        # under the mask, kernel for kernel what the compiled and graph modes run (bit-identical results on CUDA)
        self.attend_filled_only = True
        # torch.compile options of the ``compile`` mode (tests trace with backend="eager", fullgraph=True)
        self.compile_options: dict[str, Any] = {}
        self._compiled: Callable[..., None] | None = None
        self._states: dict[tuple[Any, ...], _DecodeState] = {}
        self._graphs: dict[tuple[Any, ...], Any] = {}
        self._graph_pool: Any = None
        self._param_key: tuple[int, ...] = ()

    def release(self) -> None:
        """Free the cached decode buffers and CUDA graphs (they are rebuilt on the next call)."""
        self._states.clear()
        self._graphs.clear()
        self._graph_pool = None

    def _forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        caches: list[tuple[torch.Tensor, torch.Tensor]],
        start: int,
        attn_bias: torch.Tensor,
    ) -> torch.Tensor:
        """Prefill: run ``input_ids [bs, L]`` at cache slots ``[start, start + L)``; returns last-position logits
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
            out = F.scaled_dot_product_attention(
                q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=attn_bias.to(q.dtype), scale=scale,
                enable_gqa=gqa,
            )  # fmt: skip
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(bs, length, self.num_heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        last = self.backbone.norm(hidden[:, -1:, :])
        return self.lm.lm_head(last)[:, -1, :]

    def _decode_forward(self, st: _DecodeState, live: int | None) -> torch.Tensor:
        """One token per row (``st.last_tokens`` at slot ``st.cur``) -> logits ``[B, vocab]``; ``live`` (eager
        only) limits attention to the first ``live`` slots, else the whole cache is read under the mask."""
        bs = st.last_tokens.shape[0]
        allowed = st.key_ok & (st.slots <= st.cur)
        bias = torch.zeros(allowed.shape, device=allowed.device).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        bias = bias[:, None, None, :live]
        hidden = self.backbone.embed_tokens(st.last_tokens.unsqueeze(-1))
        cos, sin = self.backbone.rotary_emb(hidden, st.position)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        slot = st.cur.view(1)
        for layer, (k_cache, v_cache) in zip(self.backbone.layers, st.caches):
            attn = layer.self_attn
            scale = float(getattr(attn, "scaling", self.head_dim**-0.5))
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(bs, 1, self.num_heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(bs, 1, self.num_kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(bs, 1, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q = _apply_rope(q, cos, sin).to(v.dtype)
            # a tensor slot, not a Python int: the same captured graph serves every position
            k_cache.index_copy_(2, slot, _apply_rope(k, cos, sin).to(k_cache.dtype))
            v_cache.index_copy_(2, slot, v.to(v_cache.dtype))
            out = _decode_attention(q, k_cache[:, :, :live], v_cache[:, :, :live], bias, scale)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(bs, 1, self.num_heads * self.head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return self.lm.lm_head(self.backbone.norm(hidden))[:, -1, :]

    @staticmethod
    def _choose(logits: torch.Tensor, st: _DecodeState, c: _StepConsts) -> None:
        """Sample the token of response index ``st.step`` from ``logits [B, vocab]`` and record it (in place)."""
        bs = logits.shape[0]
        scores = logits.float()
        if c.min_new_tokens > 0:
            # out of place: ``logits`` itself still feeds the (unmasked) log-probs below. An additive [vocab] row
            # (-inf at the end ids while step < min_new_tokens): a broadcast add is much cheaper on CPU than a
            # broadcast masked_fill, and needs no host-side step to decide
            forbid = torch.where(st.is_eos & (st.step < c.min_new_tokens), float("-inf"), 0.0)
            scores = scores + forbid
        index = st.step.expand(bs, 1)
        uniforms = None if c.greedy else st.uniforms.gather(1, index)
        sampled = choose_tokens(scores, c.greedy, c.temperature, c.top_k, c.top_p, uniforms)
        is_end = st.is_eos.gather(0, sampled)  # before padding: the pad id need not be a vocabulary index
        next_tokens = sampled.masked_fill(st.finished, c.pad_id)
        st.tokens.scatter_(1, index, next_tokens.unsqueeze(-1))
        if c.calculate_log_probs:
            lp = token_log_probs(logits, next_tokens, c.logprob_temperature)
            st.log_probs.scatter_(1, index, lp.unsqueeze(-1))
        newly = is_end & ~st.finished
        st.finish_step.copy_(torch.where(newly, st.step, st.finish_step))
        st.finished.logical_or_(newly)
        st.last_tokens.copy_(next_tokens)
        st.step.add_(1)

    def _step(self, st: _DecodeState, c: _StepConsts, live: int | None) -> None:
        """One decode step in place: forward ``st.last_tokens``, sample the next ones, advance position and slot."""
        logits = self._decode_forward(st, live)
        self._choose(logits, st, c)
        st.position.add_(1)
        st.cur.add_(1)

    def _run_step(self, st: _DecodeState, c: _StepConsts, host_cur: int) -> None:
        if self.mode == "eager":
            self._step(st, c, host_cur + 1 if self.attend_filled_only else None)
        elif self.mode == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(self._step, **self.compile_options)
            self._compiled(st, c, None)
        else:
            try:
                self._replay_graph(st, c)
            except RuntimeError as err:
                # a module variant with an op CUDA graphs cannot capture: decode eagerly from here on, visibly
                logger.warning("CUDA graph capture of the decode step failed (%s); decoding eagerly instead", err)
                self.mode = "eager"
                self._graphs.clear()
                self._step(st, c, None)

    def _replay_graph(self, st: _DecodeState, c: _StepConsts) -> None:
        """Replay (capturing first if needed) the CUDA graph of one step on ``st``'s buffers."""
        key = (id(st), c, torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._capture(st, c)
            self._graphs[key] = graph
        graph.replay()

    def _capture(self, st: _DecodeState, c: _StepConsts) -> Any:
        saved = [t.clone() for t in st.scalars()]

        def restore() -> None:
            for t, s in zip(st.scalars(), saved):
                t.copy_(s)

        # No autocast weight cache inside the graph: a cached cast made outside the capture would be freed
        # when this call's autocast region ends while the graph still reads it; the casts are replayed instead.
        dtype = torch.get_autocast_dtype("cuda")
        enabled = torch.is_autocast_enabled("cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side), torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=False):
                # warm-up (lazy library initialisation); it writes the same cache slot and outputs the real step
                # writes again, and the advanced counters are restored below
                self._step(st, c, None)
            torch.cuda.current_stream().wait_stream(side)
            restore()
            if self._graph_pool is None:
                self._graph_pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._graph_pool):
                with torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=False):
                    self._step(st, c, None)
        finally:
            torch.cuda.current_stream().wait_stream(side)
            restore()  # capture runs no kernel, the warm-up did: the step to replay starts from the saved state
        return graph

    def _state(self, rows: int, capacity: int, length: int, dtype: torch.dtype, device: Any) -> _DecodeState:
        """The decode buffers of a bucket: cached across calls in the compiled and graph modes (the graphs are
        bound to their storage), fresh otherwise."""
        n_layers = len(self.backbone.layers)
        kv_shape = (self.num_kv_heads, self.head_dim)
        if self.mode == "eager":
            return _alloc_state(rows, capacity, length, n_layers, kv_shape, self.vocab, dtype, device)
        key = (rows, capacity, length, dtype, str(device))
        state = self._states.get(key)
        if state is None:
            if any(k[1:] != key[1:] for k in self._states):
                self.release()  # another capacity, length or dtype: the old buckets will not be used again soon
            state = _alloc_state(rows, capacity, length, n_layers, kv_shape, self.vocab, dtype, device)
            self._states[key] = state
        return state

    def _regroup(self, st: _DecodeState, rows: int, keep: torch.Tensor) -> _DecodeState:
        """The rows ``keep`` of ``st`` gathered into a state of ``rows`` rows (padding rows after them)."""
        device = st.tokens.device
        capacity, length = st.key_ok.shape[1], st.tokens.shape[1]
        new = self._state(rows, capacity, length, st.caches[0][0].dtype, device)
        n = keep.numel()
        for (k, v), (nk, nv) in zip(st.caches, new.caches):
            nk[:n].copy_(k.index_select(0, keep))
            nv[:n].copy_(v.index_select(0, keep))
        for f in fields(_DecodeState):
            if f.name in ("caches", "slots", "is_eos"):
                continue
            src, dst = getattr(st, f.name), getattr(new, f.name)
            if src.dim() == 0:
                dst.copy_(src)
            else:
                dst[:n].copy_(src.index_select(0, keep))
        new.is_eos.copy_(st.is_eos)
        new.finished[n:] = True
        new.finish_step[n:] = -1
        new.row_ids[n:] = -1
        new.key_ok[n:] = False
        return new

    @staticmethod
    def _write_back(st: _DecodeState, tokens: torch.Tensor, log_probs: torch.Tensor, finish: torch.Tensor) -> None:
        """Copy the real rows of ``st`` into the caller-ordered outputs."""
        real = st.row_ids >= 0
        ids = st.row_ids[real]
        tokens[ids] = st.tokens[real]
        log_probs[ids] = st.log_probs[real]
        finish[ids] = st.finish_step[real]

    def _weights_key(self) -> tuple[int, ...]:
        return tuple(p.data_ptr() for p in self.lm.parameters())

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
            finished early); log-probs are ``log_softmax(logits / logprob_temperature)`` of the chosen tokens up to
            each row's end (after it they may be 0: a row dropped from the batch is not computed any more).
        """
        bs, prompt_len = input_ids.shape
        device = input_ids.device
        length = settings.response_length
        if self.mode == "cuda_graph" and device.type != "cuda":
            raise ValueError(f"decode mode 'cuda_graph' needs a CUDA device, the model is on {device}")
        if self.mode == "cuda_graph":
            weights = self._weights_key()
            if weights != self._param_key:  # parameters re-allocated: captured graphs read stale storage
                self.release()
                self._param_key = weights
        consts = _StepConsts(
            greedy=settings.greedy,
            temperature=float(settings.temperature),
            top_k=int(settings.top_k),
            top_p=float(settings.top_p),
            min_new_tokens=int(settings.min_new_tokens),
            logprob_temperature=float(settings.logprob_temperature),
            calculate_log_probs=bool(settings.calculate_log_probs),
            pad_id=int(pad_id),
        )
        exact = self.mode == "eager"
        rows = bs if exact else bucket_size(bs)
        # round the capacity so prompts of similar lengths share buffers (and graphs)
        capacity = prompt_len + length if exact else 64 * math.ceil((prompt_len + length) / 64)
        probe = self.backbone.embed_tokens(input_ids[:1, :1])
        # under autocast the projections return the autocast dtype: size the cache for what will be written
        cache_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else probe.dtype
        st = self._state(rows, capacity, length, cache_dtype, device)

        # Prefill (eager): causal and padding mask; a padded query may see itself, so no row is fully masked (a
        # fully masked row would give NaN that then leaks through the cache even at zero attention weight).
        neg_inf = torch.finfo(torch.float32).min
        prompt_ok = attention_mask.bool()
        causal = torch.ones(prompt_len, prompt_len, dtype=torch.bool, device=device).tril()
        allowed = causal.unsqueeze(0) & prompt_ok[:, None, :]
        allowed |= torch.eye(prompt_len, dtype=torch.bool, device=device).unsqueeze(0)
        prefill_bias = torch.zeros(bs, 1, prompt_len, prompt_len, device=device)
        prefill_bias.masked_fill_(~allowed.unsqueeze(1), neg_inf)
        logits = self._forward(input_ids, position_ids, [(k[:bs], v[:bs]) for k, v in st.caches], 0, prefill_bias)

        # an end id outside the LM head's vocabulary can never be sampled: it ends nothing
        ends = [int(e) for e in eos_ids if 0 <= int(e) < self.vocab]
        st.is_eos.zero_()
        st.is_eos[torch.tensor(ends, dtype=torch.long, device=device)] = True
        st.key_ok.fill_(True)
        st.key_ok[:bs, :prompt_len] = prompt_ok
        st.key_ok[bs:] = False
        st.finished.fill_(True)
        st.finished[:bs] = False
        st.finish_step.fill_(-1)
        st.finish_step[:bs] = length
        st.row_ids.fill_(-1)
        st.row_ids[:bs] = torch.arange(bs, device=device)
        st.tokens.fill_(pad_id)
        st.log_probs.zero_()
        st.step.zero_()
        st.position.zero_()
        st.position[:bs] = position_ids[:, -1:]
        if not settings.greedy:
            st.uniforms[:bs] = torch.rand(bs, length, device=device)
        if rows > bs:  # padding rows of the bucket: any logits (their tokens are masked to the pad id)
            logits = torch.cat([logits, logits.new_zeros(rows - bs, logits.shape[-1])])
        self._choose(logits, st, consts)  # response token 0, from the prefill logits
        st.cur.fill_(prompt_len)
        st.position.add_(1)

        tokens = torch.full((bs, length), pad_id, dtype=torch.long, device=device)
        log_probs = torch.zeros(bs, length, device=device)
        finish = torch.full((bs,), length, dtype=torch.long, device=device)
        every = self.check_every or (1 if device.type == "cpu" else 8)
        for step in range(1, length + 1):
            if on_step is not None:
                st = self._call_hook(on_step, step - 1, st, bs, pad_id)
            # the last token needs no forward pass; min_new_tokens forbids stopping earlier, so skip the check
            if step == length:
                break
            if step % every == 0 or on_step is not None:
                running = int((~st.finished).sum())
                if running == 0 and step >= settings.min_new_tokens:
                    break
                if 0 < running <= st.finished.shape[0] // 2:
                    self._write_back(st, tokens, log_probs, finish)
                    keep = (~st.finished).nonzero().squeeze(-1)
                    st = self._regroup(st, running if exact else bucket_size(running), keep)
            self._run_step(st, consts, prompt_len + step - 1)
        self._write_back(st, tokens, log_probs, finish)
        # as many steps as the plain loop runs: until every row has finished, and at least min_new_tokens
        steps = min(length, max(settings.min_new_tokens, int(finish.max()) + 1))
        return tokens[:, :steps], (log_probs[:, :steps] if settings.calculate_log_probs else None)

    def _call_hook(self, on_step: StepHook, step: int, st: _DecodeState, bs: int, pad_id: int) -> _DecodeState:
        """Show the hook the tokens of response index ``step`` in the caller's row order; stop the rows it returns."""
        real = st.row_ids >= 0
        ids = st.row_ids[real]
        tokens = torch.full((bs,), pad_id, dtype=torch.long, device=st.tokens.device)
        finished = torch.ones(bs, dtype=torch.bool, device=st.tokens.device)
        tokens[ids] = st.tokens[real, step]
        finished[ids] = st.finished[real]
        stop = on_step(step, tokens, finished)
        if stop is None:
            return st
        stop = stop.to(device=st.tokens.device, dtype=torch.bool)
        mine = torch.zeros_like(st.finished)
        mine[real] = stop[ids]
        newly = mine & ~st.finished
        st.finish_step[newly] = step
        st.finished |= mine
        return st
