"""Generation requests of many agent-loop coroutines, served in batches by one rollout engine.

Each trajectory awaits :meth:`RequestBatcher.generate` with its token ids so far and a token budget. A dedicated
thread owns the engine: it takes every request waiting, left-pads them into one prompt batch
(``input_ids``/``attention_mask``/``position_ids [n, max_len]``), calls the engine's ``generate_sequences`` once
with ``response_length`` = the largest budget among them, and hands each request its own tokens (cut to its
budget); requests with their own sampling settings (:class:`TurnSampling`) go in one call per setting. While the
engine works, trajectories that are running tools keep going (they live in event loops on
other threads), and requests that arrive meanwhile form the next batch, so a batch whose tools are slow costs
about its slowest trajectory, not the sum of all.

When a request arrives the thread waits up to ``batch_wait_s`` for more, and stops waiting as soon as every
registered trajectory (:meth:`open_trajectory`) not busy elsewhere has a request in the queue.
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
from verl.utils.torch_functional import compute_position_id_with_mask

logger = logging.getLogger(__name__)

__all__ = ["RequestBatcher", "TokenOutput", "TurnRequest", "TurnSampling", "TurnServer"]

TURN_META_KEY = "agent_loop_turn"
"""``meta_info`` flag of the batcher's own engine calls (the engine generates plainly instead of looping again)."""


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
class TurnRequest:
    """One queued turn: the conversation's token ids so far, its token budget, its sampling settings, and where its
    answer goes."""

    prompt_ids: list[int]
    max_tokens: int
    future: Future = field(default_factory=Future)
    sampling: TurnSampling = field(default_factory=TurnSampling)


class TurnServer:
    """What an agent loop generates through: one turn's tokens after its conversation so far.

    This base is the agents' half, shared by both engines' servers: :meth:`generate` may be awaited from any
    thread's event loop; it queues the request and a serving thread (the subclass's :meth:`_serve`, the only
    thread that touches the engine) answers it through the request's future. Subclasses:
    :class:`RequestBatcher` (any engine's ``generate_sequences``, batch by batch) and
    :class:`~verl.workers.rollout.vllm_request_server.VLLMRequestServer` (vLLM's engine, request by request).

    Attributes:
        batch_sizes: requests per engine call (or per engine step).
        engine_s: seconds spent in the engine.
    """

    thread_name = "agent-loop-turn-server"

    def __init__(self) -> None:
        self._queue: list[TurnRequest] = []
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
        request = TurnRequest([int(t) for t in prompt_ids], int(max_tokens), sampling=sampling)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"the {type(self).__name__} is closed")
            self._queue.append(request)
            self._cond.notify_all()
        return await asyncio.wrap_future(request.future)

    def close(self) -> None:
        """Stop the serving thread; requests still queued (or in flight) fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

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


class RequestBatcher(TurnServer):
    """Batches requests from any thread's event loop onto ``generate_batch`` (an engine's ``generate_sequences``).

    Args:
        generate_batch: prompts DataProto -> rollout DataProto (``responses``, ``response_mask``
            ``[n, response_len]``, optionally ``rollout_log_probs``).
        meta_info: the generation call's meta (sampling settings, ``eos_token_id``, ``pad_token_id``, seed).
        batch_wait_s: longest wait for more requests once one is queued.
    """

    thread_name = "agent-loop-batcher"

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
    def _take_batch(self) -> list[TurnRequest] | None:
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
            groups: dict[TurnSampling, list[TurnRequest]] = {}
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

    def _run(self, batch: list[TurnRequest]) -> list[TokenOutput]:
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, request in enumerate(batch):
            input_ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids, dtype=torch.long)
            attention_mask[i, width - len(request.prompt_ids) :] = 1
        sampling = batch[0].sampling
        meta = {**sampling.meta(self.meta_info), "response_length": max(r.max_tokens for r in batch)}
        meta[TURN_META_KEY] = True
        if self.meta_info.get("seed") is not None:
            meta["seed"] = int(self.meta_info["seed"]) + 7919 * len(self.batch_sizes)
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
