"""The subprocess sandbox (limits, no network, isolation) and the code-execution reward that runs in it."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

import pytest

from verl.utils.reward_score import code_exec
from verl.utils.sandbox import run_python_sandboxed
from verl.utils.security import SecurityPolicy, UnsafeOperationError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX resource limits (Linux)")


def test_runs_code_with_stdin_in_an_isolated_interpreter():
    code = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()), sys.flags.isolated)"
    result = run_python_sandboxed(code, stdin="3 4 5\n", timeout_s=60)
    assert result.ok, result.describe()
    assert result.stdout == "12 1\n"
    assert not result.timed_out


def test_working_dir_is_fresh_and_removed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = "import os\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))\nopen('left.txt', 'w').write('x')"
    result = run_python_sandboxed(code, timeout_s=60)
    assert result.ok, result.describe()
    cwd, listing = result.stdout.splitlines()
    assert listing == "['main.py']"
    assert cwd != str(tmp_path) and not os.path.exists(cwd)
    assert os.listdir(tmp_path) == []


def test_wall_clock_timeout_kills_the_process():
    result = run_python_sandboxed("while True:\n    pass\n", timeout_s=1.0)
    assert result.timed_out and not result.ok
    assert result.returncode is not None and result.returncode < 0
    assert result.duration_s < 6
    assert "timed out" in result.describe()


def test_memory_limit_stops_large_allocations():
    result = run_python_sandboxed("x = bytearray(1024 * 1024 * 1024)\nprint('allocated')", memory_mb=256)
    assert not result.ok
    assert "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


def test_output_is_capped():
    result = run_python_sandboxed("import sys\nsys.stdout.write('x' * 100000)\n", max_output_bytes=1000)
    assert len(result.stdout) <= 1000
    assert not result.ok


def _listening_server() -> tuple[socket.socket, list[bool]]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    accepted: list[bool] = []

    def accept_loop() -> None:
        for _ in range(40):
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(True)
            conn.close()
            return

    threading.Thread(target=accept_loop, daemon=True).start()
    return server, accepted


CONNECT = """
import sys
port = {port}
try:
    import _socket
    s = _socket.socket()
    s.settimeout(2)
    s.connect(("127.0.0.1", port))
    print("connected")
except Exception as e:
    print("blocked", type(e).__name__, e)
"""


def test_network_is_blocked_by_default_and_available_when_allowed():
    server, accepted = _listening_server()
    port = server.getsockname()[1]
    try:
        blocked = run_python_sandboxed(CONNECT.format(port=port), timeout_s=60)
        assert blocked.ok, blocked.describe()
        assert blocked.stdout.startswith("blocked"), blocked.stdout
        assert "network access is disabled" in blocked.stdout
        assert accepted == []
        # the same program with the network allowed reaches the server: the refusal above is the sandbox's doing
        allowed = run_python_sandboxed(CONNECT.format(port=port), timeout_s=60, allow_network=True)
        assert allowed.stdout.strip() == "connected", allowed.stdout + allowed.stderr
    finally:
        server.close()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="timeout_s"):
        run_python_sandboxed("print(1)", timeout_s=0)
    with pytest.raises(TypeError, match="code must be a string"):
        run_python_sandboxed(b"print(1)")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ code_exec
ADD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def test_extract_code_prefers_the_last_python_block():
    text = "first\n```\nraw\n```\nthen\n```python\nprint(1)\n```\nand\n```py\nprint(2)\n```"
    assert code_exec.extract_code(text) == "print(2)\n"
    assert code_exec.extract_code("```\nonly_untagged()\n```") == "only_untagged()\n"
    assert code_exec.extract_code("no code here") is None


def test_stdin_stdout_tests_score_the_pass_fraction():
    truth = {"inputs": ["1 2\n", "5 5\n", "2 2\n"], "outputs": ["3\n", "10", "5\n"]}  # the last one is wrong
    result = code_exec.compute_score(ADD_PROGRAM, json.dumps(truth), timeout_s=60)
    assert result["passed"] == 2 and result["total"] == 3
    assert result["score"] == pytest.approx(2 / 3)
    assert result["error"] == "wrong output"


def test_assert_tests_and_failures():
    response = "Here:\n```python\ndef add(a, b):\n    return a + b\n```"
    truth = {"asserts": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]}
    result = code_exec.compute_score(response, truth, timeout_s=60)
    assert result["score"] == 0.5
    assert "AssertionError" in result["error"]
    hang = code_exec.compute_score("```python\nwhile True: pass\n```", {"asserts": ["assert True"]}, timeout_s=1)
    assert hang["score"] == 0.0 and "timed out" in hang["error"]
    assert code_exec.compute_score("I don't know", truth)["score"] == 0.0


def test_bad_test_cases_are_reported():
    with pytest.raises(ValueError, match="not valid JSON"):
        code_exec.compute_score(ADD_PROGRAM, "{inputs: [1]")
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        code_exec.compute_score(ADD_PROGRAM, {"inputs": ["1", "2"], "outputs": ["1"]})
    with pytest.raises(ValueError, match="no 'inputs'"):
        code_exec.compute_score(ADD_PROGRAM, {"foo": 1})


def test_in_process_execution_is_refused_unless_unsafe_operations_are_allowed():
    truth = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    with pytest.raises(UnsafeOperationError) as info:
        code_exec.compute_score(ADD_PROGRAM, truth, sandbox=False, policy=SecurityPolicy())
    assert "in the trainer process" in str(info.value)
    assert "trainer.allow_unsafe_operations=true" in str(info.value)
    allowed = SecurityPolicy(allow_unsafe_operations=True)
    assert code_exec.compute_score(ADD_PROGRAM, truth, sandbox=False, policy=allowed)["score"] == 1.0
    # with the switch off the default path still works: it runs in the sandbox
    assert code_exec.compute_score(ADD_PROGRAM, truth, policy=SecurityPolicy(), timeout_s=60)["score"] == 1.0
