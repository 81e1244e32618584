"""The ``hf`` engine's one decode loop: sampling, end of rows, per-step hooks and batch compaction, written once for
every model forward (:func:`decode_forward_for` picks it).

- :class:`~verl.workers.rollout.decode.static_cache.StaticCacheForward` (Llama, Qwen2, Qwen3, Mistral): the model's
  submodules on a preallocated KV cache; its step has fixed shapes, so it can also run compiled or as a CUDA graph.
- :class:`~verl.workers.rollout.decode.model_forward.ModelCacheForward` (any other transformers causal LM,
  FSDP-sharded modules, extra prefill inputs such as images): the model's own ``forward`` with its KV cache.
- :class:`~verl.workers.rollout.decode.model_forward.FullForward` (a bare logits module): a full forward per token.

One decode step (forward of the last tokens, sampling, bookkeeping) reads and writes the tensors of a
:class:`DecodeState` only: the cache slot and the response index are device tensors, every step's uniforms are
drawn before the loop, and the step never reads a value back to the host. With the static-cache forward it runs
four ways (``mode``):

- ``eager``: plain PyTorch, attending only over the filled part of the cache;
- ``compile``: the model's decode forward compiled by ``torch.compile`` (inductor), the sampler run eagerly after it;
- ``cuda_graph``: the step captured once per batch-size bucket and attention window as a ``torch.cuda.CUDAGraph``
  and replayed (one launch per token instead of hundreds of kernel launches: a small model's decode step is bound by
  launch overhead, not by reading its weights);
- ``compile_cuda_graph``: the step with the inductor-compiled forward (elementwise chains such as norms, rotary
  embedding and casts fused into few kernels) captured and replayed as a CUDA graph: fewer kernels per replay than
  ``cuda_graph``, at the price of a compilation (about a minute) on the first call.

The sampler (:meth:`DecodeLoop._choose`) is never compiled: torch 2.11's inductor cannot compile its cumsum over
the vocabulary (the inverse-CDF draw) on CUDA (its split-scan code generation fails: seen on an H200 with 128 rows of
Qwen2.5's 151,936-token vocabulary), and inside a CUDA graph its kernels cost no host-side launches anyway. A mode
that cannot run falls back, with one warning line: a compilation that fails in ``compile_cuda_graph`` mode falls
back to ``cuda_graph`` (the uncompiled step captured), one in ``compile`` mode to ``eager``, and a graph that cannot
be captured to ``eager``.

The static-cache forward can decode with its own copy of the weights (:mod:`.decode_weights`: the compute dtype,
q/k/v and gate/up stacked; ``decode_weights``): on by default in the graph modes, where it removes every per-step
weight cast and three matmuls per layer.

Attention in the ``cuda_graph`` mode reads the cache up to the end of the current *window*
(:func:`attention_window`: the filled slots rounded up to an eighth of the capacity, in multiples of 64), not the
whole capacity: one graph per window, so a step early in a long response reads a fraction of the cache a step at its
end reads (the compiled modes read the whole cache: a new window length would recompile the forward).

The other forwards run eager. Prefill is always eager. In the compiled and graph modes the batch is padded up to a
bucket (1, 2, 4, 8, then multiples of 8: vLLM's CUDA-graph capture sizes), so a handful of graphs serve every batch
size. Every few steps the loop reads how many rows are still running: when at most half of the bucket is, the
running rows are gathered into a smaller bucket (finished rows stop costing work), and when none is, the loop ends.

Sampling (:mod:`verl.workers.rollout.sampling`, the one sampler): EOS is forbidden before ``min_new_tokens``, then
temperature, top-k and nucleus filtering (Holtzman et al. 2020), then one inverse-CDF draw per row with a uniform
drawn up front (greedy: argmax); rows that produced EOS continue with the pad id. So every forward and every mode
produce the same tokens for the same seed (up to the forwards' floating-point differences).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch

from verl.utils.compile_errors import COMPILE_ERRORS, compile_failure_summary
from verl.workers.rollout.base import StepHook
from verl.workers.rollout.decode.model_forward import FullForward, ModelCacheForward, supports_model_cache
from verl.workers.rollout.decode.state import DecodeState, alloc_state
from verl.workers.rollout.decode.static_cache import StaticCacheForward, supports_static_cache
from verl.workers.rollout.sampling import choose_tokens, token_log_probs

logger = logging.getLogger(__name__)

DECODE_MODES = ("eager", "compile", "cuda_graph", "compile_cuda_graph")
GRAPH_MODES = ("cuda_graph", "compile_cuda_graph")
COMPILED_MODES = ("compile", "compile_cuda_graph")
# the mode a mode falls back to when its compilation fails (a failed CUDA-graph capture falls back to eager)
COMPILE_FALLBACK = {"compile": "eager", "compile_cuda_graph": "cuda_graph"}
# Decode mode on CPU when the config leaves the choice to the engine (enforce_eager=false): measured in
# docs/benchmarks.md ("Compiled decode on CPU"), inductor's step does not beat the eager one on CPU.
CPU_AUTO_MODE = "eager"
# At most this many attention windows (graphs per batch bucket) cover a cache capacity in the cuda_graph mode: more
# windows read less of the cache on average (capacity / (2 * windows) past the filled slots) but capture more graphs.
ATTENTION_WINDOWS = 8


class DecodeForward(Protocol):
    """How the loop runs the model: a cache it allocates and regroups, a prefill and a one-token decode step."""

    graphable: bool  # the decode step has fixed shapes (compile / CUDA graphs may take it)
    vocab: int | None

    def cache_dtype(self, input_ids: torch.Tensor) -> torch.dtype: ...

    def alloc_cache(self, rows: int, capacity: int, dtype: torch.dtype, device: Any) -> Any: ...

    def copy_rows(self, src: Any, dst: Any, keep: torch.Tensor) -> Any: ...

    def prefill(
        self, cache: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, **kw: Any
    ) -> torch.Tensor: ...

    def decode(self, st: DecodeState, live: int | None) -> torch.Tensor: ...


def decode_forward_for(module: torch.nn.Module, static_cache: bool = True) -> DecodeForward:
    """The forward the loop uses for ``module``: the static-cache one where supported (and ``static_cache``), the
    model's own forward with its KV cache for other transformers causal LMs, a full forward per token otherwise."""
    if static_cache and supports_static_cache(module):
        return StaticCacheForward(module)
    if supports_model_cache(module):
        return ModelCacheForward(module)
    return FullForward(module)


