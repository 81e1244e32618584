"""MCP tools: a real MCP server started by the test (stdio subprocess, and Streamable HTTP on 127.0.0.1), its tools
discovered through a verl tool config, and a tool_agent trajectory that calls them."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from verl.tools.mcp_base_tool import MCPBaseTool  # noqa: E402
from verl.tools.utils.tool_registry import initialize_tools_from_config  # noqa: E402

SERVER = str(Path(__file__).with_name("mcp_server.py"))


def _tool_config(
    tmp_path: Path, servers: dict[str, Any], extra: str = "", cls: str = "mcp_base_tool.MCPBaseTool"
) -> str:
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": servers}))
    path = tmp_path / "tools.yaml"
    path.write_text(
        f"tools:\n  - class_name: verl.tools.{cls}\n    config:\n      type: mcp\n      timeout: 5\n"
        f"    mcp:\n      mcp_servers_config_path: servers.json\n{extra}"
    )
    return str(path)


def _close(tools: list[Any]) -> None:
    for tool in tools:
        if isinstance(tool, MCPBaseTool):
            tool.client_manager.close()


def test_stdio_server_tools_in_a_tool_agent_trajectory(tmp_path, tok, kit) -> None:
    stdio = {"calc": {"command": sys.executable, "args": [SERVER, "stdio"]}}
    path = _tool_config(tmp_path, stdio, "      tool_selected_list: [multiply, fail]\n")
    tools = initialize_tools_from_config(path)
    try:
        assert [t.name for t in tools] == ["multiply", "fail"]
        schema = tools[0].tool_schema.model_dump(exclude_none=True)["function"]
        assert schema["description"] == "Multiply two integers."
        assert schema["parameters"]["required"] == ["a", "b"]
        assert schema["parameters"]["properties"]["a"]["type"] == "integer"

        script = [
            '<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>'
            '<tool_call>{"name": "fail", "arguments": {"reason": "x"}}</tool_call>',
            "The answer is 408",
        ]
        engine = kit.ScriptedEngine(tok, {"Q1": script})
        config = kit.rollout_config(tool_config_path=path, prompt_length=2048, max_parallel_calls=2)
        out = kit.run(tok, engine, config, kit.prompt_batch(tok, ["Q1: 12*34?"]))
        n = int(out.batch["attention_mask"][0, -out.batch["responses"].shape[1] :].sum())
        ids = out.batch["responses"][0, :n].tolist()
        mask = out.batch["response_mask"][0, :n].tolist()
        tool_text = tok.decode([t for t, m in zip(ids, mask) if m == 0])
        assert tool_text.startswith("<|tool|>408\n<|tool|>Error: ")
        assert "fail" in tool_text
        assert tok.decode([t for t, m in zip(ids, mask) if m == 1]).endswith("The answer is 408<eos>")
        metrics = out.non_tensor_batch["agent_metrics"][0]
        assert metrics["tool_calls"] == {"multiply": 1, "fail": 1}
        assert metrics["tool_errors"] == 1 and metrics["assistant_turns"] == 2
    finally:
        _close(tools)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the MCP HTTP test server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_http_server_tools_search_class_timeout_and_concurrent_calls(tmp_path, http_server) -> None:
    servers = {"web": {"url": http_server, "headers": {"X-Test": "1"}}}
    path = _tool_config(tmp_path, servers, cls="mcp_search_tool.MCPSearchTool")
    tools = {t.name: t for t in initialize_tools_from_config(path)}
    try:
        assert sorted(tools) == ["fail", "multiply", "slow"]

        async def calls():
            # many calls in flight from this loop at once, through the manager's own loop and one session
            return await asyncio.gather(*(tools["multiply"].execute("i", {"a": k, "b": 3}) for k in range(8)))

        results = asyncio.run(calls())
        assert [r[0].text for r in results] == [str(3 * k) for k in range(8)]
        assert results[0][2]["ok"] is True and results[0][2]["total_results"] == 1

        tools["slow"].timeout = 0.3
        start = time.perf_counter()
        response, _, metrics = asyncio.run(tools["slow"].execute("i", {"seconds": 1.5}))
        assert time.perf_counter() - start < 1.2
        assert response.text == "Error: MCP tool 'slow' did not answer within 0.3 s" and metrics["timed_out"]
        bad, _, bad_metrics = asyncio.run(tools["multiply"].execute("i", {"a": "x"}))
        assert bad.text.startswith("Error: ") and bad_metrics["ok"] is False
    finally:
        _close(list(tools.values()))


@pytest.mark.parametrize(
    ("servers", "extra", "fragment"),
    [
        ({"a": {"command": "x", "url": "http://h"}}, "", "give exactly one of 'command'"),
        ({"a": {"url": "http://h", "transport": "sse"}}, "", "only Streamable HTTP"),
        ({"a": {"command": sys.executable, "args": 3}}, "", "mcpServers.a.args must be a list of strings"),
        ({"a": {"command": sys.executable, "args": ["-c", "pass"]}}, "", "tools[0]: MCP server a ("),
    ],
)
def test_bad_mcp_configs_name_the_server_and_key(tmp_path, servers, extra, fragment) -> None:
    with pytest.raises(ValueError) as err:
        initialize_tools_from_config(_tool_config(tmp_path, servers, extra))
    assert fragment in str(err.value)


def test_tool_selected_list_names_a_missing_tool(tmp_path) -> None:
    stdio = {"calc": {"command": sys.executable, "args": [SERVER, "stdio"]}}
    with pytest.raises(ValueError, match=r"tool_selected_list names \['divide'\], not offered"):
        initialize_tools_from_config(_tool_config(tmp_path, stdio, "      tool_selected_list: [divide]\n"))
