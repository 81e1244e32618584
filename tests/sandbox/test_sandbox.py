"""The subprocess sandbox (limits, no network, isolation) and the code-execution reward that runs in it."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import pytest

from verl.rewards import code_exec
from verl.sandbox import run_python_sandboxed
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


# ------------------------------------------------------------------------------------------------ escapes
# Each program below tries one way out of the jail; the test asserts it failed and the host saw nothing.


def test_cannot_write_or_delete_outside_its_temp_dir(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.chmod(tmp_path, 0o777)  # even a world-writable host directory is read-only from inside
    code = f"""
import errno, os
for action in (lambda: open({str(tmp_path / "new.txt")!r}, "w"), lambda: os.remove({str(victim)!r}),
               lambda: open("/etc/verl-sandbox-test", "w")):
    try:
        action()
        print("escaped")
    except OSError as e:  # EROFS for what it can see, ENOENT for the host /tmp, which it cannot even see
        print("refused" if e.errno in (errno.EROFS, errno.ENOENT, errno.EACCES) else e)
open("/tmp/scratch", "w").write("fine")  # its own tmpfs is writable
print(open("/tmp/scratch").read())
"""
    result = run_python_sandboxed(code, timeout_s=60)
    assert result.ok, result.stderr
    assert result.stdout.split("\n")[:4] == ["refused", "refused", "refused", "fine"]
    assert victim.read_text() == "keep me" and sorted(os.listdir(tmp_path)) == ["victim.txt"]
    assert not os.path.exists("/etc/verl-sandbox-test")


def test_runs_unprivileged_and_cannot_read_root_only_files():
    planted = None
    if os.geteuid() == 0:  # a file in root's home: hidden from the jail along with the rest of /root
        planted = f"/root/.verl-sandbox-test-{os.getpid()}"
        with open(planted, "w") as f:
            f.write("s3cr3t")
    code = f"""
import os
print(os.getuid() != 0, os.getgroups())
for path in ("/etc/shadow", {planted!r}):
    try:
        print(open(path).read()[:6] if path else "refused")
    except OSError as e:
        print("refused")
"""
    try:
        result = run_python_sandboxed(code, timeout_s=60)
    finally:
        if planted:
            os.remove(planted)
    assert result.ok, result.stderr
    assert "s3cr3t" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "True []"
    if os.geteuid() == 0:  # as root the jail runs as a fresh uid: root-only files are out of reach
        assert lines[1:3] == ["refused", "refused"]


def test_fork_bomb_is_capped_and_leftover_processes_die_with_the_program(tmp_path):
    code = """
import os, subprocess, time
daemon = subprocess.Popen(["setsid", "sleep", "120"], start_new_session=True)
started = 0
for _ in range(100):
    try:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        started += 1
    except OSError:
        break
print(started, daemon.pid)
"""
    before = _sleepers()
    result = run_python_sandboxed(code, timeout_s=60, max_processes=16)
    assert result.ok, result.stderr
    started = int(result.stdout.split()[0])
    assert started < 16  # RLIMIT_NPROC stopped the loop
    time.sleep(0.5)
    assert _sleepers() == before, "a process of the sandbox outlived the call"


def test_a_killed_run_leaves_no_process_behind():
    code = "import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '120'])\ntime.sleep(120)\n"
    before = _sleepers()
    result = run_python_sandboxed(code, timeout_s=1.0)
    assert result.timed_out
    time.sleep(0.5)
    assert _sleepers() == before


def _sleepers() -> set[int]:
    """PIDs of `sleep 120` processes on the host."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", b"120"]:
                    found.add(int(pid))
        except OSError:
            continue
    return found


def test_no_view_of_the_trainer_environment_or_processes(monkeypatch):
    monkeypatch.setenv("VERL_TEST_SECRET", "hunter2")
    code = """
import os
print(os.getppid(), sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("hunter2" in open("/proc/1/environ").read(), "VERL_TEST_SECRET" in os.environ)
"""
    result = run_python_sandboxed(code, timeout_s=60)
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "0 [1]"  # alone in its PID namespace: the trainer's /proc/<pid> does not exist there
    assert lines[1] == "False False"


def test_a_child_process_has_no_network_either():
    # the socket preamble patches only the launched interpreter; the network namespace covers its children too
    code = """
import subprocess, sys
probe = "import socket\\ns = socket.socket()\\ns.settimeout(2)\\ns.connect(('1.1.1.1', 53))\\nprint('connected')"
done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
print(done.stdout.strip() or done.stderr.strip().splitlines()[-1])
"""
    result = run_python_sandboxed(code, timeout_s=60)
    assert result.ok, result.stderr
    assert "connected" not in result.stdout and "unreachable" in result.stdout


def test_sandbox_support_names_what_is_missing(monkeypatch):
    import verl.sandbox.jail as sandbox

    sandbox.sandbox_support.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    try:
        with pytest.raises(sandbox.SandboxUnavailableError, match="needs the `unshare` command"):
            run_python_sandboxed("print(1)")
    finally:
        sandbox.sandbox_support.cache_clear()