def resolve_decode_mode(enforce_eager: bool, device: torch.device, requested: str | None = None) -> str:
    """The decode mode for ``rollout.enforce_eager`` on ``device``: ``requested``
    (``rollout.engine_kwargs.hf.decode_mode``) when given, else ``eager`` when enforced, CUDA graphs on CUDA and
    :data:`CPU_AUTO_MODE` elsewhere. A requested mode that contradicts ``enforce_eager`` or the device is refused."""
    key = "rollout.engine_kwargs.hf.decode_mode"
    if requested is not None:
        if requested not in DECODE_MODES:
            raise ValueError(f"{key}={requested!r} is not one of {DECODE_MODES}")
        if enforce_eager and requested != "eager":
            raise ValueError(f"{key}={requested} contradicts rollout.enforce_eager=true: set one of them only")
        if requested in GRAPH_MODES and device.type != "cuda":
            raise ValueError(f"{key}={requested} needs a CUDA device, the rollout runs on {device.type}: use eager")
        return requested
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


def attention_window(filled: int, capacity: int, windows: int = ATTENTION_WINDOWS) -> int:
    """The cache slots ``[0, window)`` a graph-mode step attends over while ``filled`` slots are in use: ``filled``
    rounded up to a block of ``capacity / windows`` slots (a multiple of 64, so a window's mask rows stay aligned
    for the fused attention kernels), at most ``capacity``. ``windows=1``: the whole cache."""
    if not 0 < filled <= capacity or windows < 1:
        raise ValueError(f"attention_window needs 0 < filled <= capacity and windows >= 1, got {filled}, {capacity}, "
                         f"{windows}")  # fmt: skip
    block = 64 * math.ceil(capacity / (64 * windows))
    return min(capacity, block * math.ceil(filled / block))


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
    bans: bool  # some tokens are never sampled (``st.banned``)

    @classmethod
    def of(cls, settings: Any, pad_id: int, bans: bool) -> _StepConsts:
        """The constants of a call with the rollout's :class:`~verl.workers.rollout.base.SamplingSettings`."""
        return cls(
            greedy=settings.greedy,
            temperature=float(settings.temperature),
            top_k=int(settings.top_k),
            top_p=float(settings.top_p),
            min_new_tokens=int(settings.min_new_tokens),
            logprob_temperature=float(settings.logprob_temperature),
            calculate_log_probs=bool(settings.calculate_log_probs),
            pad_id=int(pad_id),
            bans=bans,
        )


