"""The service's side of batching: a request's text (stop strings, streamed deltas, its waiter) over the engine
floor's request server, which does the batching.

A request becomes a :class:`Job`; :class:`Batcher` hands it to the one request-serving core of the package, a
:class:`~verl.workers.rollout.request_server.RequestServer` (:class:`BatchingRequestServer` over the ``hf`` decode
loop, :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer` on vLLM; built by
:mod:`verl.serve.engine`), as a :class:`~verl.workers.rollout.request_server.TokenRequest` whose ``on_token`` is
:meth:`Job.on_token`. The server's thread owns the engine: it batches what is waiting (up to ``max_batch_size``,
holding a batch open ``batch_wait_s`` on ``hf``; continuous batching on vLLM) while the event loop keeps accepting
requests. Every sampled token reaches its job on that thread; a job ends at EOS, at its own ``max_new_tokens``, at a
stop string, or when cancelled (time limit, client gone), and its waiter is woken right away: a short answer does not
wait for the longest one in its batch, and a cancelled row stops costing compute at the next step (vLLM aborts it,
the decode loop stops its row) while the others go on.

Sampling: ``hf`` decodes one temperature/top-p per engine call, so the server splits a batch by setting (one call
each); vLLM takes per-request settings. Here: the queue limit (503 with ``Retry-After``), the shutdown, and the text.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.openai_schemas import ServeError
from verl.workers.rollout.request_server import RequestServer, TokenRequest, TurnSampling

logger = logging.getLogger(__name__)

_job_ids = itertools.count()


@dataclass(frozen=True)
class Completion:
    """What a finished job returns: text, why it ended (``stop`` or ``length``) and token counts."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


class RequestTimeout(ServeError):
    """The job ran past its time limit (answered 504)."""

    def __init__(self, limit_s: float) -> None:
        message = f"request exceeded its time limit of {limit_s:g} s and was cancelled"
        super().__init__(504, message, None, "timeout", "timeout_error")


