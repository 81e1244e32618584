"""The engine floor's request server: token requests from many callers, served by one rollout engine.

A caller (an agent loop, or anything that talks tokens) awaits :meth:`RequestServer.generate` with its token ids so
far and a token budget, from any thread's event loop; one serving thread owns the engine and answers each request
through its future. Nothing here knows about agents, tools or judges: the agent loop
(:mod:`verl.experimental.agent_loop`) is a layer above, driven by
:class:`~verl.experimental.agent_loop.manager.AgentLoopManager`.

Two servers: :class:`BatchingRequestServer` over any engine's plain ``generate_sequences`` (the default of
:meth:`verl.workers.rollout.base.BaseRollout.request_server`), and vLLM's continuous one
(:class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer`).

:class:`BatchingRequestServer`: the serving thread takes every request waiting, left-pads them into one prompt batch
(``input_ids``/``attention_mask``/``position_ids [n, max_len]``), calls the engine's ``generate_sequences`` once
with ``response_length`` = the largest budget among them, and hands each request its own tokens (cut to its
budget); requests with their own sampling settings (:class:`TurnSampling`) go in one call per setting. While the
engine works, callers that are busy elsewhere (running tools) keep going (they live in event loops on other
threads), and requests that arrive meanwhile form the next batch, so a batch whose tools are slow costs about its
slowest trajectory, not the sum of all.

When a request arrives the thread waits up to ``batch_wait_s`` for more, and stops waiting as soon as every
registered caller (:meth:`open_trajectory`) not busy elsewhere has a request in the queue.

What a request may carry beyond its ids and budget (``verl serve`` uses all of it, the agent loop none): an
``on_token(token_id, ends)`` callback the serving thread calls with every token as it is sampled (returning True
ends the request there: a stop string, a client that went away), a cancellation (:meth:`TokenRequest.cancel`: the
request stops costing compute at the next step), and a vision-language prompt's ``multi_modal_inputs``. A request
is answered as soon as it ends, not when its batch does: vLLM finishes (or aborts) it on its own; an engine that
takes a per-step hook (``step_hook=True``: the ``hf`` decode loop) stops its row there and the rows still running
go on. ``max_batch_size`` bounds the requests served together; ``on_start(request)`` / ``on_batch(size)`` report
the queue wait and batch sizes (``verl serve``'s metrics).

The names of :mod:`verl.experimental.agent_loop.request_batcher` (``TurnServer``, ``TurnRequest``,
``RequestBatcher``) are aliases of these classes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.utils.seeding import subcall_seed
from verl.utils.torch_functional import compute_position_id_with_mask

logger = logging.getLogger(__name__)

__all__ = [
    "BatchingRequestServer",
    "RequestBatcher",
    "RequestServer",
    "TokenOutput",
    "TokenRequest",
    "TurnSampling",
    "TurnRequest",
    "TurnServer",
]

OnToken = Callable[[int, bool], bool]
"""``on_token(token_id, ends) -> stop``: one sampled token of a request (``ends``: it is the EOS/stop id that ends
the answer); returning True ends the request after it. Called on the serving thread."""


@dataclass
class TokenOutput:
    """One request's answer: the generated ids (EOS included when it ended there), their log-probs (when the
    engine computes them), and why it stopped: ``eos``, ``stop`` (a stop id, or its ``on_token`` ended it),
    ``length`` or ``cancelled``."""

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str


@dataclass(frozen=True)
class TurnSampling:
    """One request's own sampling settings over the batch's (``None``: the rollout's). ``stop_token_ids`` end the
    answer like EOS does (stop reason ``stop``); ``logprobs`` True asks the engine for log-probs, False drops them.
    Hashable: requests with equal settings share an engine call."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool | None = None

    def meta(self, meta_info: dict[str, Any]) -> dict[str, Any]:
        """``meta_info`` of an engine call with these settings applied (EOS ids extended by the stop ids)."""
        meta = dict(meta_info)
        for key in ("temperature", "top_p", "top_k"):
            if getattr(self, key) is not None:
                meta[key] = getattr(self, key)
        if self.logprobs:
            meta["calculate_log_probs"] = True
        if self.stop_token_ids:
            eos = meta.get("eos_token_id")
            eos = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
            meta["eos_token_id"] = eos + [t for t in self.stop_token_ids if t not in eos]
        return meta

    def stop_reason(self, ids: list[int], eos_ids: set[int] | list[int]) -> str:
        """``eos`` (ended on an EOS id), ``stop`` (on one of ``stop_token_ids``) or ``length``."""
        if ids and ids[-1] in eos_ids:
            return "eos"
        return "stop" if ids and ids[-1] in self.stop_token_ids else "length"


@dataclass(eq=False)
class TokenRequest:
    """One queued request: the token ids so far (e.g. a conversation), its token budget, its sampling settings, and
    where its answer goes; optionally an ``on_token`` callback (:data:`OnToken`) and a vision-language prompt's
    ``multi_modal_inputs``. The serving thread fills ``token_ids`` (sampled so far), ``started_at`` and ``end`` (why
    it ended: ``eos``, ``stop``, ``length``, ``cancelled``)."""

    prompt_ids: list[int]
    max_tokens: int
    future: Future = field(default_factory=Future)
    sampling: TurnSampling = field(default_factory=TurnSampling)
    on_token: OnToken | None = None
    multi_modal_inputs: dict[str, Any] | None = None
    enqueued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    token_ids: list[int] = field(default_factory=list)
    end: str | None = None
    cancelled: bool = False
    error: BaseException | None = None

    def cancel(self) -> None:
        """Stop the request (any thread): a queued one is never started, a running one stops at the next step and
        is answered with stop reason ``cancelled`` and the tokens it was given so far (``token_ids``)."""
        self.cancelled = True


class RequestServer:
    """What a caller generates through: one request's tokens after its token ids so far.

    This base is the callers' half, shared by the engines' servers: :meth:`generate` may be awaited from any
    thread's event loop (:meth:`submit` queues a :class:`TokenRequest` without waiting); a serving thread (the
    subclass's :meth:`_serve`, the only thread that touches the engine) answers it through the request's future.
    Subclasses: :class:`BatchingRequestServer` (any engine's ``generate_sequences``, batch by batch) and
    :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer` (vLLM's engine, request by request).
    Whoever opened the server closes it (:meth:`close`); :meth:`on_close` adds what must happen then (an engine
    put back to sleep, a worker's gathered parameters released).

    Args:
        max_batch_size: most requests served together (None: no bound beyond the engine's).
        on_start: called with each request as it leaves the queue for the engine (its ``started_at`` set).
        on_batch: called with the number of requests of each engine call (or engine step).

    Attributes:
        batch_sizes: requests per engine call (or per engine step).
        engine_s: seconds spent in the engine.
        last_request_s: seconds the last answered request spent in the engine (a retry hint).
    """

    thread_name = "request-server"
    eos_ids: Sequence[int] | set[int] = ()

    def __init__(
        self,
        max_batch_size: int | None = None,
        on_start: Callable[[TokenRequest], Any] | None = None,
        on_batch: Callable[[int], Any] | None = None,
    ) -> None:
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}: must be >= 1 (or None)")
        self.max_batch_size = max_batch_size
        self._on_start, self._on_batch = on_start, on_batch
        self._queue: list[TokenRequest] = []
        self._serving: list[TokenRequest] = []
        self._on_close: list[Callable[[], Any]] = []
        self._cond = threading.Condition()
        self._closed = False
        self.batch_sizes: list[int] = []
        self.engine_s = 0.0
        self.last_request_s = 0.0
        # torch's CPU thread count is per thread (OpenMP): the serving thread uses the caller's
        self._torch_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._serve_thread, name=self.thread_name, daemon=True)
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the engine."""
        return len(self._queue)

    @property
    def running(self) -> int:
        """Requests in the engine that have not ended yet."""
        return sum(r.end is None for r in list(self._serving))

    def open_trajectory(self) -> None:
        """A trajectory starts (its requests are expected); the base does not count them."""

    def close_trajectory(self) -> None:
        """A trajectory is done; the base does not count them."""

    def submit(self, request: TokenRequest) -> TokenRequest:
        """Queue ``request`` (any thread) and return it; its answer lands in ``request.future``."""
        if not request.prompt_ids or request.max_tokens < 1:
            raise ValueError(
                f"generate: need a non-empty prompt and max_tokens >= 1; got {len(request.prompt_ids)} ids, "
                f"{request.max_tokens}"
            )
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the {type(self).__name__} is closed")
            self._queue.append(request)
            self._cond.notify_all()
        return request

    async def generate(
        self,
        prompt_ids: list[int],
        max_tokens: int,
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        stop_token_ids: list[int] | tuple[int, ...] = (),
        logprobs: bool | None = None,
    ) -> TokenOutput:
        """At most ``max_tokens`` tokens after ``prompt_ids``, served with the other requests in flight; the keyword
        arguments override the rollout's sampling for this request (:class:`TurnSampling`)."""
        stops = tuple(int(t) for t in stop_token_ids)
        sampling = TurnSampling(temperature, top_p, top_k, stops, logprobs)
        request = self.submit(TokenRequest([int(t) for t in prompt_ids], int(max_tokens), sampling=sampling))
        return await asyncio.wrap_future(request.future)

    def on_close(self, callback: Callable[[], Any]) -> None:
        """Call ``callback`` when the server closes, after its serving thread stopped (last added, first called)."""
        self._on_close.append(callback)

    def close(self) -> None:
        """Stop the serving thread; requests still queued (or in flight) fail. Then run the :meth:`on_close`
        callbacks (each once, even when one fails; the first failure is raised)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        error: BaseException | None = None
        while self._on_close:
            try:
                self._on_close.pop()()
            except BaseException as e:  # noqa: BLE001  (the others still run; the first is raised)
                error = error or e
        if error is not None:
            raise error

    # ------------------------------------------------------------------------------ serving thread helpers
    def _started(self, requests: list[TokenRequest]) -> None:
        now = time.monotonic()
        for request in requests:
            request.started_at = now
            if self._on_start is not None:
                self._on_start(request)

    def _batch(self, size: int) -> None:
        self.batch_sizes.append(size)
        if self._on_batch is not None:
            self._on_batch(size)

    def _feed(self, request: TokenRequest, token: int, ends: bool) -> bool:
        """Give ``request`` one sampled token (``ends``: the EOS/stop id that ends it); True once it has ended (its
        budget, its ``on_token``, a cancel), with ``request.end`` set."""
        if request.end is not None:
            return True
        if request.cancelled:
            request.end = "cancelled"
            return True
        request.token_ids.append(int(token))
        stop = False
        if request.on_token is not None:
            try:
                stop = bool(request.on_token(int(token), bool(ends)))
            except Exception as e:  # noqa: BLE001  (the caller's callback failed: its request ends with the error)
                request.error, request.end = e, "error"
                return True
        if ends:
            request.end = request.sampling.stop_reason(request.token_ids, self.eos_ids)
        elif stop:
            request.end = "stop"
        elif len(request.token_ids) >= request.max_tokens:
            request.end = "length"
        return request.end is not None

    def _answer(self, request: TokenRequest, log_probs: list[float] | None = None) -> None:
        """Resolve the request's future with what it has (or its callback's error), once."""
        if request.future.done():
            return
        if request.started_at is not None:
            self.last_request_s = time.monotonic() - request.started_at
        if request.error is not None:
            request.future.set_exception(request.error)
            return
        end = request.end or request.sampling.stop_reason(request.token_ids, self.eos_ids)
        request.future.set_result(TokenOutput(list(request.token_ids), log_probs, end))

    def _serve_thread(self) -> None:
        # torch._C's setter: vLLM's CPU worker replaces torch.set_num_threads with a no-op once it has bound its
        # threads, and its attention kernels check the thread count they were planned for
        torch._C.set_num_threads(self._torch_threads)
        try:
            self._serve()
        except BaseException as e:  # noqa: BLE001  (a dead serving thread must not leave trajectories waiting)
            with self._cond:
                self._closed = True
                pending, self._queue = self._queue, []
            for request in pending + self._serving:
                if not request.future.done():
                    request.future.set_exception(e)
            logger.error(
                "the %s's serving thread died: %r (its waiting requests got the error)", type(self).__name__, e
            )

    def _serve(self) -> None:
        """Answer queued requests until :meth:`close`; the subclass's engine loop."""
        raise NotImplementedError


