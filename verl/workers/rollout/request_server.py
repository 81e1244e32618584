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

The names of :mod:`verl.experimental.agent_loop.request_batcher` (``TurnServer``, ``TurnRequest``,
``RequestBatcher``) are aliases of these classes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class TokenOutput:
    """One request's answer: the generated ids (EOS included when it ended there), their log-probs (when the
    engine computes them), and why it stopped: ``eos`` or ``length``."""

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


@dataclass
class TokenRequest:
    """One queued request: the token ids so far (e.g. a conversation), its token budget, its sampling settings, and
    where its answer goes."""

    prompt_ids: list[int]
    max_tokens: int
    future: Future = field(default_factory=Future)
    sampling: TurnSampling = field(default_factory=TurnSampling)


class RequestServer:
    """What a caller generates through: one request's tokens after its token ids so far.

    This base is the callers' half, shared by the engines' servers: :meth:`generate` may be awaited from any
    thread's event loop; it queues the request and a serving thread (the subclass's :meth:`_serve`, the only
    thread that touches the engine) answers it through the request's future. Subclasses:
    :class:`BatchingRequestServer` (any engine's ``generate_sequences``, batch by batch) and
    :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer` (vLLM's engine, request by request).
    Whoever opened the server closes it (:meth:`close`); :meth:`on_close` adds what must happen then (an engine
    put back to sleep, a worker's gathered parameters released).

    Attributes:
        batch_sizes: requests per engine call (or per engine step).
        engine_s: seconds spent in the engine.
    """

    thread_name = "request-server"

    def __init__(self) -> None:
        self._queue: list[TokenRequest] = []
        self._on_close: list[Callable[[], Any]] = []
        self._cond = threading.Condition()
        self._closed = False
        self.batch_sizes: list[int] = []
        self.engine_s = 0.0
        # torch's CPU thread count is per thread (OpenMP): the serving thread uses the caller's
        self._torch_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._serve_thread, name=self.thread_name, daemon=True)
        self._thread.start()

    def open_trajectory(self) -> None:
        """A trajectory starts (its requests are expected); the base does not count them."""

    def close_trajectory(self) -> None:
        """A trajectory is done; the base does not count them."""

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
        if not prompt_ids or max_tokens < 1:
            raise ValueError(
                f"generate: need a non-empty prompt and max_tokens >= 1; got {len(prompt_ids)} ids, {max_tokens}"
            )
        stops = tuple(int(t) for t in stop_token_ids)
        sampling = TurnSampling(temperature, top_p, top_k, stops, logprobs)
        request = TokenRequest([int(t) for t in prompt_ids], int(max_tokens), sampling=sampling)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the {type(self).__name__} is closed")
            self._queue.append(request)
            self._cond.notify_all()
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
            for request in pending:
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
        batch_wait_s: longest wait for more requests once one is queued.
    """

    thread_name = "request-batcher"

    def __init__(
        self, generate_batch: Callable[[DataProto], DataProto], meta_info: dict[str, Any], batch_wait_s: float = 0.02
    ) -> None:
        self.generate_batch = generate_batch
        self.meta_info = dict(meta_info)
        self.batch_wait_s = float(batch_wait_s)
        eos = meta_info.get("eos_token_id")
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self.pad_token_id = int(meta_info.get("pad_token_id") if meta_info.get("pad_token_id") is not None else 0)
        self._active = 0
        super().__init__()

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
            deadline = time.monotonic() + self.batch_wait_s
            while len(self._queue) < self._active and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)
            batch, self._queue = self._queue, []
            return batch

    def _serve(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            groups: dict[TurnSampling, list[TokenRequest]] = {}
            # a request whose trajectory stopped waiting (cancelled) is skipped; the others can no longer be
            # cancelled (their futures are running), so their answers always land
            batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
            for request in batch:  # one engine call per sampling setting
                groups.setdefault(request.sampling, []).append(request)
            for group in groups.values():
                try:
                    outputs = self._run(group)
                except BaseException as e:  # noqa: BLE001  (handed to every waiting trajectory)
                    for request in group:
                        request.future.set_exception(e)
                    continue
                for request, output in zip(group, outputs):
                    request.future.set_result(output)

    def _run(self, batch: list[TokenRequest]) -> list[TokenOutput]:
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, request in enumerate(batch):
            input_ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention_mask[i, width - len(request.prompt_ids) :] = 1
        sampling = batch[0].sampling
        meta = {**sampling.meta(self.meta_info), "response_length": max(r.max_tokens for r in batch)}
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
        start = time.perf_counter()
        out = self.generate_batch(prompts)
        self.engine_s += time.perf_counter() - start
        self.batch_sizes.append(len(batch))
        responses, mask = out.batch["responses"].cpu(), out.batch["response_mask"].cpu()
        log_probs = out.batch["rollout_log_probs"].cpu() if "rollout_log_probs" in out.batch.keys() else None
        results = []
        for i, request in enumerate(batch):
            n = min(int(mask[i].sum()), request.max_tokens)
            ids = [int(t) for t in responses[i, :n].tolist()]
            stop = sampling.stop_reason(ids, self.eos_ids)
            wanted = log_probs is not None and sampling.logprobs is not False
            lp = [float(x) for x in log_probs[i, :n].tolist()] if wanted else None
            results.append(TokenOutput(ids, lp, stop))
        return results


# the names of verl.experimental.agent_loop.request_batcher, where these classes lived before
TurnServer = RequestServer
TurnRequest = TokenRequest
RequestBatcher = BatchingRequestServer
