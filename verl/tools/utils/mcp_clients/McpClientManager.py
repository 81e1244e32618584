"""Connections to MCP servers (Model Context Protocol), through the ``mcp`` package, for the MCP tools.

The servers come from a JSON file in the format MCP clients share (``mcp.mcp_servers_config_path`` of a tool
config entry)::

    {"mcpServers": {
        "calc": {"command": "python", "args": ["my_server.py"], "env": {"KEY": "v"}, "cwd": "/srv"},   # stdio
        "web":  {"url": "http://127.0.0.1:8000/mcp", "headers": {"X-Team": "rl"}, "auth_token": "..."}  # HTTP
    }}

An entry with ``command`` starts the server as a subprocess and talks to it over its stdin/stdout; an entry with
``url`` talks Streamable HTTP (``transport: streamable-http``, the default; ``auth_token`` becomes an
``Authorization: Bearer`` header). The legacy SSE transport is not supported.

One :class:`MCPClientManager` holds one open session per server for the life of the process. The sessions live on
the manager's own event loop in a background thread, because agent loops run in several worker threads, each with
an event loop of its own that ends after every batch: a tool call from any loop is handed to the manager's loop
(:meth:`MCPClientManager.call_tool`) and awaited from the caller's. Calls are limited to ``rate_limit`` per second
(verl's ``config.rate_limit``) and each waits at most its ``timeout``.

Sources: the MCP specification (modelcontextprotocol.io, transports: stdio and Streamable HTTP) and the ``mcp``
Python SDK 2.x client (``mcp.Client``); verl's MCP tool config format (``verl/tools/utils/tool_registry.py``
upstream).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MCPClientManager", "MCPServerSpec", "get_client_manager", "load_mcp_servers_config", "mcp_tool_to_openai"]

ROOT_KEY = "mcpServers"


@dataclass(frozen=True)
class MCPServerSpec:
    """One server of the servers file: stdio (``command``, ``args``, ``env``, ``cwd``) or HTTP (``url``,
    ``headers``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``name (command args...)`` or ``name (url)``, for error messages."""
        target = self.url if self.url else " ".join([self.command or "", *self.args])
        return f"{self.name} ({target})"


def load_mcp_servers_config(path: str) -> list[MCPServerSpec]:
    """Parse the servers file at ``path``; errors name the file, the server and the key."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"MCP servers config {path!r} (mcp.mcp_servers_config_path) not found")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from e
    servers = raw.get(ROOT_KEY) if isinstance(raw, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ValueError(f"{path}: expected a top-level {ROOT_KEY!r} object with at least one server")
    specs = []
    for name, entry in servers.items():
        where = f"{path}: {ROOT_KEY}.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object with 'command' (stdio) or 'url' (HTTP)")
        if ("command" in entry) == ("url" in entry):
            raise ValueError(f"{where}: give exactly one of 'command' (stdio server) and 'url' (HTTP server)")
        transport = str(entry.get("transport", "stdio" if "command" in entry else "streamable-http"))
        if "url" in entry and transport not in ("streamable-http", "http", "streamable_http"):
            raise ValueError(f"{where}.transport={transport!r}: only Streamable HTTP is supported for url servers")
        if "command" in entry and transport != "stdio":
            raise ValueError(f"{where}.transport={transport!r}: a server started by 'command' talks stdio")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{where}.args must be a list of strings, got {args!r}")
        env = entry.get("env")
        if env is not None and not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            raise ValueError(f"{where}.env must map names to strings, got {env!r}")
        headers = dict(entry.get("headers") or {})
        if entry.get("auth_token"):
            headers["Authorization"] = f"Bearer {entry['auth_token']}"
        specs.append(
            MCPServerSpec(
                name=str(name),
                command=entry.get("command"),
                args=tuple(args),
                env=env,
                cwd=entry.get("cwd"),
                url=entry.get("url"),
                headers=headers,
            )
        )
    return specs


def mcp_tool_to_openai(tool: Any) -> dict[str, Any]:
    """An MCP tool listing (``name``, ``description``, ``input_schema``) as an OpenAI function-tool schema."""
    parameters = dict(tool.input_schema or {"type": "object", "properties": {}})
    parameters.setdefault("type", "object")
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": parameters},
    }


