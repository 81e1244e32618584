"""``MCPSearchTool``: an MCP tool whose result parts are search hits (verl's class for search servers over MCP).

Like :class:`~verl.tools.mcp_base_tool.MCPBaseTool`, with the text parts of a result read as one hit each: they are
joined by blank lines and counted in the call's ``total_results`` metric.
"""

from __future__ import annotations

from typing import Any

from verl.tools.mcp_base_tool import MCPBaseTool

__all__ = ["MCPSearchTool"]


class MCPSearchTool(MCPBaseTool):
    """An MCP search tool: one hit per text part of the result."""

    def _parse_tool_result(self, result: Any) -> tuple[str, dict[str, Any]]:
        hits = [block.text for block in result.content or [] if getattr(block, "type", None) == "text"]
        return "\n\n".join(hits), {"total_results": len(hits)}
