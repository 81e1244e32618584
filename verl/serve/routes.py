"""The endpoints of the inference service: ``POST /generate``, OpenAI-compatible ``/v1/completions`` and
``/v1/chat/completions`` (whole answers, or server-sent events with ``stream: true``), ``GET /v1/models``,
``GET /health`` and ``GET /metrics``.

Each generating endpoint turns its request into :class:`~verl.serve.batching.Job` objects (validated by
:class:`~verl.serve.state.ServeState`), queues them, and answers in its API's shape: a whole response once every job
is done (:func:`_all`, which cancels the jobs of a client that went away), or a stream of events
(:func:`_streaming`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from verl.experimental.agent_loop.openai_schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    ServeError,
    stop_list,
)
from verl.experimental.agent_loop.openai_tool_calls import (
    ToolCallStream,
    assistant_message,
    tool_calls_active,
    tool_chat_prompt,
    uses_tools,
)
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.serve.batching import Completion, Job
from verl.serve.state import ServeState

__all__ = ["router"]

_DISCONNECT_POLL_S = 0.5

router = APIRouter()


def state_of(request: Request) -> ServeState:
    """The app's :class:`ServeState` (set by the lifespan of :func:`verl.serve.app.create_app`)."""
    return request.app.state.serve


def _usage(results: list[Completion]) -> dict[str, int]:
    prompt = sum(r.prompt_tokens for r in results)
    completion = sum(r.completion_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


# ------------------------------------------------------------------------------------------------- service
@router.get("/health")
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


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    name = state_of(request).source.name
    return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "verl"}]}


# ---------------------------------------------------------------------------------------------- /generate
@router.post("/generate")
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


# ------------------------------------------------------------------------------------------ /v1/completions
def _completion_jobs(state: ServeState, body: CompletionRequest) -> list[Job]:
    """``n`` jobs per prompt of an OpenAI completions request (a prompt or a list of them)."""
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
    return jobs


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Any:
    state, started = state_of(request), time.monotonic()
    jobs = _completion_jobs(state, body)
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
        {"index": i, "text": r.text, "finish_reason": r.finish_reason, "logprobs": None} for i, r in enumerate(results)
    ]
    return {**head, "object": "text_completion", "choices": choices, "usage": _usage(results)}


# ------------------------------------------------------------------------------------- /v1/chat/completions
def _chat_jobs(state: ServeState, body: ChatCompletionRequest) -> list[Job]:
    """``n`` jobs of an OpenAI chat completions request, on the prompt its chat template writes."""
    state.check_model(body.model)
    body.check_unsupported()
    if uses_tools(body):
        from verl.serve.images import has_images

        if has_images(body.messages):
            raise ServeError(400, "messages: images in a request with tools are not supported", "messages")
        prompt_ids, multi_modal_inputs = tool_chat_prompt(state.tokenizer, body), None
    else:
        prompt_ids, multi_modal_inputs = state.chat_prompt(body)
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_new = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    stop = stop_list(body.stop)
    jobs = [
        state.make_job(prompt_ids, "messages", max_new, field, body.temperature, body.top_p, stop, body.stream)
        for _ in range(body.n)
    ]
    for job in jobs:
        job.multi_modal_inputs = multi_modal_inputs
    return jobs


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    state, started = state_of(request), time.monotonic()
    jobs = _chat_jobs(state, body)
    state.submit(jobs)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": state.source.name}
    if body.stream:
        job = jobs[0]

        calls = None
        if tool_calls_active(body):
            calls = ToolCallStream(ToolParser.get_tool_parser(state.config.tool_call_parser, state.tokenizer))

        async def events() -> AsyncIterator[str]:
            chunk = {**head, "object": "chat.completion.chunk"}

            def delta(d: dict[str, Any]) -> str:
                return _sse({**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})

            yield delta({"role": "assistant", "content": ""})
            async for piece in job.deltas():
                content = calls.feed(piece) if calls is not None else piece
                if content:
                    yield delta({"content": content})
            result = await job.result()
            state.record("/v1/chat/completions", started, [result])
            finish_reason = result.finish_reason
            if calls is not None:
                last, finish_reason = calls.finish(finish_reason)
                for d in last:
                    yield delta(d)
            final = {"index": 0, "delta": {}, "finish_reason": finish_reason}
            yield _sse({**chunk, "choices": [final], "usage": _usage([result])})
            yield _sse("[DONE]")

        return _streaming(events(), job)
    results = await _all(jobs, request)
    state.record("/v1/chat/completions", started, results)
    parser = ToolParser.get_tool_parser(state.config.tool_call_parser, state.tokenizer)
    choices = []
    for i, r in enumerate(results):
        message, finish_reason = assistant_message(body, r.text, r.finish_reason, parser)
        choices.append({"index": i, "message": message, "finish_reason": finish_reason})
    return {**head, "object": "chat.completion", "choices": choices, "usage": _usage(results)}


# ----------------------------------------------------------------------------------------------- answers
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
