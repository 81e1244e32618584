"""Token requests (the agent loops' turns) served by vLLM's own scheduler, request by request (continuous batching).

A :class:`~verl.workers.rollout.request_server.BatchingRequestServer` gathers the requests waiting, runs them as
one ``generate`` call and takes the next batch only when the whole call is done: a trajectory whose tool answered
one step after the call began waits for the longest response in it. Here one thread owns vLLM's ``LLMEngine`` and
drives it a step at a time (``add_request`` / ``step``, the loop vLLM's ``LLM.generate`` runs internally): a
request that arrives is added before the next step and joins the running batch (vLLM's scheduler prefills it next to
the others' decode steps), and a finished request is answered at once, so its trajectory runs its tools while the
others still decode. Each request has its own token budget (``max_tokens``), not the batch's largest.

Sampling settings are the rollout's (``resolve_sampling`` of the batch's ``meta_info``: ``validate`` picks
``val_kwargs``) with each request's own over them (``TurnSampling``: temperature, top-p/k, stop ids, log-probs).
A request with an ``on_token`` callback (:class:`~verl.workers.rollout.request_server.TokenRequest`) gets its
tokens after every step; one that its callback ends, or that is cancelled, is aborted in the engine and answered
with what it has. ``max_batch_size`` bounds the requests in flight (the others wait in the queue); ``batch_wait_s``
holds the first request that finds the engine idle that long for others (0 for the agent loop: its turns never
wait). This is the one ``add_request`` / ``step`` / ``abort_request`` loop of the package: ``verl serve`` runs on it
too.

A per-request seed is not set (vLLM's CPU sampler fails on it); the engine's seed holds.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import Any

from verl.workers.rollout.base import resolve_sampling, resolve_special_ids
from verl.workers.rollout.request_server import RequestServer, TokenRequest, TurnSampling

__all__ = ["VLLMRequestServer"]

_SERVER_IDS = itertools.count()


class VLLMRequestServer(RequestServer):
    """A :class:`~verl.workers.rollout.request_server.RequestServer` over a :class:`vLLMRollout`'s engine for one
    batch of callers (built by ``vLLMRollout.request_server()``, closed by its caller when the batch is done).
    Requests are never held back to wait for others, so trajectories are not counted.

    Attributes:
        batch_sizes: requests in flight at each engine step (the decode batch vLLM ran).
        engine_s: seconds spent in engine steps.
    """

    thread_name = "vllm-request-server"

    def __init__(self, rollout: Any, meta_info: dict[str, Any], batch_wait_s: float = 0.0, **options: Any) -> None:
        self.rollout = rollout
        self.engine = rollout.llm.llm_engine
        self.settings = resolve_sampling(rollout.config, meta_info)
        eos_ids, _ = resolve_special_ids(meta_info, rollout.tokenizer, fallback_eos=rollout._model_eos)
        self.eos_ids = [int(e) for e in eos_ids]
        self._prefix = f"token-request-{next(_SERVER_IDS)}-"
        self._count = itertools.count()
        self._in_flight: dict[str, TokenRequest] = {}
        self._last: dict[str, Any] = {}  # each read request's last engine output (its log-probs when cancelled)
        self.batch_wait_s = float(batch_wait_s)
        super().__init__(**options)  # max_batch_size, on_start, on_batch

    @property
    def running(self) -> int:
        """Requests in the engine."""
        return len(self._in_flight)

    # ----------------------------------------------------------------------------------------- engine side
    def _params(self, max_tokens: int, sampling: TurnSampling) -> Any:
        """vLLM ``SamplingParams`` of one request: the batch's settings with the request's own (TurnSampling)."""
        own = {k: getattr(sampling, k) for k in ("temperature", "top_p", "top_k") if getattr(sampling, k) is not None}
        if sampling.logprobs:
            own["calculate_log_probs"] = True
        settings = dataclasses.replace(
            self.settings, response_length=max_tokens, min_new_tokens=min(self.settings.min_new_tokens, max_tokens),
            **own,
        )  # fmt: skip
        stops = [t for t in sampling.stop_token_ids if t not in self.eos_ids]
        return self.rollout.sampling_params(settings, self.eos_ids + stops)

    def _take_new(self) -> list[TokenRequest] | None:
        """The requests that arrived since the last step (as many as ``max_batch_size`` leaves room for); waits while
        nothing is in flight. None once closed."""
        with self._cond:
            while not self._queue and not self._in_flight and not self._closed:
                self._cond.wait()
            if not self._in_flight and self._queue:  # an idle engine: hold the first request open for others
                deadline = self._queue[0].enqueued_at + self.batch_wait_s
                while not self._closed and len(self._queue) < (self.max_batch_size or float("inf")):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(timeout=left)
            if self._closed:
                return None
            room = len(self._queue) if self.max_batch_size is None else self.max_batch_size - len(self._in_flight)
            new, self._queue = self._queue[: max(0, room)], self._queue[max(0, room) :]
            return new

    def _serve(self) -> None:
        try:
            while (new := self._take_new()) is not None:
                for turn in new:
                    if not turn.future.set_running_or_notify_cancel():  # its trajectory stopped waiting
                        continue
                    if turn.cancelled:
                        turn.end = "cancelled"
                        self._answer(turn)
                        continue
                    request_id = f"{self._prefix}{next(self._count)}"
                    try:
                        if turn.multi_modal_inputs:
                            raise ValueError("the vLLM request server takes token prompts only (no multi_modal_inputs)")
                        self.engine.add_request(request_id, {"prompt_token_ids": turn.prompt_ids}, self._params(
                            turn.max_tokens, turn.sampling))  # fmt: skip
                    except Exception as e:  # noqa: BLE001  (this request's error goes to its trajectory)
                        turn.future.set_exception(e)
                        continue
                    self._started([turn])
                    self._in_flight[request_id] = turn
                if self._in_flight:
                    self._step()
        except BaseException as e:  # noqa: BLE001  (an engine failure ends every waiting trajectory)
            self._fail_all(e)
            return
        self._fail_all(RuntimeError("the vLLM request server was closed"))

    def _step(self) -> None:
        self._batch(len(self._in_flight))
        start = time.perf_counter()
        outputs = self.engine.step()
        self.engine_s += time.perf_counter() - start
        ended: list[str] = []
        for out in outputs:
            turn = self._in_flight.get(out.request_id)
            if turn is None or (not out.finished and turn.on_token is None):  # no one reads its tokens yet
                continue
            completion = out.outputs[0]
            new = [int(t) for t in completion.token_ids][len(turn.token_ids) :]
            done = False
            for j, token in enumerate(new):
                last = out.finished and j == len(new) - 1  # vLLM stops only on the ids it was given (ignore_eos)
                if self._feed(turn, token, last and self._ends(turn, token)):
                    done = True
                    break
            self._last[out.request_id] = completion
            if done or out.finished:
                self._in_flight.pop(out.request_id)
                if not out.finished:
                    ended.append(out.request_id)
                self._answer(turn, self._log_probs(out.request_id, turn))
        for request_id, turn in list(self._in_flight.items()):  # cancelled (a client gone, a time limit)
            if turn.cancelled:
                turn.end = "cancelled"
                self._answer(self._in_flight.pop(request_id), self._log_probs(request_id, turn))
                ended.append(request_id)
        if ended:
            self.engine.abort_request(ended)

    def _log_probs(self, request_id: str, turn: TokenRequest) -> list[float] | None:
        """The log-probs of the tokens ``turn`` was given, from its last engine output (None when not asked for);
        the request's output is forgotten."""
        completion = self._last.pop(request_id, None)
        if completion is None or completion.logprobs is None or turn.sampling.logprobs is False:
            return None
        return [float(step[tok].logprob) for step, tok in zip(completion.logprobs, turn.token_ids)]

    def _ends(self, turn: TokenRequest, token: int) -> bool:
        return token in self.eos_ids or token in turn.sampling.stop_token_ids

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            pending, self._queue = self._queue, []
            self._closed = True
        if self._in_flight:
            try:
                self.engine.abort_request(list(self._in_flight))
            except Exception:  # noqa: BLE001  (the engine may be the thing that failed)
                pass
        for turn in [*pending, *self._in_flight.values()]:
            if not turn.future.done():
                turn.future.set_exception(error)
        self._in_flight.clear()
        self._last.clear()
