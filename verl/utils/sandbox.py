"""Run untrusted Python (e.g. model-written code) in a separate, resource-limited, network-less subprocess.

Layers of isolation, from strongest to weakest:

1. a new network namespace (``unshare -n``, or ``unshare -rn`` for unprivileged users) when the host allows it:
   the child sees only a down loopback interface, so no packet leaves;
2. in any case a preamble that runs before the user code and replaces socket creation with an error;
3. ``python -I`` (isolated mode: no user site, no ``PYTHON*`` variables, script dir not on ``sys.path``), a
   minimal environment and a fresh temporary working directory that is deleted afterwards;
4. resource limits set in the child before ``exec``: address space (``RLIMIT_AS``), CPU seconds (``RLIMIT_CPU``),
   output file size (``RLIMIT_FSIZE``, which also caps what stdout/stderr can write), no core files, a new session
   so the whole process group is killed on timeout.

This is a sandbox for mistakes and casual misbehaviour of generated code, not a hardened jail against a determined
attacker; for that run rewards on a separate machine (see ``reward_model.remote``).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

__all__ = ["SandboxResult", "network_namespace_command", "run_python_sandboxed"]

# Runs in the child before the user's code. It keeps `socket` importable (plenty of harmless code imports it) but
# makes every way of creating a socket raise, then runs the user's file as __main__.
_LAUNCHER = r"""
import sys

def _no_network(*args, **kwargs):
    raise PermissionError("network access is disabled in the verl sandbox")

import socket as _socket_mod
import _socket

class _BlockedSocket(_socket_mod.socket):
    def __init__(self, *args, **kwargs):
        _no_network()

for _mod in (_socket_mod, _socket):
    _mod.socket = _BlockedSocket if _mod is _socket_mod else _no_network
    for _name in ("socketpair", "fromfd", "create_connection", "create_server", "getaddrinfo", "gethostbyname",
                  "gethostbyname_ex", "gethostbyaddr"):
        if hasattr(_mod, _name):
            setattr(_mod, _name, _no_network)
del _mod, _name

import runpy
_target = sys.argv[1]
sys.argv = [_target]
runpy.run_path(_target, run_name="__main__")
"""


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run.

    Attributes:
        returncode: exit status; negative for a signal (``-9`` killed, ``-24`` CPU limit, ``-25`` output limit);
            None only if the process could not be started.
        stdout / stderr: decoded output (each capped at ``max_output_bytes``).
        timed_out: the time limit was hit (wall clock, or the CPU-time limit: SIGXCPU) and the program was killed.
        duration_s: wall-clock seconds.
        network_isolated: a network namespace was used (not just the socket preamble).
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    network_isolated: bool = False

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 within its limits."""
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """A one-line human description of how the run ended."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s"
        if self.returncode is None:
            return "could not start"
        if self.returncode < 0:
            sig = -self.returncode
            names = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed"}
            return f"terminated by signal {sig} ({names.get(sig, signal.Signals(sig).name)})"
        tail = self.stderr.strip().splitlines()[-1:] or [""]
        return f"exit status {self.returncode}" + (f": {tail[0][:200]}" if self.returncode else "")


def _try(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def network_namespace_command() -> tuple[str, ...]:
    """The ``unshare`` prefix that gives a child its own empty network namespace here, or ``()`` if none works."""
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return ()
    for prefix in ((exe, "-n"), (exe, "-r", "-n")):
        if _try([*prefix, "--", "true"]):
            return prefix
    return ()


def _limits(memory_mb: int, cpu_s: int, max_output_bytes: int) -> None:
    """Runs in the child between fork and exec: hard resource limits (inherited by anything it starts)."""
    import resource

    mem = int(memory_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_output_bytes, max_output_bytes))


def _read_capped(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(limit)
    return data.decode("utf-8", errors="replace")


def run_python_sandboxed(
    code: str,
    stdin: str = "",
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    allow_network: bool = False,
    max_output_bytes: int = 1 << 20,
    python: str | None = None,
) -> SandboxResult:
    """Run the Python source ``code`` in a sandboxed subprocess and return what happened.

    Args:
        code: the program, run as ``__main__`` from a file in a fresh temporary directory (its working dir).
        stdin: text fed to the program's standard input.
        timeout_s: wall-clock limit; on expiry the whole process group is killed (``SIGKILL``). The CPU limit is
            the same number of seconds, rounded up.
        memory_mb: address-space limit of the child (``RLIMIT_AS``).
        allow_network: keep the network (no namespace, no socket preamble). Off by default.
        max_output_bytes: cap on each of stdout and stderr (and on any file the program writes).
        python: the interpreter (default: the current one).
    """
    if not isinstance(code, str):
        raise TypeError(f"run_python_sandboxed: code must be a string, got {type(code).__name__}")
    if timeout_s <= 0 or memory_mb <= 0:
        raise ValueError(f"run_python_sandboxed: timeout_s ({timeout_s}) and memory_mb ({memory_mb}) must be > 0")
    if not sys.platform.startswith("linux") and not sys.platform == "darwin":
        raise RuntimeError(f"run_python_sandboxed needs POSIX resource limits; platform {sys.platform} has none")
    root = tempfile.mkdtemp(prefix="verl-sandbox-")
    try:
        # the program's working dir holds only its own file; the plumbing (io files, launcher) sits beside it
        workdir = os.path.join(root, "run")
        os.mkdir(workdir)
        program = os.path.join(workdir, "main.py")
        with open(program, "w", encoding="utf-8") as f:
            f.write(code)
        in_path, out_path, err_path = (os.path.join(root, n) for n in ("stdin", "stdout", "stderr"))
        with open(in_path, "w", encoding="utf-8") as f:
            f.write(stdin)
        cmd = [python or sys.executable, "-I"]
        prefix: tuple[str, ...] = ()
        if allow_network:
            cmd.append(program)
        else:
            launcher = os.path.join(root, "launcher.py")
            with open(launcher, "w", encoding="utf-8") as f:
                f.write(_LAUNCHER)
            cmd += [launcher, program]
            prefix = network_namespace_command()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        cpu_s = max(1, int(timeout_s + 0.999))
        start = time.monotonic()
        timed_out = False
        with open(in_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            try:
                proc = subprocess.Popen(
                    [*prefix, *cmd] if prefix else cmd,
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    cwd=workdir,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=functools.partial(_limits, memory_mb, cpu_s, max_output_bytes),
                )
            except OSError as e:
                return SandboxResult(None, "", f"cannot start the sandbox: {e}", False, 0.0, bool(prefix))
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                returncode = proc.wait()
            else:
                # children the program left running die with it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        duration = time.monotonic() - start
        # the CPU-time limit (RLIMIT_CPU, = the time limit) can stop a busy program just before the wall clock does
        timed_out = timed_out or returncode == -signal.SIGXCPU
        return SandboxResult(
            returncode=returncode,
            stdout=_read_capped(out_path, max_output_bytes),
            stderr=_read_capped(err_path, max_output_bytes),
            timed_out=timed_out,
            duration_s=duration,
            network_isolated=bool(prefix),
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
