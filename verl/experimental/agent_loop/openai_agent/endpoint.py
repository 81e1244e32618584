"""One trajectory's OpenAI-compatible endpoint: ``/v1/chat/completions``, ``/v1/completions`` (whole answers or
server-sent events with ``stream: true``, token by token), ``/v1/models``, answered by the rollout's request server
and recorded token for token (:class:`~verl.experimental.agent_loop.openai_agent.trajectory.TrajectoryRecorder`).

Requests are validated with ``verl serve``'s schemas (:mod:`verl.experimental.agent_loop.openai_schemas`) and tool
calls rendered and parsed with its code (:mod:`verl.experimental.agent_loop.openai_tool_calls`, the rollout's
``multi_turn.format``). Supported: ``tools``/``tool_choice`` (auto, none; ``required`` is parsed as auto, not
enforced: an answer without a tool call is returned as text and counted, :attr:`TrajectoryEndpoint.tool_choice_unmet`
-- smolagents' ``ToolCallingAgent`` sends ``required`` and parses such text itself), ``n`` (each choice its own engine
request; not with ``stream``), ``stop`` (strings: the engine request ends at the token that completes one, and the
recorded ids end there too; one-token stop strings are also the engine's stop ids), ``max_tokens``/
``max_completion_tokens``, ``temperature``/``top_p`` (``agent.openai.request_sampling``), ``logprobs``,
``stream_options.include_usage``.

Streams (:mod:`.streaming`): every engine request carries an ``on_token`` callback of the request server, so with
``stream: true`` each sampled id reaches the event loop as it is decoded and leaves as a chunk once its text can no
longer change: whole UTF-8 characters, no part of a stop string, no tool-call text (from the format's opening marker
on, the calls go out as one ``tool_calls`` delta when the answer is complete); ids that arrived while the last chunk
was written go out together. The last chunks carry the rest of the text, ``finish_reason`` with the ``logprobs`` of
the answer (the values arrive with the engine's answer), a ``usage`` chunk when asked, then ``[DONE]``. The answer
is recorded exactly as a plain one (same ids, log-probs, masks) before its last chunk goes out; a stream holds the
trajectory's lock until then. A client that closes a stream early has the engine request cancelled and fails the
trajectory (``stream_closed``).

Every request needs ``Authorization: Bearer <the trajectory's key>``; a trajectory's requests are served one at a
time (their order defines the conversation). Errors answer with OpenAI's error body; the first malformed request,
refused budget or wrong key marks the trajectory failed (:attr:`TrajectoryEndpoint.failure`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from verl.experimental.agent_loop.openai_agent.http import HttpRequest, HttpResponse
from verl.experimental.agent_loop.openai_agent.streaming import ContentHold, TextDeltas, TokenFeed
from verl.experimental.agent_loop.openai_agent.trajectory import BudgetExceeded, Choice, TrajectoryRecorder, message_key
from verl.experimental.agent_loop.openai_schemas import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    ImagePart,
    ServeError,
    stop_list,
    validation_error_to_serve_error,
)
from verl.experimental.agent_loop.openai_tool_calls import assistant_message, template_messages, tool_calls_active
from verl.workers.rollout.request_server import TokenOutput, TurnSampling

logger = logging.getLogger(__name__)

__all__ = ["TrajectoryEndpoint"]


def _stop_cut(tokenizer: Any, ids: list[int], stops: tuple[str, ...]) -> tuple[list[int], int | None]:
    """``(ids through the token that completes the first stop string, its position in the decoded text)``, or
    ``(ids, None)`` when no stop string occurs."""
    if not stops or not any(s in tokenizer.decode(ids, skip_special_tokens=True) for s in stops):
        return ids, None
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return ids[:k], min(hits)
    return ids, None


class TrajectoryEndpoint:
    """The request handler of one trajectory (see the module docstring).

    Args:
        server: the rollout's turn server (``await server.generate(ids, max_tokens, **sampling)``).
        tokenizer: the model's tokenizer.
        parser: the tool parser of ``rollout.multi_turn.format``.
        recorder: where the trajectory's tokens go.
        api_key: the key the agent must send.
        model_name: the id ``/v1/models`` lists.
        max_requests: generation requests allowed.
        request_sampling: honour a request's ``temperature``/``top_p``.
        template_kwargs: extra chat-template arguments (``data.apply_chat_template_kwargs``).
    """

    def __init__(
        self,
        server: Any,
        tokenizer: Any,
        parser: Any,
        recorder: TrajectoryRecorder,
        api_key: str,
        model_name: str,
        max_requests: int,
        request_sampling: bool,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})  # data.apply_chat_template_kwargs
        self.parser = parser
        self.recorder = recorder
        self.api_key = api_key
        self.model_name = model_name
        self.max_requests = int(max_requests)
        self.request_sampling = bool(request_sampling)
        self.requests = 0
        self.bad_requests = 0
        self.sampling_overrides = 0
        self.tool_choice_unmet = 0  # answers to tool_choice="required" that called no tool
        self.tool_calls = 0  # tool calls returned in message.tool_calls (all choices)
        self.generate_s = 0.0
        self.failure: tuple[str, str] | None = None  # (reason, detail) of the first failure
        self.closed = False
        self._lock = asyncio.Lock()
        self._ticket: _Ticket | None = None  # the request being served holds the lock through it

    def fail(self, reason: str, detail: str) -> None:
        """Mark the trajectory failed (the first failure is kept)."""
        if self.failure is None:
            self.failure = (reason, detail)

    # ----------------------------------------------------------------------------------------------- routing
    async def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._route(request)
        except ServeError as e:
            self.bad_requests += 1
            # a generation request the agent got wrong fails the trajectory; a wrong key (not this agent's
            # request), a probe of another route or a request after the end does not
            generating = request.path.rstrip("/").endswith("completions")
            if generating and e.status not in (401, 404, 405) and e.code != "closed":
                reason = e.code if e.code in _BUDGET_CODES else "bad_request"
                self.fail(reason, f"{request.method} {request.path}: {e.message}")
            return HttpResponse.json(e.body(), 400 if e.status == 422 else e.status)

    async def _route(self, request: HttpRequest) -> HttpResponse:
        if request.headers.get("authorization", "") != f"Bearer {self.api_key}":
            raise ServeError(401, "missing or wrong API key for this trajectory", None, "invalid_api_key")
        if self.closed:
            raise ServeError(400, "the trajectory is over (timed out or finished); no more requests", None, "closed")
        path = request.path.rstrip("/")
        path = path[len("/v1") :] if path.startswith("/v1/") else path
        if path == "/models" and request.method == "GET":
            return HttpResponse.json({"object": "list", "data": [self._model()]})
        if path in ("/chat/completions", "/completions"):
            if request.method != "POST":
                raise ServeError(405, f"{request.path}: use POST")
            schema = ChatCompletionRequest if path == "/chat/completions" else CompletionRequest
            try:
                payload = json.loads(request.body or b"null")
                body = schema.model_validate(payload)
            except json.JSONDecodeError as e:
                raise ServeError(400, f"body: not valid JSON: {e.msg}", "body", "json_invalid") from e
            except ValidationError as e:
                raise validation_error_to_serve_error(e.errors()) from e
            want_logprobs = _logprobs_wanted(path, payload, body)
            include_usage = _usage_wanted(payload, body)
            body = body.model_copy(update={"logprobs": None})  # answered here, not refused by the shared check
            body.check_unsupported()
            await self._lock.acquire()  # a streamed answer holds it until it is recorded (_streamed)
            ticket = self._ticket = _Ticket(self._lock)
            try:
                if self.requests >= self.max_requests:
                    raise ServeError(
                        400, f"over agent.openai.max_requests={self.max_requests} requests", None, "request_budget"
                    )
                self.requests += 1
                if path == "/chat/completions":
                    response = await self._chat(body, want_logprobs, include_usage)
                else:
                    response = await self._completion(body, want_logprobs, include_usage)
            except BaseException:
                ticket.release()
                raise
            if response.stream is None:
                ticket.release()
            return response
        raise ServeError(404, f"no route {request.method} {request.path}", None, "not_found")

    def _model(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": 0, "owned_by": "verl-rollout"}

    # ---------------------------------------------------------------------------------------------- generation
    def _place(
        self, kind: str, tools: list | None, history: Any, full_ids: Any, body: Any
    ) -> tuple[list[int], int, tuple[str, ...], TurnSampling]:
        """Place the request in the trajectory: ``(context ids, max tokens, stop strings, sampling)``."""
        try:
            context, budget = self.recorder.prepare(kind, tools, history, full_ids)
        except BudgetExceeded as e:
            raise ServeError(400, e.message, "messages", "context_length_exceeded") from e
        if budget < 1:
            raise ServeError(400, "no response tokens left", "max_tokens", "context_length_exceeded")
        wanted = body.max_completion_tokens if kind == "chat" and body.max_completion_tokens else body.max_tokens
        max_tokens = min(int(wanted or budget), budget)
        stops = stop_list(body.stop)
        stop_ids = []
        for s in stops:
            ids = self.tokenizer.encode(s, add_special_tokens=False)
            if len(ids) == 1:
                stop_ids.append(int(ids[0]))
        own: dict[str, Any] = {}
        if self.request_sampling:
            own = {k: getattr(body, k) for k in ("temperature", "top_p") if getattr(body, k) is not None}
            self.sampling_overrides += bool(own)
        sampling = TurnSampling(own.get("temperature"), own.get("top_p"), None, tuple(stop_ids), None)
        return context, max_tokens, stops, sampling

    def _feed(self, placed: tuple[list[int], int, tuple[str, ...], TurnSampling], stream: bool) -> TokenFeed:
        context, max_tokens, stops, sampling = placed
        loop = asyncio.get_running_loop()
        return TokenFeed(self.server, context, max_tokens, sampling, self.tokenizer, stops, loop, stream)

    async def _generate(
        self, placed: tuple[list[int], int, tuple[str, ...], TurnSampling], n: int
    ) -> list[tuple[Choice, str, str, int]]:
        """Sample ``n`` answers of a placed request; ``[(choice, text, finish_reason, shown)]`` (:meth:`_answer`)."""
        start = time.perf_counter()
        feeds = [self._feed(placed, stream=False) for _ in range(n)]
        try:
            outs = await asyncio.gather(*(f.result() for f in feeds))
        except BaseException:  # the agent went away (time limit) or the engine failed: stop the others
            for f in feeds:
                f.cancel()
            raise
        finally:
            self.generate_s += time.perf_counter() - start
        return [self._answer(out, placed[2]) for out in outs]

    def _answer(self, out: TokenOutput, stops: tuple[str, ...]) -> tuple[Choice, str, str, int]:
        """``(choice, text, finish_reason, shown)`` of one engine answer: the text before the stop, and how many of
        the choice's ids it comes from (those ``logprobs`` reports)."""
        ids, at = _stop_cut(self.tokenizer, list(out.token_ids), stops)
        log_probs = None if out.log_probs is None else list(out.log_probs[: len(ids)])
        ended = out.stop_reason == "eos" and len(ids) == len(out.token_ids)
        text_ids = ids[:-1] if ended else ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        one_token_stop = at is None and out.stop_reason == "stop"
        if at is not None:
            text, finish = text[:at], "stop"
        else:
            finish = "length" if out.stop_reason == "length" else "stop"
            if one_token_stop:  # a one-token stop string ended it: not part of the text
                text = self.tokenizer.decode(ids[:-1], skip_special_tokens=True)
        # the ids behind the returned text: without the closing EOS or one-token stop (not part of the text)
        shown = len(ids) - 1 if at is None and (ended or one_token_stop) else len(ids)
        return Choice(ids, log_probs, ended, ""), text, finish, shown

    async def _chat(self, body: ChatCompletionRequest, want_logprobs: bool, include_usage: bool) -> HttpResponse:
        for i, m in enumerate(body.messages):
            if not isinstance(m.content, str) and any(isinstance(p, ImagePart) for p in m.content):
                raise ServeError(400, f"messages[{i}].content: images are not supported in rollouts", "messages")
        required = body.tool_choice == "required" and bool(body.tools)
        if required:  # decoding is not constrained: parsed as "auto", an answer with no call is counted
            body = body.model_copy(update={"tool_choice": "auto"})
        messages, schemas = template_messages(body)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ServeError(400, "messages: the model has no chat template; use /v1/completions", "messages")

        def full_ids() -> list[int]:
            text = self.tokenizer.apply_chat_template(
                messages, tools=schemas or None, add_generation_prompt=True, tokenize=False, **self.template_kwargs
            )
            return self.tokenizer.encode(text, add_special_tokens=False)

        try:
            placed = self._place("chat", schemas, messages, full_ids, body)
        except ServeError:
            raise
        except Exception as e:  # a chat template may reject a message order
            raise ServeError(400, f"messages: the chat template rejected them: {e}", "messages") from e
        if body.stream:
            feed = self._feed(placed, stream=True)
            ticket = self._ticket
            events = self._chat_stream(body, feed, placed[2], want_logprobs, include_usage, required, ticket)
            return self._streamed(feed, events, ticket)
        results = await self._generate(placed, body.n)
        _check_logprobs_recorded(want_logprobs, results)
        choices = []
        for k, (choice, text, finish, shown) in enumerate(results):
            message, finish = assistant_message(body, text, finish, self.parser)
            self._count_calls(required, message)
            choice.returned = _returned_key(message)
            logprobs = _chat_logprobs(self.tokenizer, choice, shown) if want_logprobs else None
            choices.append({"index": k, "message": message, "finish_reason": finish, "logprobs": logprobs})
        self.recorder.record([r[0] for r in results])
        return HttpResponse.json(self._envelope("chat.completion", "chatcmpl", choices, self._usage(results)))

    async def _completion(self, body: CompletionRequest, want_logprobs: bool, include_usage: bool) -> HttpResponse:
        if not isinstance(body.prompt, str):
            raise ServeError(400, "prompt: one string per request in rollouts (use n for several choices)", "prompt")
        prompt = body.prompt
        full_ids = lambda: self.tokenizer.encode(prompt, add_special_tokens=True)  # noqa: E731
        placed = self._place("completion", None, prompt, full_ids, body)
        if body.stream:
            feed = self._feed(placed, stream=True)
            ticket = self._ticket
            events = self._completion_stream(feed, placed[2], want_logprobs, include_usage, ticket)
            return self._streamed(feed, events, ticket)
        results = await self._generate(placed, body.n)
        _check_logprobs_recorded(want_logprobs, results)
        for choice, text, _, _ in results:
            choice.returned = text
        self.recorder.record([r[0] for r in results])
        choices = [
            {
                "index": k,
                "text": text,
                "finish_reason": finish,
                "logprobs": _completion_logprobs(self.tokenizer, choice, shown) if want_logprobs else None,
            }
            for k, (choice, text, finish, shown) in enumerate(results)
        ]
        return HttpResponse.json(self._envelope("text_completion", "cmpl", choices, self._usage(results)))

    def _count_calls(self, required: bool, message: dict[str, Any]) -> None:
        self.tool_choice_unmet += required and not message.get("tool_calls")
        self.tool_calls += len(message.get("tool_calls") or [])

    # ------------------------------------------------------------------------------------------------ streams
    def _streamed(self, feed: TokenFeed, events: AsyncIterator[bytes], ticket: _Ticket) -> HttpResponse:
        """The SSE response of a token stream; it holds the trajectory's lock (``ticket``) until the answer is
        recorded or the stream is closed (a client that went away: the engine request is cancelled, the trajectory
        failed)."""

        def closed() -> None:
            if not ticket.recorded:  # closed before the answer was recorded
                feed.cancel()
                if not self.closed:  # the trajectory's end (its agent timed out) is the cause otherwise
                    self.fail("stream_closed", "the client closed a stream before its answer ended (cancelled)")
            ticket.release()

        return HttpResponse(200, content_type="text/event-stream", stream=_ClosingStream(events, closed))

    async def _streamed_answer(self, feed: TokenFeed, stops: tuple[str, ...]) -> tuple[Choice, str, str, int]:
        try:
            out = await feed.result()
        finally:  # from the request's submission: the stream was read meanwhile
            self.generate_s += time.perf_counter() - feed.submitted_at
        return self._answer(out, stops)

    def _chunk(self, base: dict[str, Any], piece: dict[str, Any], include_usage: bool) -> bytes:
        out = {**base, "choices": [{"index": 0, **piece}]}
        if include_usage:
            out["usage"] = None
        return self._event(out)

    async def _chat_stream(
        self, body: ChatCompletionRequest, feed: TokenFeed, stops: tuple[str, ...], want_logprobs: bool,
        include_usage: bool, required: bool, ticket: _Ticket,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        """The chunks of one streamed chat answer (module docstring of :mod:`.streaming`)."""
        base = self._envelope("chat.completion.chunk", "chatcmpl", [], None)

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
            return self._chunk(base, {"delta": delta, "logprobs": logprobs, "finish_reason": finish}, include_usage)

        yield chunk({"role": "assistant", "content": ""})
        text = TextDeltas(self.tokenizer, stops)
        hold = ContentHold(self.parser.call_start) if tool_calls_active(body) else None
        async for tokens in feed.tokens():
            delta = text.add(tokens)
            content = hold.feed(delta) if hold is not None and delta else delta
            if content:
                yield chunk({"content": content})
        try:
            choice, final, finish, shown = await self._streamed_answer(feed, stops)
            _check_logprobs_recorded(want_logprobs, [(choice, final, finish, shown)])
        except ServeError as e:
            self.fail("bad_request", f"POST /v1/chat/completions: {e.message}")
            yield self._event(e.body())
            return
        except Exception as e:  # noqa: BLE001  (the engine failed: an error event ends the stream, as a 500 would)
            logger.exception("openai endpoint: streamed POST /v1/chat/completions failed")
            self.fail("engine_error", f"POST /v1/chat/completions: {e!r}")
            yield self._event({"error": {"message": f"internal error: {e!r}", "type": "server_error"}})
            return
        message, finish = assistant_message(body, final, finish, self.parser)
        rest = text.finish(final)
        deltas, streamed = ([{"content": rest}] if rest else []), message
        if hold is not None:
            hold.feed(rest)
            sent, target = hold.content, message.get("content") or ""
            if message.get("tool_calls"):
                more = target[len(sent) :] if target.startswith(sent) else ""
                calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
                deltas = ([{"content": more}] if more else []) + [{"tool_calls": calls}]
                streamed = {**message, "content": (sent + more) or None}  # what the client assembles
            else:
                deltas = [{"content": target[len(sent) :]}] if len(target) > len(sent) else []
        self._count_calls(required, message)
        choice.returned = _returned_key(streamed)
        self.recorder.record([choice])
        usage = self._usage([(choice, final, finish, shown)])
        ticket.recorded = True
        ticket.release()
        for delta in deltas:
            yield chunk(delta)
        yield chunk({}, finish, _chat_logprobs(self.tokenizer, choice, shown) if want_logprobs else None)
        if include_usage:
            yield self._event({**base, "choices": [], "usage": usage})
        yield self._event("[DONE]")

    async def _completion_stream(
        self, feed: TokenFeed, stops: tuple[str, ...], want_logprobs: bool, include_usage: bool, ticket: _Ticket
    ) -> AsyncIterator[bytes]:
        """The chunks of one streamed completion."""
        base = self._envelope("text_completion", "cmpl", [], None)

        def chunk(piece: str, finish: str | None = None, logprobs: Any = None) -> bytes:
            return self._chunk(base, {"text": piece, "logprobs": logprobs, "finish_reason": finish}, include_usage)

        text = TextDeltas(self.tokenizer, stops)
        async for tokens in feed.tokens():
            delta = text.add(tokens)
            if delta:
                yield chunk(delta)
        try:
            choice, final, finish, shown = await self._streamed_answer(feed, stops)
            _check_logprobs_recorded(want_logprobs, [(choice, final, finish, shown)])
        except ServeError as e:
            self.fail("bad_request", f"POST /v1/completions: {e.message}")
            yield self._event(e.body())
            return
        except Exception as e:  # noqa: BLE001  (the engine failed: an error event ends the stream, as a 500 would)
            logger.exception("openai endpoint: streamed POST /v1/completions failed")
            self.fail("engine_error", f"POST /v1/completions: {e!r}")
            yield self._event({"error": {"message": f"internal error: {e!r}", "type": "server_error"}})
            return
        choice.returned = final
        self.recorder.record([choice])
        usage = self._usage([(choice, final, finish, shown)])
        ticket.recorded = True
        ticket.release()
        rest = text.finish(final)
        if rest:
            yield chunk(rest)
        yield chunk("", finish, _completion_logprobs(self.tokenizer, choice, shown) if want_logprobs else None)
        if include_usage:
            yield self._event({**base, "choices": [], "usage": usage})
        yield self._event("[DONE]")

    # ------------------------------------------------------------------------------------------------ shapes
    def _usage(self, results: list[tuple[Choice, str, str, int]]) -> dict[str, int]:
        seg = self.recorder.current
        prompt = len(seg.prompt_ids) + len(seg.response_ids) if seg is not None else 0
        completion = sum(len(r[0].ids) for r in results)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _envelope(self, obj: str, prefix: str, choices: list, usage: dict | None) -> dict[str, Any]:
        out = {"id": f"{prefix}-{uuid.uuid4().hex[:24]}", "object": obj, "created": int(time.time()),
               "model": self.model_name, "choices": choices}  # fmt: skip
        if usage is not None:
            out["usage"] = usage
        return out

    @staticmethod
    def _event(payload: dict[str, Any] | str) -> bytes:
        data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        return f"data: {data}\n\n".encode()


_BUDGET_CODES = ("request_budget", "context_length_exceeded")


class _Ticket:
    """One request's hold on the trajectory's lock: released once (a streamed answer releases it when recorded, its
    stream's clean-up in any case), never releasing a later request's hold."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self.lock = lock
        self.held = True
        self.recorded = False

    def release(self) -> None:
        """Let the trajectory's next request be served (once)."""
        if self.held:
            self.held = False
            self.lock.release()


class _ClosingStream:
    """A response stream whose ``aclose`` (the HTTP server calls it however the stream ends) also runs
    ``on_close``: the endpoint's clean-up of a streamed answer."""

    def __init__(self, events: AsyncIterator[bytes], on_close: Any) -> None:
        self.events = events
        self.on_close = on_close

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.events

    async def aclose(self) -> None:
        """Close the events' generator, then clean up (once)."""
        try:
            await self.events.aclose()
        finally:
            on_close, self.on_close = self.on_close, None
            if on_close is not None:
                on_close()


def _returned_key(message: dict[str, Any]) -> str:
    """The key (:func:`message_key`) of an assistant message as the agent will send it back."""
    return message_key(template_messages(ChatCompletionRequest(messages=[ChatMessage.model_validate(message)]))[0][0])


def _usage_wanted(payload: Any, body: Any) -> bool:
    """``stream_options.include_usage`` (a last chunk with ``usage`` and no choices); only with ``stream: true``."""
    options = payload.get("stream_options") if isinstance(payload, dict) else None
    if options is None:
        return False
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise ServeError(400, f"stream_options: {options!r}: expected {{\"include_usage\": true|false}}",
                         "stream_options")  # fmt: skip
    if not body.stream:
        raise ServeError(400, "stream_options: only allowed with stream: true", "stream_options")
    return bool(options.get("include_usage", False))


def _logprobs_wanted(path: str, payload: Any, body: Any) -> bool:
    """Whether the request asks for the sampled tokens' log-probs. Chat: ``logprobs: true`` (``top_logprobs`` 0 or
    unset); completions: ``logprobs: 0``. Alternatives (``top_logprobs`` > 0, completions' ``logprobs`` > 0) are
    refused: the rollout records the sampled token's log-prob only."""
    if path == "/chat/completions":
        top = payload.get("top_logprobs") if isinstance(payload, dict) else None
        if top not in (None, 0) or isinstance(top, bool):
            raise ServeError(400, f"top_logprobs: {top!r}: the rollout records only the sampled token's log-prob; "
                             "use logprobs: true with top_logprobs 0 or unset", "top_logprobs",
                             "unsupported_parameter")  # fmt: skip
        if body.logprobs not in (None, True, False):
            raise ServeError(400, f"logprobs: {body.logprobs!r}: a boolean", "logprobs")
        if top == 0 and not body.logprobs:
            raise ServeError(400, "top_logprobs: set without logprobs: true", "top_logprobs")
        return bool(body.logprobs)
    if body.logprobs is None:
        return False
    if isinstance(body.logprobs, bool) or not isinstance(body.logprobs, int) or body.logprobs != 0:
        raise ServeError(400, f"logprobs: {body.logprobs!r}: only 0 (the sampled tokens' log-probs, no alternatives) "
                         "is served: the rollout records only the sampled token's log-prob", "logprobs",
                         "unsupported_parameter")  # fmt: skip
    return True


def _check_logprobs_recorded(want: bool, results: list[tuple[Choice, str, str, int]]) -> None:
    if want and any(r[0].log_probs is None for r in results):
        raise ServeError(400, "logprobs: this rollout records no log-probs (actor_rollout_ref.rollout."
                         "calculate_log_probs=false)", "logprobs", "unsupported_parameter")  # fmt: skip


def _token_entries(tokenizer: Any, choice: Choice, shown: int) -> list[tuple[str, float]]:
    """``[(token text, log-prob)]`` of the first ``shown`` sampled ids, log-probs as the engine recorded them."""
    return [(tokenizer.decode([i]), float(lp)) for i, lp in zip(choice.ids[:shown], choice.log_probs[:shown])]


def _chat_logprobs(tokenizer: Any, choice: Choice, shown: int) -> dict[str, Any]:
    """OpenAI's chat ``choices[].logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs: []}], ...}``."""
    content = [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
               for t, lp in _token_entries(tokenizer, choice, shown)]  # fmt: skip
    return {"content": content, "refusal": None}


def _completion_logprobs(tokenizer: Any, choice: Choice, shown: int) -> dict[str, Any]:
    """OpenAI's legacy completions ``choices[].logprobs``: ``tokens``, ``token_logprobs``, ``text_offset``
    (``top_logprobs`` null: no alternatives are recorded)."""
    entries = _token_entries(tokenizer, choice, shown)
    offsets, at = [], 0
    for t, _ in entries:
        offsets.append(at)
        at += len(t)
    return {"tokens": [t for t, _ in entries], "token_logprobs": [lp for _, lp in entries], "top_logprobs": None,
            "text_offset": offsets}  # fmt: skip
