"""A small MCP server for the MCP tool tests: ``python mcp_server.py stdio`` or ``python mcp_server.py http PORT``
(Streamable HTTP on 127.0.0.1:PORT/mcp)."""

from __future__ import annotations

import sys
import time

from mcp.server.mcpserver import MCPServer

app = MCPServer("verl-test")


@app.tool()
def multiply(a: int, b: int) -> str:
    """Multiply two integers."""
    return str(a * b)


@app.tool()
def fail(reason: str = "") -> str:
    """Always fails."""
    raise ValueError(f"refused {reason}")


@app.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        app.run("stdio")
    else:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
