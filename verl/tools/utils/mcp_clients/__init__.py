"""MCP client connections of the MCP tools (:mod:`verl.tools.mcp_base_tool`); see
:mod:`verl.tools.utils.mcp_clients.McpClientManager`."""
