"""Tools served by MCP servers (Model Context Protocol), as verl configures them.

A tool config entry of ``type: mcp`` names a servers file instead of one tool; every tool the servers list (or those
in ``tool_selected_list``) becomes one :class:`MCPBaseTool` with the server's own schema::

    tools:
      - class_name: verl.tools.mcp_base_tool.MCPBaseTool
        config:
          type: mcp
          timeout: 30          # seconds per call
          rate_limit: 10       # calls started per second, over the file's servers (null: no limit)
        mcp:
          mcp_servers_config_path: mcp_servers.json
          tool_selected_list: [multiply]     # optional

The servers file and the connections are in :mod:`verl.tools.utils.mcp_clients.McpClientManager`. A call's result
is the text of the MCP result's content (text parts joined; structured content as JSON when there is no text); a
result the server flags as an error, a timeout or a lost connection becomes an ``Error: ...`` message to the model
with metric ``ok: False``, never an exception.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Optional

from verl.base_config import omega_conf_to_dataclass
from verl.tools.base_tool import BaseTool, ToolConfig, ToolResult
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["MCPBaseTool", "load_mcp_tools"]

CONFIG_KEYS = ("type", "timeout", "rate_limit")


@dataclass
class MCPToolConfig(ToolConfig):
    """``config`` of an MCP tool entry (``type: mcp``)."""

    timeout: float = 30.0  # seconds a tool call may take
    rate_limit: Optional[float] = None  # calls started per second over the servers file's servers (null: no limit)


class MCPBaseTool(BaseTool):
    """One tool of an MCP server.

    Args:
        config: the entry's ``config`` (``type: mcp``, ``timeout`` seconds per call, ``rate_limit``; defaults:
            :class:`MCPToolConfig`).
        tool_schema: the tool's schema as the server lists it (:func:`load_mcp_tools` builds both).
        client_manager: the connected :class:`~verl.tools.utils.mcp_clients.McpClientManager.MCPClientManager`.
    """

    def __init__(
        self,
        config: dict[str, Any] | None,
        tool_schema: OpenAIFunctionToolSchema | None,
        client_manager: Any = None,
    ) -> None:
        super().__init__(config, tool_schema)
        unknown = sorted(set(self.config) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown config keys {unknown}; known: {list(CONFIG_KEYS)}")
        self.timeout = float(omega_conf_to_dataclass(self.config, MCPToolConfig).timeout)
        if self.timeout <= 0:
            raise ValueError(f"{type(self).__name__}: config.timeout={self.timeout} must be > 0 seconds")
        if client_manager is None:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: MCP tools are built from a servers file (tool config entry "
                "with config.type: mcp and mcp.mcp_servers_config_path, or verl.tools.mcp_base_tool.load_mcp_tools)"
            )
        self.client_manager = client_manager

    def _parse_tool_result(self, result: Any) -> tuple[str, dict[str, Any]]:
        """The text shown to the model and the call's metrics, from an MCP ``CallToolResult``."""
        parts = []
        for block in result.content or []:
            parts.append(block.text if getattr(block, "type", None) == "text" else f"[{block.type} content]")
        text = "\n".join(parts)
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False)
        return text, {"content_parts": len(parts)}

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ToolResult:
        start = time.perf_counter()
        try:
            result = await self.client_manager.call_tool(self.name, parameters, self.timeout)
        except TimeoutError:
            text = f"Error: MCP tool {self.name!r} did not answer within {self.timeout:g} s"
            return ToolResponse(text=text), 0.0, {"ok": False, "timed_out": True}
        except Exception as e:  # noqa: BLE001  (a broken server is the model's error message, not a crash)
            return (
                ToolResponse(text=f"Error: MCP tool {self.name!r} failed: {type(e).__name__}: {e}"),
                0.0,
                {"ok": False},
            )
        text, metrics = self._parse_tool_result(result)
        metrics.update(ok=not result.is_error, duration_s=time.perf_counter() - start)
        if result.is_error:
            text = f"Error: {text}"
        return ToolResponse(text=text), 0.0, metrics


def load_mcp_tools(
    servers_config_path: str,
    tool_cls: type[MCPBaseTool] = MCPBaseTool,
    config: dict[str, Any] | None = None,
    tool_selected_list: list[str] | None = None,
    where: str = "MCP tools",
) -> list[MCPBaseTool]:
    """Connect to the servers of ``servers_config_path`` and build one ``tool_cls`` per tool they list (only those
    named in ``tool_selected_list`` when given; a name no server lists is an error naming ``where``)."""
    from verl.tools.utils.mcp_clients.McpClientManager import get_client_manager, mcp_tool_to_openai

    config = {"type": "mcp", **dict(config or {})}
    manager = get_client_manager(servers_config_path, rate_limit=config.get("rate_limit"))
    listed = manager.list_tools()
    if tool_selected_list is not None:
        names = {tool.name for _, tool in listed}
        missing = [n for n in tool_selected_list if n not in names]
        if missing:
            raise ValueError(f"{where}: mcp.tool_selected_list names {missing}, not offered; listed: {sorted(names)}")
        listed = [(s, t) for s, t in listed if t.name in tool_selected_list]
    tools = []
    for server, tool in listed:
        try:
            schema = OpenAIFunctionToolSchema.model_validate(mcp_tool_to_openai(tool))
        except ValueError as e:
            raise ValueError(f"{where}: MCP server {server!r} lists tool {tool.name!r} with a bad schema: {e}") from e
        tools.append(tool_cls(config=config, tool_schema=schema, client_manager=manager))
    return tools
