"""Dynamic batching: requests that arrive together are decoded together, each returned as soon as it finishes.

A request becomes a :class:`Job` and waits in the :class:`Batcher`'s queue. One asyncio task forms batches:
when a job is waiting it holds the batch open for ``batch_wait_s`` (or until ``max_batch_size`` jobs wait),
takes the oldest jobs and hands them to the engine, which decodes them as one batch in a dedicated thread (the
event loop keeps accepting requests meanwhile; torch releases the GIL in its kernels). Jobs that arrive during a
batch form the next one, so under load every batch is as large as the waiting queue, up to ``max_batch_size``.

Inside a batch the engine reports every sampled token to its job (:meth:`Job.on_token`, engine thread); a job
ends at EOS, at its own ``max_new_tokens``, at a stop string, or when cancelled (time limit, client gone), and its
waiter is woken right away: a short answer does not wait for the longest one in its batch, and a cancelled row
stops costing compute at the next step while the others go on.

Sampling parameters: the project's engine samples one temperature/top-p per batch, so a batch holds jobs with the
same ``(temperature, top_p)`` (the oldest job's; the others wait for a batch of their own) and per-row
``max_new_tokens`` and stop strings; the vLLM engine takes per-request parameters, so its batches mix them.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from verl.experimental.agent_loop.openai_schemas import ServeError
from verl.serve.metrics import ServeMetrics

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
    started_at: float | None = None
    _text: str = ""
    _emitted: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _done: asyncio.Future | None = None
    _deltas: asyncio.Queue | None = None

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s

    @property
    def sampling_key(self) -> tuple[float, float]:
        """Jobs with equal keys sample from the same distribution and may share a one-setting batch."""
        return (0.0, 1.0) if self.temperature <= 0.0 else (self.temperature, self.top_p)

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

    # ------------------------------------------------------------------------------------ engine thread side
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
        """For engines that cannot stop rows between tokens: True (and the waiter failed) if cancelled/expired."""
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


class Engine(Protocol):
    """What the batcher needs from an engine (see :mod:`verl.serve.engine`)."""

    name: str
    per_row_sampling: bool

    def generate(self, jobs: list[Job]) -> None:
        """Decode ``jobs`` as one batch, calling ``job.on_token`` / ``job.finish`` for each (engine thread)."""


class Batcher:
    """Queue of waiting jobs and the task that batches them onto the engine (see the module docstring).

    Args:
        engine: decodes a list of jobs as one batch.
        max_batch_size: most jobs in one batch (1 turns batching off: one request at a time, in arrival order).
        batch_wait_s: how long the first waiting job holds the batch open for others.
        max_queue: most jobs waiting (not yet decoding); a job beyond it is refused with 503 and ``Retry-After``.
        metrics: where queue depth, batch sizes and waits are recorded.
        executor: the one-thread executor the engine was built on; batches run there (engines such as vLLM's CPU
            backend keep per-thread state, so building, decoding and closing share one thread). Its owner shuts
            it down.
    """

    def __init__(
        self,
        engine: Engine,
        max_batch_size: int,
        batch_wait_s: float,
        max_queue: int,
        metrics: ServeMetrics,
        executor: ThreadPoolExecutor,
    ) -> None:
        if max_batch_size < 1 or max_queue < 1 or batch_wait_s < 0:
            raise ValueError(
                f"max_batch_size={max_batch_size} and max_queue={max_queue} must be >= 1, "
                f"batch_wait_s={batch_wait_s} >= 0"
            )
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.max_queue = max_queue
        self.metrics = metrics
        self._queue: collections.deque[Job] = collections.deque()
        self._arrived = asyncio.Event()
        self._executor = executor
        self._task: asyncio.Task | None = None
        self._running: list[Job] = []
        self._closing = False
        self._last_batch_s = 1.0

    @property
    def queue_depth(self) -> int:
        """Jobs waiting for a batch."""
        return len(self._queue)

    @property
    def running(self) -> int:
        """Jobs in the batch being decoded that have not finished yet."""
        return sum(not job.finished for job in self._running)

    def start(self) -> None:
        """Start the batching task on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="verl-serve-batcher")

    def submit(self, job: Job) -> None:
        """Queue a job (bound to the running loop); a full queue or a closing server raises a 503 ServeError."""
        if self._closing:
            raise ServeError(503, "the server is shutting down", None, "shutting_down", "server_error")
        if len(self._queue) >= self.max_queue:
            retry = max(1, round(self._last_batch_s))
            raise ServeError(
                503,
                f"the request queue is full ({self.max_queue} waiting); retry after {retry} s",
                None,
                "queue_full",
                "server_error",
                headers={"Retry-After": str(retry)},
            )
        job.bind(asyncio.get_running_loop())
        self._queue.append(job)
        self.metrics.queue_depth.set(len(self._queue))
        self._arrived.set()

    async def _gather(self) -> list[Job]:
        """Wait for jobs, hold the batch open for ``batch_wait_s``, and take the next batch from the queue."""
        while not self._queue:
            self._arrived.clear()
            await self._arrived.wait()
        hold_until = self._queue[0].enqueued_at + self.batch_wait_s
        while len(self._queue) < self.max_batch_size and (left := hold_until - time.monotonic()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                break
        batch: list[Job] = []
        key = None
        kept: collections.deque[Job] = collections.deque()
        while self._queue:
            job = self._queue.popleft()
            if job.check_cancelled():  # timed out or abandoned while waiting: never decoded
                continue
            if key is None:
                key = job.sampling_key
            if len(batch) < self.max_batch_size and (self.engine.per_row_sampling or job.sampling_key == key):
                batch.append(job)
            else:
                kept.append(job)
        self._queue = kept
        self.metrics.queue_depth.set(len(self._queue))
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            batch = await self._gather()
            if not batch:
                continue
            now = time.monotonic()
            for job in batch:
                job.started_at = now
                self.metrics.queue_wait.observe(now - job.enqueued_at)
            self.metrics.batch_size.observe(len(batch))
            self.metrics.running.set(len(batch))
            self._running = batch
            try:
                await loop.run_in_executor(self._executor, self._generate, batch)
            finally:
                self._running = []
                self.metrics.running.set(0)
                self._last_batch_s = time.monotonic() - now

    def _generate(self, batch: list[Job]) -> None:
        try:
            self.engine.generate(batch)
        except Exception as err:  # the waiters get the error; the server keeps serving
            logger.exception("generation failed for a batch of %d", len(batch))
            for job in batch:
                job.fail(ServeError(500, f"generation failed: {err}", None, "engine_error", "server_error"))
        for job in batch:  # an engine that ended without finishing a job (defensive): report it, never hang
            if not job.finished:
                job.finish("length")

    async def close(self) -> None:
        """Stop taking jobs, fail the waiting ones (503) and stop the running batch at its next step."""
        self._closing = True
        shutting = ServeError(503, "the server is shutting down", None, "shutting_down", "server_error")
        while self._queue:
            self._queue.popleft().fail(shutting)
        for job in list(self._running):
            job.cancel("shutdown")
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