class _RateLimiter:
    """At most ``rate`` call starts per second, evenly spaced (no burst); ``None``: no limit."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 0.0 if not rate else 1.0 / float(rate)
        self._next = 0.0

    async def acquire(self) -> None:
        if self.interval <= 0:
            return
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


class MCPClientManager:
    """Open sessions to ``servers`` on a background event loop; see the module docstring.

    Args:
        servers: the servers to connect to.
        rate_limit: tool calls started per second over all servers (``None``: unlimited).
        connect_timeout_s: how long connecting (and listing tools) may take per server.
    """

    def __init__(
        self, servers: list[MCPServerSpec], rate_limit: float | None = None, connect_timeout_s: float = 60.0
    ) -> None:
        if rate_limit is not None and float(rate_limit) <= 0:
            raise ValueError(f"MCP config.rate_limit={rate_limit!r} must be > 0 (calls per second) or null")
        self.servers = list(servers)
        self.connect_timeout_s = float(connect_timeout_s)
        self._limiter = _RateLimiter(rate_limit)
        self._clients: dict[str, Any] = {}
        self._tool_server: dict[str, str] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-clients", daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self._holders: list[asyncio.Future] = []
        self._closed = False
        try:
            self._submit(self._connect_all()).result()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------ event loop
    def _submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _target(self, spec: MCPServerSpec) -> Any:
        from mcp.client.stdio import StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        if spec.command:
            return StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env, cwd=spec.cwd)
        if spec.headers:
            from mcp.shared._httpx_utils import create_mcp_http_client

            return streamable_http_client(spec.url, http_client=create_mcp_http_client(headers=spec.headers))
        return spec.url

    async def _hold(self, spec: MCPServerSpec, ready: asyncio.Future) -> None:
        """Keep one session to ``spec`` open until :meth:`close` (an anyio context must exit in its own task)."""
        from mcp import Client

        try:
            async with Client(self._target(spec)) as client:
                listing = await client.list_tools()
                self._clients[spec.name] = client
                if not ready.done():
                    ready.set_result(list(listing.tools))
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001  (reported to the caller waiting on ready)
            if not ready.done():
                ready.set_exception(e)
        finally:
            self._clients.pop(spec.name, None)

    async def _connect_all(self) -> None:
        self._stop = asyncio.Event()
        self._listings: dict[str, list[Any]] = {}
        for spec in self.servers:
            ready = self._loop.create_future()
            self._holders.append(asyncio.ensure_future(self._hold(spec, ready)))
            try:
                tools = await asyncio.wait_for(ready, self.connect_timeout_s)
            except Exception as e:
                raise ConnectionError(f"MCP server {spec.describe()}: cannot connect: {type(e).__name__}: {e}") from e
            for tool in tools:
                if tool.name in self._tool_server:
                    other = self._tool_server[tool.name]
                    raise ValueError(f"MCP tool {tool.name!r} is offered by both servers {other!r} and {spec.name!r}")
                self._tool_server[tool.name] = spec.name
            self._listings[spec.name] = tools

    # -------------------------------------------------------------------------------------------- tools
    def list_tools(self) -> list[tuple[str, Any]]:
        """``(server name, MCP tool)`` of every server, in the file's order (listed once, at connection)."""
        return [(name, tool) for name, tools in self._listings.items() for tool in tools]

    async def _call(self, name: str, arguments: dict[str, Any], timeout_s: float | None) -> Any:
        server = self._tool_server.get(name)
        if server is None:
            raise KeyError(f"no MCP server offers a tool named {name!r}")
        client = self._clients.get(server)
        if client is None:
            raise ConnectionError(f"the session to MCP server {server!r} is closed")
        await self._limiter.acquire()
        return await asyncio.wait_for(client.call_tool(name, arguments), timeout_s)

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> Any:
        """Call tool ``name`` from any event loop; returns the ``CallToolResult``. Raises ``TimeoutError`` past
        ``timeout_s`` and ``ConnectionError`` when the session is gone."""
        if self._closed:
            raise ConnectionError("the MCP client manager is closed")
        return await asyncio.wrap_future(self._submit(self._call(name, arguments, timeout_s)))

    def close(self) -> None:
        """Close every session (stdio servers exit) and stop the background loop; idempotent."""
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            if self._stop is not None:
                self._stop.set()
            if self._holders:
                await asyncio.wait(self._holders, timeout=10)

        if self._thread.is_alive():
            try:
                self._submit(shutdown()).result(timeout=15)
            except Exception:  # noqa: BLE001  (best effort at shutdown)
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()


_MANAGERS: dict[tuple[str, float | None], MCPClientManager] = {}
_MANAGERS_LOCK = threading.Lock()


def get_client_manager(config_path: str, rate_limit: float | None = None) -> MCPClientManager:
    """The process's manager for the servers file at ``config_path`` (one per file and rate limit, so the tools of
    one file share their sessions); created and connected on first use, closed at exit."""
    key = (os.path.abspath(config_path), None if rate_limit is None else float(rate_limit))
    with _MANAGERS_LOCK:
        manager = _MANAGERS.get(key)
        if manager is None or manager._closed:
            manager = MCPClientManager(load_mcp_servers_config(config_path), rate_limit=rate_limit)
            _MANAGERS[key] = manager
        return manager


@atexit.register
def _close_all() -> None:
    for manager in list(_MANAGERS.values()):
        manager.close()