class DecodeLoop:
    """Sample responses after left-padded prompts with one model forward (see the module docstring).

    Keep one instance per module to reuse its compiled forward or captured graphs and their buffers across calls
    (they hold the KV caches of the buckets in use: ``release()`` frees them). Graphs are captured again when the
    module's parameters move to other storage.

    Args:
        module: the model: a transformers causal LM (possibly PEFT/FSDP-wrapped) or a logits module.
        mode: ``eager``, ``compile`` (``torch.compile`` of the model's decode forward, the sampler eager),
            ``cuda_graph`` or ``compile_cuda_graph`` (CUDA only); a forward that is not graphable (see
            :func:`decode_forward_for`) always runs eager. A mode that fails falls back (module docstring): the
            mode in use is :attr:`mode`, the one asked for :attr:`requested_mode`.
        check_every: read the number of running rows back to the host every this many steps (early exit and
            compaction); ``None``: every step on CPU, every 8 steps elsewhere (each read is a device sync).
        static_cache: use the static-cache forward where the architecture has one (False: the model's own forward).
        decode_weights: decode with the static-cache forward's own copy of the weights (:mod:`.decode_weights`);
            ``None``: in the graph modes (where the model allows it), not in ``eager`` / ``compile``.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        mode: str = "eager",
        check_every: int | None = None,
        static_cache: bool = True,
        decode_weights: bool | None = None,
    ) -> None:
        if mode not in DECODE_MODES:
            raise ValueError(f"decode mode {mode!r} is not one of {DECODE_MODES}")
        self.module = module
        self.static_cache = static_cache
        self.forward: DecodeForward = decode_forward_for(module, static_cache)
        self.requested_mode = mode  # ``mode`` itself falls back when compiling or capturing fails
        self.mode = mode if self.forward.graphable else "eager"
        self.check_every = check_every
        self.decode_weights = self._resolve_decode_weights(decode_weights)
        # eager mode attends over the filled part of the cache only (less to read); False reads the cuda_graph mode's
        # attention windows under the mask, kernel for kernel what that mode runs (bit-identical results on CUDA)
        self.attend_filled_only = True
        # how many attention windows cover the cache in the cuda_graph mode (attention_window; 1: the whole cache)
        self.attention_windows = ATTENTION_WINDOWS
        # torch.compile options of the compiled forward (tests trace with backend="eager", fullgraph=True)
        self.compile_options: dict[str, Any] = {}
        self._compiled: Callable[..., torch.Tensor] | None = None
        self._states: dict[tuple[Any, ...], DecodeState] = {}
        self._graphs: dict[tuple[Any, ...], Any] = {}
        self._graph_pool: Any = None
        self._param_key: tuple[int, ...] = ()
        self._cache_dtype = torch.float32  # of this call's cache (part of a cached state's key)

    def _resolve_decode_weights(self, requested: bool | None) -> bool:
        """Whether the forward decodes with its own weight copy: ``requested``, or by mode when None; a forward or
        model that cannot is refused when asked explicitly and falls back to its modules when not."""
        unsupported = getattr(self.forward, "stacked_weights_unsupported", None)
        reason = unsupported() if unsupported is not None else f"{type(self.forward).__name__} has no weight copy"
        if requested is None:
            return reason is None and self.mode in GRAPH_MODES
        if requested and reason is not None:
            raise ValueError(f"decode_weights=True: {reason}")
        return requested

    def release(self) -> None:
        """Free the cached decode buffers, CUDA graphs and the forward's weight copy (rebuilt on the next call)."""
        self._free_buffers()
        drop = getattr(self.forward, "drop_decode_weights", None)
        if drop is not None:
            drop()

    def _free_buffers(self) -> None:
        self._states.clear()
        self._graphs.clear()
        self._graph_pool = None

    @staticmethod
    def _choose(logits: torch.Tensor, st: DecodeState, c: _StepConsts) -> None:
        """Sample the token of response index ``st.step`` from ``logits [B, vocab]`` and record it (in place)."""
        bs = logits.shape[0]
        scores = logits.float()
        blocked = st.is_eos & (st.step < c.min_new_tokens) if c.min_new_tokens > 0 else None
        if c.bans:
            blocked = st.banned if blocked is None else blocked | st.banned
        if blocked is not None:
            # out of place: ``logits`` itself still feeds the (unmasked) log-probs below. An additive [vocab] row
            # (-inf at the end ids while step < min_new_tokens, and at banned ids): a broadcast add is much cheaper
            # on CPU than a broadcast masked_fill, and needs no host-side step to decide
            scores = scores + torch.where(blocked, float("-inf"), 0.0)
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

    def _step(self, st: DecodeState, c: _StepConsts, live: int | None) -> None:
        """One decode step in place: forward ``st.last_tokens`` (compiled in the compiled modes), sample the next
        ones (never compiled), advance position and slot. Before the sampler it writes nothing but the KV cache at
        slot ``st.cur``, so a step whose forward fails can be run again."""
        decode = self._compiled_forward() if self.mode in COMPILED_MODES else self.forward.decode
        logits = decode(st, live)
        self._choose(logits, st, c)
        st.position.add_(1)
        st.cur.add_(1)

    def _window(self, st: DecodeState, host_cur: int) -> int:
        """The attention window of the step that writes cache slot ``host_cur`` (see :func:`attention_window`)."""
        return attention_window(host_cur + 1, st.key_ok.shape[1], self.attention_windows)

    def _run_step(self, st: DecodeState, c: _StepConsts, host_cur: int) -> None:
        if self.mode == "eager":
            filled_only = self.attend_filled_only or not self.forward.graphable
            self._step(st, c, host_cur + 1 if filled_only else self._window(st, host_cur))
        else:
            try:
                if self.mode == "compile":
                    self._step(st, c, None)
                else:
                    # windows in cuda_graph mode; the compiled forward reads the whole cache (one compilation)
                    window = self._window(st, host_cur) if self.mode == "cuda_graph" else None
                    self._replay_graph(st, c, window)
            except Exception as err:
                if self.mode in COMPILED_MODES and isinstance(err, COMPILE_ERRORS):
                    self._fall_back(COMPILE_FALLBACK[self.mode], "compiling the decode forward", err)
                elif self.mode in GRAPH_MODES and isinstance(err, RuntimeError):
                    # e.g. a module variant with an op CUDA graphs cannot capture
                    self._fall_back("eager", "capturing the decode step as a CUDA graph", err)
                else:
                    raise
                # nothing but the KV cache slot of this step was written (see _step, and _capture's restore)
                self._run_step(st, c, host_cur)

    def _fall_back(self, mode: str, what: str, err: BaseException) -> None:
        """Switch to ``mode`` from here on with one warning line (``what`` failed: the error's first line), dropping
        the compiled forward and every captured graph (a failed capture stored none; the others ran the old mode),
        and for ``eager`` the cached bucket buffers (eager allocates its own per call; the running call keeps its
        state)."""
        logger.warning(
            "decode mode %s: %s failed (%s); falling back to decode mode %s",
            self.mode, what, compile_failure_summary(err), mode,
        )  # fmt: skip
        self.mode = mode
        self._compiled = None
        if mode == "eager":
            self._free_buffers()
        else:
            self._graphs.clear()
            self._graph_pool = None

    def _compiled_forward(self) -> Callable[..., torch.Tensor]:
        """``torch.compile`` of the forward's ``decode`` (compiled once per loop, with :attr:`compile_options`;
        inductor compiles lazily, at the first call)."""
        if self._compiled is None:
            self._compiled = torch.compile(self.forward.decode, **self.compile_options)
        return self._compiled

    @staticmethod
    def graph_key(st: DecodeState, c: _StepConsts, window: int | None) -> tuple[Any, ...]:
        """What a captured step is bound to: the state's buffers (their storage), the sampling constants, the
        attention window (None: the whole cache), and the autocast dtype on the state's device (None outside
        autocast). In-place weight updates keep the key (the graph reads the parameters' storage, see
        :meth:`generate`)."""
        device_type = st.tokens.device.type
        autocast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
        return (id(st), c, window, autocast)

    def _replay_graph(self, st: DecodeState, c: _StepConsts, window: int | None) -> None:
        """Replay (capturing first if needed) the CUDA graph of one step on ``st``'s buffers, attending over the
        first ``window`` cache slots."""
        key = self.graph_key(st, c, window)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._capture(st, c, window)
            self._graphs[key] = graph
        graph.replay()

    def _capture(self, st: DecodeState, c: _StepConsts, window: int | None) -> Any:
        saved = [t.clone() for t in st.scalars()]

        def restore() -> None:
            for t, s in zip(st.scalars(), saved):
                t.copy_(s)

        # No autocast weight cache inside the graph: a cached cast made outside the capture would be freed
        # when this call's autocast region ends while the graph still reads it; the casts are replayed instead.
        dtype = torch.get_autocast_dtype("cuda")
        enabled = torch.is_autocast_enabled("cuda")
        step = self._step  # with the compiled forward in compile_cuda_graph mode
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(side), torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=False):
                # warm-up (lazy library initialisation, and the compilation in compile_cuda_graph mode); it writes the
                # same cache slot and outputs the real step writes again, and the advanced counters are restored below
                step(st, c, window)
            torch.cuda.current_stream().wait_stream(side)
            restore()
            if self._graph_pool is None:
                self._graph_pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._graph_pool):
                with torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=False):
                    step(st, c, window)
        finally:
            torch.cuda.current_stream().wait_stream(side)
            restore()  # capture runs no kernel, the warm-up did: the step to replay starts from the saved state
        return graph

    def _check_graph_device(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"decode mode {self.mode!r} needs a CUDA device, the model is on {device}")

    def _state(self, rows: int, capacity: int, length: int, dtype: torch.dtype, device: Any) -> DecodeState:
        """The decode buffers of a bucket: cached across calls in the compiled and graph modes (the graphs are
        bound to their storage), fresh otherwise. A call in another cache dtype (e.g. outside the bf16 autocast
        the graphs were captured under: float32 buffers) frees the cached buffers and graphs, and captures anew."""
        vocab = self.forward.vocab or 0  # a bare module's vocabulary is known after its first forward

        def alloc() -> DecodeState:
            cache = self.forward.alloc_cache(rows, capacity, dtype, device)
            return alloc_state(cache, rows, capacity, length, vocab, device)

        if self.mode == "eager":
            return alloc()
        key = (rows, capacity, length, dtype, str(device))
        state = self._states.get(key)
        if state is None:
            if any(k[1:] != key[1:] for k in self._states):
                self._free_buffers()  # another capacity, length or dtype: the old buckets will not be used again soon
            state = self._states[key] = alloc()
        return state

    def _regroup(self, st: DecodeState, rows: int, keep: torch.Tensor) -> DecodeState:
        """The rows ``keep`` of ``st`` gathered into a state of ``rows`` rows (padding rows after them)."""
        capacity, length = st.key_ok.shape[1], st.tokens.shape[1]
        new = self._state(rows, capacity, length, self._cache_dtype, st.tokens.device)
        n = keep.numel()
        new.cache = self.forward.copy_rows(st.cache, new.cache, keep)
        for f in fields(DecodeState):
            if f.name in ("cache", "slots", "is_eos", "banned"):
                continue
            src, dst = getattr(st, f.name), getattr(new, f.name)
            if src.dim() == 0:
                dst.copy_(src)
            else:
                dst[:n].copy_(src.index_select(0, keep))
        for name in ("is_eos", "banned"):
            src, dst = getattr(st, name), getattr(new, name)
            if dst.shape != src.shape:
                dst = torch.zeros_like(src)
                setattr(new, name, dst)
            dst.copy_(src)
        new.finished[n:] = True
        new.finish_step[n:] = -1
        new.row_ids[n:] = -1
        new.key_ok[n:] = False
        return new

    @staticmethod
    def _write_back(st: DecodeState, tokens: torch.Tensor, log_probs: torch.Tensor, finish: torch.Tensor) -> None:
        """Copy the real rows of ``st`` into the caller-ordered outputs."""
        real = st.row_ids >= 0
        ids = st.row_ids[real]
        tokens[ids] = st.tokens[real]
        log_probs[ids] = st.log_probs[real]
        finish[ids] = st.finish_step[real]

    def _start(
        self, st: DecodeState, logits: torch.Tensor, prompt_mask: torch.Tensor, position_ids: torch.Tensor,
        eos_ids: Sequence[int], banned_ids: Sequence[int], consts: _StepConsts,
    ) -> None:  # fmt: skip
        """Set ``st`` up after prefill (``logits [bs, vocab]`` of the prompts' last positions) and sample response
        token 0 from them."""
        bs, prompt_len = prompt_mask.shape
        rows, length = st.tokens.shape
        device = logits.device
        vocab = int(logits.shape[-1])
        if st.is_eos.numel() != vocab:
            st.is_eos = torch.zeros(vocab, dtype=torch.bool, device=device)
            st.banned = torch.zeros(vocab, dtype=torch.bool, device=device)
        st.banned.zero_()
        banned = [int(t) for t in banned_ids if 0 <= int(t) < vocab]
        st.banned[torch.tensor(banned, dtype=torch.long, device=device)] = True
        # an end id outside the LM head's vocabulary can never be sampled: it ends nothing
        ends = [int(e) for e in eos_ids if 0 <= int(e) < vocab]
        st.is_eos.zero_()
        st.is_eos[torch.tensor(ends, dtype=torch.long, device=device)] = True
        st.key_ok.fill_(True)
        st.key_ok[:bs, :prompt_len] = prompt_mask.bool()
        st.key_ok[bs:] = False
        st.finished.fill_(True)
        st.finished[:bs] = False
        st.finish_step.fill_(-1)
        st.finish_step[:bs] = length
        st.row_ids.fill_(-1)
        st.row_ids[:bs] = torch.arange(bs, device=device)
        st.tokens.fill_(consts.pad_id)
        st.log_probs.zero_()
        st.step.zero_()
        st.position.zero_()
        # M-RoPE positions ``[3 or 4, bs, L]`` (a vision model): the prompt ends with text, whose components are
        # equal; the response continues from there, one position per token, as 2-D ids the model expands
        last = position_ids[-1] if position_ids.dim() == 3 else position_ids
        st.position[:bs] = last[:, -1:]
        if not consts.greedy:
            st.uniforms[:bs] = torch.rand(bs, length, device=device)
        if rows > bs:  # padding rows of the bucket: any logits (their tokens are masked to the pad id)
            logits = torch.cat([logits, logits.new_zeros(rows - bs, logits.shape[-1])])
        self._choose(logits, st, consts)
        st.cur.fill_(prompt_len)
        st.position.add_(1)

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
        banned_ids: Sequence[int] = (),
        **model_inputs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Sample up to ``settings.response_length`` tokens after left-padded prompts.

        Args:
            input_ids, attention_mask, position_ids: ``[bs, prompt_len]`` (left padding, positions of real tokens
                counted from 0); a vision model's M-RoPE ``position_ids`` are ``[3, bs, prompt_len]``.
            settings: the rollout's :class:`~verl.workers.rollout.base.SamplingSettings`.
            eos_ids: token ids that end a response; pad_id: the id written after the end.
            on_step: optional :data:`~verl.workers.rollout.base.StepHook` called after each token; the rows it
                returns stop as if they had produced EOS.
            banned_ids: tokens never sampled (their log-probs still come from the unfiltered logits).
            model_inputs: extra inputs of the prefill forward (e.g. ``pixel_values``); the model's own forward only.

        Returns:
            ``(responses [bs, T], log_probs [bs, T] | None)`` with ``T <= response_length`` (shorter when every row
            finished early); log-probs are ``log_softmax(logits / logprob_temperature)`` of the chosen tokens up to
            each row's end (after it they may be 0: a row dropped from the batch is not computed any more).
        """
        bs, prompt_len = input_ids.shape
        device = input_ids.device
        length = settings.response_length
        if self.mode in GRAPH_MODES:
            self._check_graph_device(device)
            weights = self.forward.weights_key()
            if weights != self._param_key:  # parameters re-allocated: captured graphs read stale storage
                self.release()
                self._param_key = weights
        consts = _StepConsts.of(settings, pad_id, bool(banned_ids))
        exact = self.mode == "eager"
        rows = bs if exact else bucket_size(bs)
        # round the capacity so prompts of similar lengths share buffers (and graphs)
        capacity = prompt_len + length if exact else 64 * math.ceil((prompt_len + length) / 64)
        self._cache_dtype = self.forward.cache_dtype(input_ids)
        if self.decode_weights and self.forward.load_decode_weights(self._cache_dtype, device):
            self._graphs.clear()  # a new copy (another dtype): graphs captured earlier read the old one's storage
        st = self._state(rows, capacity, length, self._cache_dtype, device)
        logits = self.forward.prefill(st.cache, input_ids, attention_mask, position_ids, **model_inputs)
        self._start(st, logits, attention_mask, position_ids, eos_ids, banned_ids, consts)

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
        # every row has finished, and at least min_new_tokens steps ran
        steps = min(length, max(settings.min_new_tokens, int(finish.max()) + 1))
        return tokens[:, :steps], (log_probs[:, :steps] if settings.calculate_log_probs else None)

    def _call_hook(self, on_step: StepHook, step: int, st: DecodeState, bs: int, pad_id: int) -> DecodeState:
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
