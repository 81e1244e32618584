"""Plain Python functions as agent tools: ``@function_tool`` (upstream verl v0.9's ``verl.tools.function_tool``).

A stateless tool needs no ``BaseTool`` subclass and no schema YAML: decorate a typed function with a Google-style
docstring and point ``actor_rollout_ref.rollout.multi_turn.function_tool_path`` at its file::

    from verl.tools.function_tool import function_tool

    @function_tool                       # registered as "get_weather"; @function_tool("name") renames it
    def get_weather(city: str) -> dict:
        \"\"\"Get the current weather for a city.

        Args:
            city: The city to look up.
        \"\"\"
        return {"temperature_c": 17.3}

The tool's OpenAI schema is inferred by ``transformers.utils.get_json_schema`` (types from the annotations,
``required`` from parameters without a default, descriptions from ``Args:``; no docstring, an unannotated or an
undocumented parameter raise at registration); ``schema=`` (a dict or an ``OpenAIFunctionToolSchema``) skips
inference. ``*args`` / ``**kwargs`` are refused (a JSON schema has fixed properties: use ``param: list[T]``).
Each call is ``fn(**arguments)`` -- awaited for a coroutine function, in a worker thread otherwise -- and its return
value becomes ``(ToolResponse, reward, metrics)`` by :func:`normalize_function_tool_return`. There is no
per-trajectory state (``create`` / ``release`` do nothing); a tool that needs it stays a ``BaseTool`` in
``multi_turn.tool_config_path``. Both paths may be set together; two tools of the same name are an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from verl.tools.base_tool import BaseTool, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.import_utils import load_module
from verl.utils.registry import Registry

__all__ = [
    "FUNCTION_TOOLS",
    "FUNCTION_TOOL_REGISTRY",
    "FunctionTool",
    "function_tool",
    "get_function_tool",
    "load_function_tools_from_path",
    "normalize_function_tool_return",
]

logger = logging.getLogger(__name__)

FUNCTION_TOOL_REGISTRY: dict[str, FunctionTool] = {}
"""Every function tool registered in this process, by name (the entries of :data:`FUNCTION_TOOLS`)."""

FUNCTION_TOOLS: Registry[FunctionTool] = Registry(
    "function tool",
    store=FUNCTION_TOOL_REGISTRY,
    same=lambda existing, new: False,  # a name is taken once, even by the same function
    duplicate_error=lambda name, existing, new: ValueError(
        f"function tool {name!r} is already registered (by {existing.fn.__module__}.{existing.fn.__qualname__}); "
        "pick another name with @function_tool('other_name')"
    ),
    unknown_error=lambda name, known: KeyError(f"no function tool named {name!r}; registered: {known}"),
)
"""The function tools of this process (``@function_tool``)."""

_LOADED_FUNCTION_TOOL_PATHS: dict[str, list[str]] = {}
"""Absolute path of a loaded tool file -> the names it registered (a second load returns the same tools)."""


class FunctionTool(BaseTool):
    """A registered function as a :class:`~verl.tools.base_tool.BaseTool` (what the agent loops call).

    Args:
        name: the tool name (the schema's function name).
        fn: the function, sync or ``async``.
        tool_schema: its OpenAI function schema.
    """

    def __init__(self, name: str, fn: Callable[..., Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        if tool_schema.function.name != name:
            raise ValueError(
                f"@function_tool({name!r}) on {fn.__qualname__}: the schema names the function "
                f"{tool_schema.function.name!r}; the tool name and the schema's function.name must agree"
            )
        super().__init__({"type": "native"}, tool_schema)
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)

    async def call(self, parameters: dict[str, Any]) -> Any:
        """``fn(**parameters)``: awaited when ``fn`` is a coroutine function, else run in a worker thread so the
        event loop keeps serving the other trajectories."""
        if self.is_async:
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        """One call, its result normalised to ``(ToolResponse, reward, metrics)``."""
        return normalize_function_tool_return(await self.call(parameters))

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r}, {self.fn.__module__}.{self.fn.__qualname__})"


def _infer_schema(fn: Callable[..., Any], name: str) -> OpenAIFunctionToolSchema:
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ValueError(
                f"@function_tool {name!r} ({fn.__qualname__}): variadic parameter {star}{param.name} cannot be a JSON "
                f"schema property; take a list instead (e.g. {param.name}: list[int])"
            )
    from transformers.utils import get_json_schema

    schema = get_json_schema(fn)
    schema["function"]["name"] = name
    return OpenAIFunctionToolSchema.model_validate(schema)


def _as_schema(schema: dict[str, Any] | OpenAIFunctionToolSchema) -> OpenAIFunctionToolSchema:
    if isinstance(schema, OpenAIFunctionToolSchema):
        return schema
    if isinstance(schema, dict):
        return OpenAIFunctionToolSchema.model_validate(schema)
    raise TypeError(f"@function_tool schema= must be a dict or an OpenAIFunctionToolSchema, got {type(schema)}")


def function_tool(
    name: str | Callable[..., Any] | None = None,
    schema: dict[str, Any] | OpenAIFunctionToolSchema | None = None,
) -> Any:
    """Register a function as a tool; use as ``@function_tool``, ``@function_tool()`` or
    ``@function_tool("name", schema=...)``. Returns the function unchanged (the tool is in
    :data:`FUNCTION_TOOL_REGISTRY`). A name already registered raises ``ValueError``."""

    def register(fn: Callable[..., Any], tool_name: str | None) -> Callable[..., Any]:
        if not callable(fn):
            raise TypeError(f"@function_tool decorates a function, got {type(fn).__name__}")
        tool_name = tool_name or fn.__name__
        tool_schema = _as_schema(schema) if schema is not None else _infer_schema(fn, tool_name)
        FUNCTION_TOOLS.register(tool_name, FunctionTool(tool_name, fn, tool_schema))
        return fn

    if callable(name):  # bare @function_tool
        return register(name, None)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"@function_tool(name) takes a str, got {type(name).__name__}")
    return lambda fn: register(fn, name)


def get_function_tool(name: str) -> FunctionTool:
    """The function tool registered under ``name``."""
    return FUNCTION_TOOLS.get(name)


def load_function_tools_from_path(path: str) -> list[FunctionTool]:
    """Import the python file ``path`` (relative paths from the working directory) and return the function tools
    it registered, in registration order. Loading a file again returns the same tools without re-running it."""
    abs_path = os.path.abspath(os.path.expanduser(str(path)))
    if abs_path in _LOADED_FUNCTION_TOOL_PATHS:
        return [FUNCTION_TOOL_REGISTRY[n] for n in _LOADED_FUNCTION_TOOL_PATHS[abs_path] if n in FUNCTION_TOOL_REGISTRY]
    if not os.path.isfile(abs_path):
        raise FileNotFoundError(f"function_tool_path does not exist: {path!r} (resolved to {abs_path})")
    before = set(FUNCTION_TOOL_REGISTRY)
    module_name = "verl_function_tools_" + hashlib.sha1(abs_path.encode()).hexdigest()[:12]
    load_module(abs_path, module_name=module_name)
    added = [n for n in FUNCTION_TOOL_REGISTRY if n not in before]
    if not added:
        logger.warning("no @function_tool decorators found in %s (multi_turn.function_tool_path)", abs_path)
    _LOADED_FUNCTION_TOOL_PATHS[abs_path] = added
    return [FUNCTION_TOOL_REGISTRY[n] for n in added]


def _coerce_response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, str):
        return ToolResponse(text=value)
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False, default=str))
    return ToolResponse(text=str(value))


def normalize_function_tool_return(ret: Any) -> ToolResult:
    """A function tool's return value as ``(ToolResponse, reward, metrics)``.

    ``str`` -> the text; ``dict`` -> its JSON; ``ToolResponse`` as is; anything else -> ``str(value)``. A tuple
    ``(response,)``, ``(response, reward)`` or ``(response, reward, metrics)`` carries a reward and metrics
    (``None`` -> ``0.0`` / ``{}``); a tuple of another length raises ``TypeError``.
    """
    if isinstance(ret, tuple):
        if not 1 <= len(ret) <= 3:
            raise TypeError(
                f"a function tool returned a tuple of length {len(ret)}; return a tuple of length 1, 2, or 3: "
                "(response,), (response, reward) or (response, reward, metrics)"
            )
        reward = 0.0 if len(ret) < 2 or ret[1] is None else float(ret[1])
        metrics = {} if len(ret) < 3 or ret[2] is None else dict(ret[2])
        return _coerce_response(ret[0]), reward, metrics
    return _coerce_response(ret), 0.0, {}
