"""The FastAPI app of the inference service: :func:`create_app` builds it from a :class:`ServeConfig`.

The model and engine load when the app starts (uvicorn's lifespan, :meth:`ServeState.start
<verl.serve.state.ServeState.start>`) and are released when it stops. The endpoints are :mod:`verl.serve.routes`
(``POST /generate``, OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``, ``GET /v1/models``,
``GET /health``, ``GET /metrics``); requests are validated there, turned into :class:`~verl.serve.batching.Job`
objects and queued on the :class:`~verl.serve.batching.Batcher` (in front of the engine's request server). Here:
the error responses (one JSON shape for every error) and the request counter.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from verl.experimental.agent_loop.openai_schemas import ServeError, validation_error_to_serve_error
from verl.serve.config import ServeConfig
from verl.serve.routes import router
from verl.serve.state import ServeState

__all__ = ["create_app"]


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


async def _serve_error(request: Request, err: ServeError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


async def _validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
    serve_err = validation_error_to_serve_error(list(err.errors()))
    return JSONResponse(serve_err.body(), status_code=serve_err.status)


def create_app(config: ServeConfig) -> FastAPI:
    """The FastAPI app serving ``config.model``; the engine starts with the app (lifespan) and stops with it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await ServeState.start(config)
        app.state.serve = state
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title="verl inference service", lifespan=lifespan)
    app.add_exception_handler(ServeError, _serve_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(_CountRequests)
    app.include_router(router)
    return app
