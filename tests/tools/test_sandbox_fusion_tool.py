"""SandboxFusionTool against a local server with Sandbox Fusion's run_code API (code run in the project's sandbox),
its limits on requests in flight, and its errors."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from verl.rewards import sandbox_fusion
from verl.sandbox import sandbox_support
from verl.tools.sandbox_fusion_tools import SandboxFusionTool
from verl.tools.utils.sandbox_fusion_server import make_server, serve_in_thread
from verl.tools.utils.tool_registry import initialize_tools_from_config


@pytest.fixture
def server_url():
    server = make_server("127.0.0.1", 0)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(not sandbox_support(), reason="this machine cannot build the sandbox")
def test_runs_code_through_the_run_code_api(tmp_path, server_url) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n  - class_name: verl.tools.sandbox_fusion_tools.SandboxFusionTool\n    config:\n"
        f"      type: native\n      sandbox_fusion_url: {server_url}\n      default_timeout: 2\n"
    )
    (tool,) = initialize_tools_from_config(str(path))
    assert tool.name == "code_interpreter"

    async def calls():
        return await asyncio.gather(
            tool.execute("i", {"code": "print(6 * 7)"}),
            tool.execute("i", {"code": "import sys\nprint('partial')\nsys.exit('bad input')"}),
            tool.execute("i", {"code": "while True: pass", "timeout": 0.5}),
            tool.execute("i", {"code": "print(1)", "language": "cpp"}),
        )

    (ok, _, ok_m), (bad, _, bad_m), (slow, _, slow_m), (cpp, _, cpp_m) = asyncio.run(calls())
    assert ok.text == "42\n" and ok_m["ok"] is True and ok_m["run_status"] == "Finished"
    assert bad.text == "partial\nError (exit code 1):\nbad input" and bad_m["ok"] is False
    assert slow.text == "Error: the program ran past its time limit of 0.5 s"
    assert slow_m["run_status"] == "TimeLimitExceeded"
    assert cpp.text.startswith("Error: the sandbox failed: language 'cpp' is not supported") and not cpp_m["ok"]


def test_requests_in_flight_are_limited(monkeypatch) -> None:
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def fake_request(url, code, stdin, compile_timeout, run_timeout, memory_limit_mb, language):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        run = {"status": "Finished", "return_code": 0, "stdout": code, "stderr": "", "execution_time": 0}
        return {"status": "Success", "run_result": run}, None

    monkeypatch.setattr(sandbox_fusion, "call_sandbox_api", fake_request)

    def burst(tools, n=8):
        async def go():
            return await asyncio.gather(*(tools[k % len(tools)].execute("i", {"code": f"c{k}"}) for k in range(n)))

        state["max"] = 0
        return asyncio.run(go())

    url = "http://127.0.0.1:9/run_code"
    own = SandboxFusionTool({"sandbox_fusion_url": url, "num_workers": 2, "enable_global_rate_limit": False}, None)
    results = burst([own])
    assert [r[0].text for r in results] == [f"c{k}" for k in range(8)] and state["max"] == 2
    # the URL's limit holds over two tools of the process
    shared = [SandboxFusionTool({"sandbox_fusion_url": url + "?x", "num_workers": 8, "rate_limit": 3}, None)] * 2
    burst(shared)
    assert state["max"] == 3


def test_unreachable_server_and_bad_config() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tool = SandboxFusionTool({"sandbox_fusion_url": f"http://127.0.0.1:{port}/run_code"}, None)
    response, _, metrics = asyncio.run(tool.execute("i", {"code": "print(1)"}))
    assert response.text.startswith("Error: the Sandbox Fusion server failed: API Call Failed: cannot reach http")
    assert metrics == {"ok": False, "status": "RequestError"}
    with pytest.raises(ValueError, match="config.sandbox_fusion_url='' must be the http"):
        SandboxFusionTool({}, None)
    with pytest.raises(ValueError, match=r"unknown config keys \['timeout'\]"):
        SandboxFusionTool({"sandbox_fusion_url": "http://h/run_code", "timeout": 3}, None)
