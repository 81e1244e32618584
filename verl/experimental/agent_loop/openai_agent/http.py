"""A minimal HTTP/1.1 server on 127.0.0.1 for the rollout's OpenAI endpoint, on asyncio streams (standard library).

Why not FastAPI/uvicorn: they are the ``serve`` extra, and a training run must not need them; the endpoint serves
one agent per trajectory (a handful of requests), so the server is small: ``Content-Length`` request bodies,
keep-alive connections (the ``openai`` SDK's httpx pool reuses them), JSON responses with ``Content-Length``, and
streamed responses (server-sent events) with chunked transfer encoding, written as they are produced; a client that
closes the connection mid-stream ends the stream (its ``aclose`` runs: the endpoint cancels the request). It binds
the loopback address only, on an ephemeral port.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["HttpRequest", "HttpResponse", "LoopbackServer"]

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
DISCONNECT_POLL_S = 0.05  # how often a streamed response checks that its client is still connected
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Payload Too Large", 500: "Internal Server Error"}  # fmt: skip


@dataclass
class HttpRequest:
    """One request: method, path (query string cut), lower-cased headers, body bytes."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpResponse:
    """A response: a whole ``body``, or ``stream`` (an async iterator of byte pieces sent as chunks)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, payload: Any, status: int = 200) -> HttpResponse:
        """A JSON response."""
        return cls(status, json.dumps(payload, ensure_ascii=False).encode())


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class LoopbackServer:
    """Serves ``handler`` on ``127.0.0.1`` at an ephemeral port (:attr:`port` after :meth:`start`)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> int:
        """Listen; returns the port."""
        self._server = await asyncio.start_server(self._connection, host="127.0.0.1", port=0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        """Stop listening and end the open connections."""
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            while True:
                request, error = await _read_request(reader)
                if request is None and error is None:
                    return  # the client closed the connection
                response = error or await self._answer(request)
                keep = request is not None and request.headers.get("connection", "").lower() != "close"
                await _write_response(reader, writer, response, keep and error is None)
                if not keep or error is not None:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # close(): the connection ends quietly
            return
        finally:
            self._connections.discard(task)
            writer.close()

    async def _answer(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self.handler(request)
        except Exception as e:  # noqa: BLE001  (a handler bug answers 500, the server goes on)
            logger.exception("openai endpoint: %s %s failed", request.method, request.path)
            return HttpResponse.json({"error": {"message": f"internal error: {e!r}", "type": "server_error"}}, 500)


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse.json({"error": {"message": message, "type": "invalid_request_error"}}, status)


async def _read_request(reader: asyncio.StreamReader) -> tuple[HttpRequest | None, HttpResponse | None]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None, None
    except asyncio.LimitOverrunError:
        return None, _error(413, "request headers too large")
    if len(head) > MAX_HEADER_BYTES:
        return None, _error(413, "request headers too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None, _error(400, f"malformed request line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return None, _error(411, "chunked request bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        return None, _error(400, f"bad Content-Length {headers.get('content-length')!r}")
    if length > MAX_BODY_BYTES:
        return None, _error(413, f"request body over {MAX_BODY_BYTES} bytes")
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(parts[0].upper(), parts[1].split("?", 1)[0], headers, body), None


async def _write_response(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: HttpResponse, keep_alive: bool
) -> None:
    head = [f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}"]
    head.append(f"Content-Type: {response.content_type}")
    head.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
    head += [f"{k}: {v}" for k, v in response.headers.items()]
    if response.stream is None:
        head.append(f"Content-Length: {len(response.body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()
        return
    try:
        head += ["Transfer-Encoding: chunked", "Cache-Control: no-cache"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        pieces = response.stream.__aiter__()
        while True:
            try:
                piece = await _next_piece(pieces, reader, writer)
            except StopAsyncIteration:
                break
            if piece:
                writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    finally:  # however the stream ended (done, client gone, server closing): its producer cleans up
        close = getattr(response.stream, "aclose", None)
        if close is not None:
            await close()


async def _next_piece(
    pieces: AsyncIterator[bytes], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> bytes:
    """The stream's next piece; raises ``ConnectionResetError`` when the client closes the connection while it is
    being produced (an HTTP/1.1 client sends nothing on the connection while it reads a response, so end of input
    means it went away), and ``StopAsyncIteration`` at the end of the stream."""

    async def step() -> bytes:
        return await pieces.__anext__()

    task = asyncio.ensure_future(step())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if reader.at_eof() or writer.is_closing():
                raise ConnectionResetError("the client closed the connection during a streamed response")
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
