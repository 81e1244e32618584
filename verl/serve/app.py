"""The FastAPI app: ``POST /generate``, OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``,
``GET /v1/models``, ``GET /health`` and ``GET /metrics``.

:func:`create_app` builds the app from a :class:`ServeConfig`; the model and engine load when the app starts
(uvicorn's lifespan) and are released when it stops. Requests are validated here (types, context length, model
name), turned into :class:`~verl.serve.batching.Job` objects and queued on the :class:`~verl.serve.batching.Batcher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from verl.serve.batching import Batcher, Completion, Job
from verl.serve.config import ServeConfig
from verl.serve.engine import ModelSource
from verl.serve.metrics import ServeMetrics
from verl.serve.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    ServeError,
    stop_list,
    validation_error_to_serve_error,
)

logger = logging.getLogger(__name__)

_DISCONNECT_POLL_S = 0.5


class _State:
    """What the routes share once the app has started (built by :meth:`start`)."""

    config: ServeConfig
    metrics: ServeMetrics
    source: ModelSource
    tokenizer: Any
    engine: Any
    executor: ThreadPoolExecutor
    batcher: Batcher
    max_context: int
    model_names: set[str]

    @classmethod
    async def start(cls, config: ServeConfig) -> _State:
        """Load the tokenizer and start the engine on its own thread (where every batch will run) and the batcher."""
        from verl.serve.engine import build_engine, resolve_model_source
        from verl.utils.models.loader import load_tokenizer

        self = cls()
        self.config = config
        self.metrics = ServeMetrics()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verl-serve-engine")
        loop = asyncio.get_running_loop()
        batch = 1 if config.no_batching else config.max_batch_size
        try:
            self.source = await loop.run_in_executor(
                self.executor, resolve_model_source, config.model, config.lora, config.served_model_name
            )
            try:
                self.tokenizer = load_tokenizer(self.source.path)
                self.engine = await loop.run_in_executor(
                    self.executor, build_engine, self.source, self.tokenizer, config.engine, config.dtype, batch,
                    config.max_model_len,
                )  # fmt: skip
            except BaseException:
                self.source.close()
                raise
        except BaseException:
            self.executor.shutdown(wait=True)
            raise
        self.max_context = min(config.max_model_len or self.engine.max_context, self.engine.max_context)
        self.model_names = {self.source.name, config.model}
        self.batcher = Batcher(
            self.engine,
            max_batch_size=batch,
            batch_wait_s=0.0 if config.no_batching else config.batch_wait_ms / 1000.0,
            max_queue=config.max_queue,
            metrics=self.metrics,
            executor=self.executor,
        )
        return self

    async def close(self) -> None:
        """Stop the batcher, then close the engine on its thread (after the batch in flight) and free the rest."""
        await self.batcher.close()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, self.engine.close)
        finally:
            await loop.run_in_executor(None, self.executor.shutdown, True)
            self.source.close()

    # ----------------------------------------------------------------------------------------- requests
    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.model_names:
            raise ServeError(
                404, f"model: {model!r} is not served here; available: {self.source.name!r}", "model",
                "model_not_found",
            )  # fmt: skip

    def make_job(
        self,
        prompt_ids: list[int],
        field: str,
        max_new_tokens: int | None,
        max_tokens_field: str,
        temperature: float | None,
        top_p: float | None,
        stop: tuple[str, ...],
        stream: bool,
    ) -> Job:
        """A job for one prompt, checked against the context length; ``field`` names the prompt in errors."""
        n_prompt = len(prompt_ids)
        if n_prompt == 0:
            raise ServeError(400, f"{field}: must not be empty", field, "empty_prompt")
        room = self.max_context - n_prompt
        if room < 1:
            raise ServeError(
                400, f"{field}: {n_prompt} tokens leave no room to generate in the context of {self.max_context}",
                field, "context_length_exceeded",
            )  # fmt: skip
        if max_new_tokens is not None and max_new_tokens > self.config.max_new_tokens:
            raise ServeError(
                400, f"{max_tokens_field}: {max_new_tokens} exceeds this server's limit of "
                f"{self.config.max_new_tokens}", max_tokens_field, "max_tokens_exceeded",
            )  # fmt: skip
        if max_new_tokens is not None and max_new_tokens > room:
            raise ServeError(
                400, f"{max_tokens_field}: {n_prompt} prompt tokens + {max_new_tokens} new tokens exceed the model's "
                f"context of {self.max_context} tokens", max_tokens_field, "context_length_exceeded",
            )  # fmt: skip
        return Job(
            prompt_ids=prompt_ids,
            max_new_tokens=min(max_new_tokens or self.config.max_new_tokens, room),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            decode=self.decode,
            stop=stop,
            stream=stream,
            timeout_s=self.config.request_timeout_s,
        )

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def chat_prompt(self, request: ChatCompletionRequest) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ServeError(400, "messages: the model has no chat template; use /v1/completions", "messages")
        messages = [{"role": m.role, "content": m.text()} for m in request.messages]
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as err:  # a template may reject a role order (e.g. two system messages)
            raise ServeError(400, f"messages: the chat template rejected them: {err}", "messages") from err
        # the template writes the special tokens (BOS) itself
        return self.encode(text, add_special_tokens=False)

    def submit(self, jobs: list[Job]) -> None:
        """Queue all jobs of one request, or none (a full queue cancels the ones already queued)."""
        for i, job in enumerate(jobs):
            try:
                self.batcher.submit(job)
            except ServeError:
                for queued in jobs[:i]:
                    queued.cancel("disconnected")
                raise

    def record(self, endpoint: str, started: float, results: list[Completion]) -> None:
        self.metrics.latency.labels(endpoint).observe(time.monotonic() - started)
        self.metrics.prompt_tokens.inc(sum(r.prompt_tokens for r in results))
        self.metrics.generated_tokens.inc(sum(r.completion_tokens for r in results))


class _CountRequests:
    """ASGI middleware counting answered requests by path and status (``verl_serve_requests_total``).

    Plain ASGI rather than ``@app.middleware("http")``: that wrapper hides client disconnects from the endpoints,
    which poll ``request.is_disconnected()`` to cancel abandoned jobs.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in ("/metrics", "/health"):
            await self.app(scope, receive, send)
            return

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state = getattr(scope["app"].state, "serve", None)
                if state is not None:
                    state.metrics.requests.labels(path, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)