@dataclass(eq=False)
class Job:
    """One generation request, shared by the event loop (waiter) and the engine thread (producer).

    Attributes set by the caller: the prompt token ids, sampling parameters, stop strings, whether the text is
    streamed, the time limit; ``decode`` turns token ids into text (the tokenizer's ``decode``).
    """

    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    decode: Callable[[list[int]], str]
    stop: tuple[str, ...] = ()
    stream: bool = False
    timeout_s: float = 60.0
    multi_modal_inputs: dict[str, Any] | None = None  # a vision-language prompt's pixel_values / image_grid_thw
    id: int = field(default_factory=lambda: next(_job_ids))
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: str | None = None  # why: "timeout" or "disconnected"; read by the engine thread at each step
    enqueued_at: float = 0.0
    _text: str = ""
    _emitted: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _done: asyncio.Future | None = None
    _deltas: asyncio.Queue | None = None
    _request: TokenRequest | None = None

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach the job to the event loop whose coroutines wait for it."""
        self._loop = loop
        self._done = loop.create_future()
        # a waiter that gave up (time limit) no longer reads the error the engine side reports later
        self._done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._deltas = asyncio.Queue() if self.stream else None
        self.enqueued_at = time.monotonic()

    def request(self) -> TokenRequest:
        """The job as a token request of the request server (its tokens come back through :meth:`on_token`)."""
        greedy = self.temperature <= 0.0
        sampling = TurnSampling(
            temperature=0.0 if greedy else self.temperature, top_p=None if greedy else self.top_p, logprobs=False
        )
        self._request = TokenRequest(
            list(self.prompt_ids), self.max_new_tokens, sampling=sampling, on_token=self.on_token,
            multi_modal_inputs=self.multi_modal_inputs,
        )  # fmt: skip
        self._request.future.add_done_callback(self._answered)
        return self._request

    # ------------------------------------------------------------------------------------ serving thread side
    def on_token(self, token_id: int, is_eos: bool = False) -> bool:
        """Record one sampled token; returns True when the job is finished (EOS, length, stop string, cancel).

        The EOS token itself is not part of the text.
        """
        if self.finished:
            return True
        if self.check_cancelled():
            return True
        if is_eos:
            self.finish("stop")
            return True
        self.token_ids.append(int(token_id))
        if self.stream or self.stop:
            self._text = self.decode(self.token_ids)
            if self.stop and self._cut_at_stop():
                self.finish("stop")
                return True
            self._emit_delta(final=False)
        if len(self.token_ids) >= self.max_new_tokens:
            self.finish("length")
            return True
        return False

    def check_cancelled(self) -> bool:
        """True (and the waiter failed) if the job was cancelled or ran past its time limit."""
        if self.finished:
            return True
        if self.cancelled is None and time.monotonic() > self.deadline:
            self.cancelled = "timeout"
        if self.cancelled is not None:
            self._fail(self._cancel_error())
            return True
        return False

    def _cancel_error(self) -> ServeError:
        if self.cancelled == "timeout":
            return RequestTimeout(self.timeout_s)
        if self.cancelled == "shutdown":
            return ServeError(503, "the server is shutting down", None, "shutting_down", "server_error")
        return ServeError(499, "the client closed the request", None, "cancelled", "cancelled")

    def _cut_at_stop(self) -> bool:
        # a stop string may straddle the previous token: search from just before the emitted text's end
        start = max(0, self._emitted - max(len(s) for s in self.stop))
        hits = [i for i in (self._text.find(s, start) for s in self.stop) if i >= 0]
        if not hits:
            return False
        self._text = self._text[: min(hits)]
        return True

    def _emit_delta(self, final: bool) -> None:
        if self._deltas is None:
            return
        text = self._text
        if not final:
            # hold back what may still change: up to 3 trailing replacement characters (the first bytes of a UTF-8
            # character whose last bytes come with the next tokens) and a possible stop-string prefix
            pending = min(3, len(text) - len(text.rstrip("\ufffd")))
            text = text[: len(text) - pending]
            if self.stop:
                hold = max(len(s) for s in self.stop) - 1
                text = text[: max(self._emitted, len(text) - hold)]
        if len(text) > self._emitted:
            delta, self._emitted = text[self._emitted :], len(text)
            self._call(self._deltas.put_nowait, delta)

    def finish(self, reason: str) -> None:
        """End the job normally (``stop`` or ``length``) and wake its waiter."""
        if self.finished:
            return
        self.finish_reason = reason
        if not (self.stream or self.stop):
            self._text = self.decode(self.token_ids)
        self._emit_delta(final=True)
        result = Completion(self._text, reason, len(self.prompt_ids), len(self.token_ids))
        self._call(self._resolve, result, None)

    def _fail(self, error: BaseException) -> None:
        if self.finished:
            return
        self.finish_reason = "error"
        self._call(self._resolve, None, error)

    def fail(self, error: BaseException) -> None:
        """End the job with an error (engine failure, shutdown)."""
        self._fail(error)

    def _answered(self, future: Future) -> None:
        """The request server answered (serving thread): end the job if its tokens did not (engine error,
        shutdown, a cancel seen by the server, or an end the job did not count itself)."""
        if self.finished:
            return
        if self.cancelled is not None or future.cancelled():
            self.cancelled = self.cancelled or "disconnected"
            self._fail(self._cancel_error())
            return
        error = future.exception()
        if error is not None:
            logger.error("generation failed for request %d: %r", self.id, error)
            self.fail(ServeError(500, f"generation failed: {error}", None, "engine_error", "server_error"))
            return
        self.finish("length" if future.result().stop_reason == "length" else "stop")

    def _resolve(self, result: Completion | None, error: BaseException | None) -> None:
        # runs on the event loop
        if self._done is None or self._done.done():
            return
        if error is not None:
            self._done.set_exception(error)
        else:
            self._done.set_result(result)
        if self._deltas is not None:
            self._deltas.put_nowait(None)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._loop is None:
            raise RuntimeError("Job.bind(loop) was not called")
        if self._loop.is_closed():
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed between the check and the call (shutdown)
            pass

    # ----------------------------------------------------------------------------------- event loop side
    async def result(self) -> Completion:
        """Wait for the completion; past the time limit the job is cancelled and :class:`RequestTimeout` raised."""
        assert self._done is not None, "Job.bind(loop) was not called"
        try:
            return await asyncio.wait_for(asyncio.shield(self._done), max(0.0, self.deadline - time.monotonic()))
        except asyncio.TimeoutError:
            self.cancel("timeout")
            raise RequestTimeout(self.timeout_s) from None
        except asyncio.CancelledError:
            self.cancel("disconnected")
            raise

    async def deltas(self) -> AsyncIterator[str]:
        """The streamed text pieces as they are produced; ends when the job ends (then ``result()`` is ready)."""
        assert self._deltas is not None, "deltas() needs a job created with stream=True"
        while True:
            remaining = self.deadline - time.monotonic()
            try:
                piece = await asyncio.wait_for(self._deltas.get(), max(0.0, remaining))
            except asyncio.TimeoutError:
                self.cancel("timeout")
                raise RequestTimeout(self.timeout_s) from None
            if piece is None:
                return
            yield piece

    def cancel(self, reason: str) -> None:
        """Ask for the job to stop (the engine drops its row at the next step; a queued job is never started)."""
        if self.cancelled is None and not self.finished:
            self.cancelled = reason
            if self._request is not None:
                self._request.cancel()


class Batcher:
    """The service's queue limit and shutdown in front of the request server that batches (module docstring).

    Args:
        server: the request server of the engine (its ``max_batch_size`` bounds a batch).
        max_queue: most requests waiting (not yet decoding); one beyond it is refused with 503 and ``Retry-After``.
    """

    def __init__(self, server: RequestServer, max_queue: int) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue} must be >= 1")
        self.server = server
        self.max_queue = max_queue
        self._jobs: list[Job] = []  # submitted and maybe not finished (event loop side only)
        self._closing = False

    @property
    def max_batch_size(self) -> int | None:
        """Most requests decoded together."""
        return self.server.max_batch_size

    @property
    def queue_depth(self) -> int:
        """Jobs waiting for a batch."""
        return self.server.queue_depth

    @property
    def running(self) -> int:
        """Jobs being decoded that have not finished yet."""
        return self.server.running

    def submit(self, job: Job) -> None:
        """Queue a job (bound to the running loop); a full queue or a closing server raises a 503 ServeError."""
        if self._closing:
            raise ServeError(503, "the server is shutting down", None, "shutting_down", "server_error")
        if self.server.queue_depth >= self.max_queue:
            retry = max(1, round(self.server.last_request_s))
            raise ServeError(
                503,
                f"the request queue is full ({self.max_queue} waiting); retry after {retry} s",
                None,
                "queue_full",
                "server_error",
                headers={"Retry-After": str(retry)},
            )
        job.bind(asyncio.get_running_loop())
        self._jobs = [j for j in self._jobs if not j.finished]
        try:
            self.server.submit(job.request())
        except RuntimeError as err:  # the server closed (shutdown) or its serving thread died
            raise ServeError(503, f"the engine is not serving: {err}", None, "shutting_down", "server_error") from err
        self._jobs.append(job)

    async def close(self) -> None:
        """Stop taking jobs, cancel the waiting and running ones (503) and stop the server's thread."""
        self._closing = True
        for job in self._jobs:
            job.cancel("shutdown")
        await asyncio.to_thread(self.server.close)