class BatchingRequestServer(RequestServer):
    """Batches requests from any thread's event loop onto ``generate_batch`` (an engine's ``generate_sequences``).

    Args:
        generate_batch: prompts DataProto -> rollout DataProto (``responses``, ``response_mask``
            ``[n, response_len]``, optionally ``rollout_log_probs``).
        meta_info: the generation call's meta (sampling settings, ``eos_token_id``, ``pad_token_id``, seed).
        batch_wait_s: longest wait for more requests once one is queued (less once every registered trajectory
            has a request queued, or ``max_batch_size`` are).
        step_hook: ``generate_batch`` takes ``on_step`` (the hf engine's per-step hook, see
            :meth:`~verl.workers.rollout.hf_rollout.HFRollout.generate_sequences`): each token reaches its request
            as it is sampled, and a request that ends (or is cancelled) stops its row and, when it asked for no
            log-probs (``logprobs=False``), is answered at once. Without it the tokens are handed over after the
            call.
        step_hook_for_callbacks_only: with ``step_hook``, pass the hook only to batches where some request has an
            ``on_token`` callback (a stream): the hook reads every step's tokens on the host, a device sync per
            step that plain agent-loop turns need not pay (their tokens, cut at the same token, come after the call).
        max_batch_size, on_start, on_batch: see :class:`RequestServer`.
    """

    thread_name = "request-batcher"

    def __init__(
        self,
        generate_batch: Callable[..., DataProto],
        meta_info: dict[str, Any],
        batch_wait_s: float = 0.02,
        *,
        step_hook: bool = False,
        step_hook_for_callbacks_only: bool = False,
        max_batch_size: int | None = None,
        on_start: Callable[[TokenRequest], Any] | None = None,
        on_batch: Callable[[int], Any] | None = None,
    ) -> None:
        self.generate_batch = generate_batch
        self.meta_info = dict(meta_info)
        self.batch_wait_s = float(batch_wait_s)
        self.step_hook = bool(step_hook)
        self.step_hook_for_callbacks_only = bool(step_hook_for_callbacks_only)
        eos = meta_info.get("eos_token_id")
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self.pad_token_id = int(meta_info.get("pad_token_id") if meta_info.get("pad_token_id") is not None else 0)
        self._active = 0
        super().__init__(max_batch_size, on_start, on_batch)

    # --------------------------------------------------------------------------------------------- trajectories
    def open_trajectory(self) -> None:
        """Count a trajectory as active (its requests are expected)."""
        with self._cond:
            self._active += 1
            self._cond.notify_all()

    def close_trajectory(self) -> None:
        """The trajectory is done: the batcher no longer waits for its requests."""
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    # --------------------------------------------------------------------------------------------- serving side
    def _enough(self) -> bool:
        n = len(self._queue)
        full = self.max_batch_size is not None and n >= self.max_batch_size
        return full or (self._active > 0 and n >= self._active)

    def _take_batch(self) -> list[TokenRequest] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                for request in self._queue:
                    if request.future.set_running_or_notify_cancel():
                        request.future.set_exception(RuntimeError("the request batcher was closed"))
                self._queue.clear()
                return None
            deadline = self._queue[0].enqueued_at + self.batch_wait_s
            while not self._enough() and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)
            cap = self.max_batch_size or len(self._queue)
            batch, self._queue = self._queue[:cap], self._queue[cap:]
            return batch

    def _serve(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            groups: dict[TurnSampling, list[TokenRequest]] = {}
            # a request whose trajectory stopped waiting (future cancelled) is skipped; the others can no longer be
            # cancelled that way (their futures are running), so their answers always land
            batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
            for request in batch:  # one engine call per sampling setting
                if request.cancelled:
                    request.end = "cancelled"
                    self._answer(request)
                    continue
                groups.setdefault(request.sampling, []).append(request)
            for group in groups.values():
                try:
                    self._run(group)
                except BaseException as e:  # noqa: BLE001  (handed to every waiting trajectory)
                    for request in group:
                        if not request.future.done():
                            request.future.set_exception(e)
                finally:
                    self._serving = []

    def _prompts(self, batch: list[TokenRequest]) -> DataProto:
        """The left-padded prompt batch of ``batch`` with its engine call's meta."""
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, request in enumerate(batch):
            input_ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention_mask[i, width - len(request.prompt_ids) :] = 1
        meta = {**batch[0].sampling.meta(self.meta_info), "response_length": max(r.max_tokens for r in batch)}
        if self.meta_info.get("seed") is not None:
            meta["seed"] = subcall_seed(self.meta_info["seed"], len(self.batch_sizes))
        prompts = DataProto.from_dict(
            tensors={
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "position_ids": compute_position_id_with_mask(attention_mask),
            },
            meta_info=meta,
        )
        if any(r.multi_modal_inputs for r in batch):  # a vision-language request's images, row by row
            rows = np.empty(len(batch), dtype=object)
            rows[:] = [r.multi_modal_inputs for r in batch]
            prompts.non_tensor_batch["multi_modal_inputs"] = rows
        return prompts

    def _hook(self, batch: list[TokenRequest]) -> Callable[[int, slice, torch.Tensor, torch.Tensor], torch.Tensor]:
        """The engine's per-step hook: each row's token to its request; the rows that ended stop."""

        def on_step(step: int, rows: slice, tokens: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
            stop = []
            for request, token, ends in zip(batch[rows], tokens.tolist(), finished.tolist()):
                ended = self._feed(request, token, ends)
                if ended and request.sampling.logprobs is False:
                    self._answer(request)
                stop.append(ended)
            return torch.tensor(stop, dtype=torch.bool)

        return on_step

    def _run(self, batch: list[TokenRequest]) -> None:
        prompts = self._prompts(batch)
        self._started(batch)
        self._serving = batch
        self._batch(len(batch))
        start = time.perf_counter()
        hook = self.step_hook and (not self.step_hook_for_callbacks_only or any(r.on_token is not None for r in batch))
        if hook:
            out = self.generate_batch(prompts, on_step=self._hook(batch))
        else:
            out = self.generate_batch(prompts)
        self.engine_s += time.perf_counter() - start
        responses, mask = out.batch["responses"].cpu(), out.batch["response_mask"].cpu()
        log_probs = out.batch["rollout_log_probs"].cpu() if "rollout_log_probs" in out.batch.keys() else None
        sampling = batch[0].sampling
        ends = set(self.eos_ids) | set(sampling.stop_token_ids)
        for i, request in enumerate(batch):
            if request.future.done():  # answered when it ended (step hook)
                continue
            if not hook:  # the tokens reach the request now (its on_token may still cut them)
                n = min(int(mask[i].sum()), request.max_tokens)
                ids = [int(t) for t in responses[i, :n].tolist()]
                for j, token in enumerate(ids):
                    if self._feed(request, token, j == n - 1 and token in ends):
                        break
            wanted = log_probs is not None and sampling.logprobs is not False
            lp = [float(x) for x in log_probs[i, : len(request.token_ids)].tolist()] if wanted else None
            self._answer(request, lp)


# the names of verl.experimental.agent_loop.request_batcher, where these classes lived before
TurnServer = RequestServer
TurnRequest = TokenRequest
RequestBatcher = BatchingRequestServer