def _usage(results: list[Completion]) -> dict[str, int]:
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(r.completion_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


def create_app(config: ServeConfig) -> FastAPI:
    """The FastAPI app serving ``config.model``; the engine starts with the app (lifespan) and stops with it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await _State.start(config)
        state.batcher.start()
        app.state.serve = state
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title="verl inference service", lifespan=lifespan)

    def state_of(request: Request) -> _State:
        return request.app.state.serve

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, err: ServeError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        serve_err = validation_error_to_serve_error(list(err.errors()))
        return JSONResponse(serve_err.body(), status_code=serve_err.status)

    app.add_middleware(_CountRequests)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        state = state_of(request)
        return {
            "status": "ok",
            "model": state.source.name,
            "engine": state.engine.name,
            "max_batch_size": state.batcher.max_batch_size,
            "queue_depth": state.batcher.queue_depth,
            "running": state.batcher.running,
            "max_context": state.max_context,
        }

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        name = state_of(request).source.name
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "verl"}]}

    @app.post("/generate")
    async def generate(body: GenerateRequest, request: Request) -> Any:
        state, started = state_of(request), time.monotonic()
        job = state.make_job(
            state.encode(body.prompt), "prompt", body.max_new_tokens, "max_new_tokens", body.temperature,
            body.top_p, stop_list(body.stop), body.stream,
        )  # fmt: skip
        state.submit([job])
        if body.stream:

            async def events() -> AsyncIterator[str]:
                async for piece in job.deltas():
                    yield _sse({"response": piece})
                result = await job.result()
                state.record("/generate", started, [result])
                yield _sse({"response": "", "finish_reason": result.finish_reason, "usage": _usage([result])})
                yield _sse("[DONE]")

            return _streaming(events(), job)
        (result,) = await _all([job], request)
        state.record("/generate", started, [result])
        return {"response": result.text, "finish_reason": result.finish_reason, "usage": _usage([result])}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        state, started = state_of(request), time.monotonic()
        state.check_model(body.model)
        body.check_unsupported()
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        stop = stop_list(body.stop)
        jobs = [
            state.make_job(
                state.encode(p),
                "prompt" if len(prompts) == 1 else f"prompt[{i}]",
                body.max_tokens,
                "max_tokens",
                body.temperature,
                body.top_p,
                stop,
                body.stream,
            )  # fmt: skip
            for i, p in enumerate(prompts)
            for _ in range(body.n)
        ]
        if body.stream and len(jobs) != 1:
            raise ServeError(400, "prompt: streaming takes a single prompt", "prompt", "unsupported_parameter")
        state.submit(jobs)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": state.source.name}
        if body.stream:
            job = jobs[0]

            async def events() -> AsyncIterator[str]:
                chunk = {**head, "object": "text_completion"}
                async for piece in job.deltas():
                    yield _sse({**chunk, "choices": [{"index": 0, "text": piece, "finish_reason": None}]})
                result = await job.result()
                state.record("/v1/completions", started, [result])
                final = {"index": 0, "text": "", "finish_reason": result.finish_reason}
                yield _sse({**chunk, "choices": [final], "usage": _usage([result])})
                yield _sse("[DONE]")

            return _streaming(events(), job)
        results = await _all(jobs, request)
        state.record("/v1/completions", started, results)
        choices = [
            {"index": i, "text": r.text, "finish_reason": r.finish_reason, "logprobs": None}
            for i, r in enumerate(results)
        ]
        return {**head, "object": "text_completion", "choices": choices, "usage": _usage(results)}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
        state, started = state_of(request), time.monotonic()
        state.check_model(body.model)
        body.check_unsupported()
        prompt_ids = state.chat_prompt(body)
        field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
        max_new = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        stop = stop_list(body.stop)
        jobs = [
            state.make_job(prompt_ids, "messages", max_new, field, body.temperature, body.top_p, stop, body.stream)
            for _ in range(body.n)
        ]
        state.submit(jobs)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": state.source.name}
        if body.stream:
            job = jobs[0]

            async def events() -> AsyncIterator[str]:
                chunk = {**head, "object": "chat.completion.chunk"}
                first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                yield _sse({**chunk, "choices": [first]})
                async for piece in job.deltas():
                    yield _sse({**chunk, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
                result = await job.result()
                state.record("/v1/chat/completions", started, [result])
                final = {"index": 0, "delta": {}, "finish_reason": result.finish_reason}
                yield _sse({**chunk, "choices": [final], "usage": _usage([result])})
                yield _sse("[DONE]")

            return _streaming(events(), job)
        results = await _all(jobs, request)
        state.record("/v1/chat/completions", started, results)
        choices = [
            {"index": i, "message": {"role": "assistant", "content": r.text}, "finish_reason": r.finish_reason}
            for i, r in enumerate(results)
        ]
        return {**head, "object": "chat.completion", "choices": choices, "usage": _usage(results)}

    return app


async def _all(jobs: list[Job], request: Request | None = None) -> list[Completion]:
    """Every job's result; if one fails, or the client goes away (checked every 0.5 s), the others are cancelled.

    Without the check, a client that gave up would leave its job occupying a batch row until its time limit.
    """
    waiter = asyncio.ensure_future(asyncio.gather(*(job.result() for job in jobs)))
    waiter.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, even when nobody awaits it
    try:
        while True:
            done, _ = await asyncio.wait({waiter}, timeout=_DISCONNECT_POLL_S)
            if done:
                return list(waiter.result())
            if request is not None and await request.is_disconnected():
                raise ServeError(499, "the client closed the request", None, "cancelled", "cancelled")
    except BaseException:
        for job in jobs:
            job.cancel("disconnected")
        waiter.cancel()
        raise


def _streaming(events: AsyncIterator[str], job: Job) -> StreamingResponse:
    """An SSE response of ``events``; an error mid-stream becomes an ``error`` event, a client that disconnects
    cancels the job."""

    async def guarded() -> AsyncIterator[str]:
        try:
            async for event in events:
                yield event
        except ServeError as err:
            yield _sse(err.body())
        finally:
            job.cancel("disconnected")

    return StreamingResponse(guarded(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
