"""Run untrusted Python (e.g. model-written code) in a jail: its own namespaces, an unprivileged user, limits.

What the program gets (see :mod:`verl.sandbox.jail_setup`, which builds it, and docs/reliability.md):

- its own **mount, PID, network, IPC and UTS namespaces** (``unshare``; plus a user namespace when the trainer is
  not root): no network interface but a down loopback, no view of the trainer's or anyone else's processes
  (``/proc`` shows only its own, so no ``/proc/<pid>/environ``), no System V IPC with the host;
- an **unprivileged uid/gid** (a fresh, otherwise unused id per run when the trainer runs as root) and no
  supplementary groups, so root-only files stay unreadable;
- a **read-only view of the system**, with ``/root``, ``/home``, ``/run``, ``/mnt``, ``/media``, ``/srv`` replaced by
  empty directories (the interpreter's installation is bound back so Python starts), and a private, size-limited
  ``tmpfs`` at ``/tmp`` holding its working directory ``/tmp/run``: all it writes vanishes with the run;
- limits: address space (``RLIMIT_AS``), CPU seconds, output/file size (``RLIMIT_FSIZE``), processes
  (``RLIMIT_NPROC``, so a fork bomb stops), no core files;
- a minimal environment (``python -I``, no variables of the trainer) and socket creation disabled in Python;
- the **whole process tree killed** when the call ends: the program is PID 1 of its PID namespace, so when it exits
  or is killed (wall-clock limit) the kernel kills every process it left, ``setsid`` or not.

The namespaces are detected once per process (:func:`sandbox_support`); where the machine offers none,
:class:`SandboxUnavailableError` says why instead of running the code with weaker isolation.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SandboxResult", "SandboxUnavailableError", "run_python_sandboxed", "sandbox_support"]

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

# With the network allowed: just run the program.
_RUN_ONLY_LAUNCHER = r"""
import runpy, sys
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
        setup_failed: the jail could not be built (``stderr`` says why); the program did not run.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    network_isolated: bool = False
    setup_failed: bool = False

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 within its limits."""
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """A one-line human description of how the run ended."""
        if self.setup_failed:
            return "the sandbox could not be built: " + (self.stderr.strip().splitlines() or [""])[-1][:300]
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


_SETUP_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jail_setup.py")
_NAMESPACES = ("--mount", "--pid", "--fork", "--mount-proc", "--ipc", "--uts", "--kill-child=SIGKILL")
# directories replaced by empty ones: home directories, root's, runtime sockets and secrets, mounted media
HIDDEN_DIRS = ("/root", "/home", "/run", "/mnt", "/media", "/srv")
_SETUP_FAILED = 125


class SandboxUnavailableError(RuntimeError):
    """This machine cannot build the sandbox (no ``unshare``, or namespaces are not permitted)."""


def _probe(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=20, text=True)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit status {done.returncode}")


@functools.lru_cache(maxsize=1)
def sandbox_support() -> tuple[str, ...]:
    """The ``unshare`` command prefix (without ``--net``) that builds the jail on this machine.

    Tried once per process: as root the namespaces directly; otherwise inside a new user namespace
    (``--user --map-root-user``), where the program keeps the trainer's unprivileged uid on the host.
    Raises :class:`SandboxUnavailableError` naming what failed.
    """
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailableError(f"the code sandbox needs Linux namespaces; this platform is {sys.platform}")
    exe = shutil.which("unshare")
    if exe is None:
        raise SandboxUnavailableError("the code sandbox needs the `unshare` command (util-linux), not found on PATH")
    tried = []
    candidates = [(exe, *_NAMESPACES)] if os.geteuid() == 0 else []
    candidates.append((exe, "--user", "--map-root-user", *_NAMESPACES))
    for prefix in candidates:
        why = _probe([*prefix, "--net", "--", sys.executable, "-I", "-c", "pass"])
        if not why:
            return prefix
        tried.append(f"{' '.join(prefix[1:])}: {why}")
    raise SandboxUnavailableError(
        "the code sandbox cannot create namespaces here (" + "; ".join(tried) + "). In a container, allow "
        "unprivileged user namespaces or run with CAP_SYS_ADMIN; or score code on a separate machine "
        "(reward_model.sandbox_fusion.url / reward_model.remote.url)"
    )


def _reveal_paths(python: str) -> list[str]:
    """Installation directories the interpreter needs, kept visible even under a hidden directory."""
    found = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    real = os.path.realpath(python)
    found.add(os.path.dirname(os.path.dirname(real)))  # <prefix>/bin/python -> <prefix>
    return sorted(found)


def _limits(memory_mb: int, cpu_s: int, max_output_bytes: int) -> None:
    """Runs in the launcher between fork and exec: the same limits, so even the setup cannot run away."""
    import resource

    mem = int(memory_mb) * 1024 * 1024 + (256 << 20)  # the setup stage needs a little more than the program
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s + 5, cpu_s + 6))


def _read_capped(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(limit)
    return data.decode("utf-8", errors="replace")


def _run_uid() -> int:
    # A fresh id per run (no passwd entry needed): RLIMIT_NPROC counts per uid, so concurrent runs do not share
    # one budget, and no file on the host belongs to it.
    return 2_000_000 + secrets.randbelow(1_000_000)


def run_python_sandboxed(
    code: str,
    stdin: str = "",
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    allow_network: bool = False,
    max_output_bytes: int = 1 << 20,
    python: str | None = None,
    max_processes: int = 32,
    tmp_mb: int = 64,
) -> SandboxResult:
    """Run the Python source ``code`` in the jail described in the module docstring and return what happened.

    Args:
        code: the program, run as ``__main__`` from ``/tmp/run/main.py`` (its working dir) inside the jail.
        stdin: text fed to the program's standard input.
        timeout_s: wall-clock limit; on expiry the jail is killed (``SIGKILL``), every process in it included. The
            CPU limit is the same number of seconds, rounded up.
        memory_mb: address-space limit of each process (``RLIMIT_AS``).
        allow_network: keep the host network (no network namespace, no socket preamble). Off by default.
        max_output_bytes: cap on each of stdout and stderr (and on any file the program writes).
        python: the interpreter (default: the current one).
        max_processes: ``RLIMIT_NPROC`` of the run's uid (the program and everything it starts).
        tmp_mb: size of the writable ``/tmp``.

    Raises:
        SandboxUnavailableError: the machine cannot build the jail.
    """
    _check_arguments(code, timeout_s, memory_mb, max_processes, tmp_mb)
    prefix = sandbox_support()
    python = python or sys.executable
    cpu_s = max(1, int(timeout_s + 0.999))
    root = tempfile.mkdtemp(prefix="verl-sandbox-")
    try:
        settings = {
            "python": python,
            "memory_mb": int(memory_mb),
            "cpu_s": cpu_s,
            "max_output_bytes": int(max_output_bytes),
            "max_processes": int(max_processes),
            "tmp_mb": int(tmp_mb),
        }
        paths = _write_run_dir(root, code, stdin, allow_network, settings)
        net = () if allow_network else ("--net",)
        cmd = [*prefix, *net, "--", python, "-I", _SETUP_SCRIPT, paths["config.json"]]
        limits = functools.partial(_limits, memory_mb, cpu_s, max_output_bytes)
        start = time.monotonic()
        try:
            proc = _start_jail(cmd, paths, limits)
        except OSError as e:
            return SandboxResult(None, "", f"cannot start the sandbox: {e}", False, 0.0, not allow_network, True)
        returncode, timed_out = _wait_jail(proc, timeout_s)
        duration = time.monotonic() - start
        stderr = _read_capped(paths["err"], max_output_bytes)
        setup_failed = returncode == _SETUP_FAILED and "sandbox setup:" in stderr
        # the CPU-time limit (RLIMIT_CPU, = the time limit) can stop a busy program just before the wall clock does
        timed_out = timed_out or returncode == -signal.SIGXCPU
        return SandboxResult(
            returncode=returncode,
            stdout=_read_capped(paths["out"], max_output_bytes),
            stderr=stderr,
            timed_out=timed_out,
            duration_s=duration,
            network_isolated=not allow_network,
            setup_failed=setup_failed,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _check_arguments(code: str, timeout_s: float, memory_mb: int, max_processes: int, tmp_mb: int) -> None:
    """The arguments of :func:`run_python_sandboxed` that no jail could honour: a TypeError or ValueError."""
    if not isinstance(code, str):
        raise TypeError(f"run_python_sandboxed: code must be a string, got {type(code).__name__}")
    if timeout_s <= 0 or memory_mb <= 0:
        raise ValueError(f"run_python_sandboxed: timeout_s ({timeout_s}) and memory_mb ({memory_mb}) must be > 0")
    if max_processes < 1 or tmp_mb < 1:
        raise ValueError(f"run_python_sandboxed: max_processes ({max_processes}) and tmp_mb ({tmp_mb}) must be >= 1")


def _write_run_dir(root: str, code: str, stdin: str, allow_network: bool, settings: dict) -> dict[str, str]:
    """Write a run's files into the private directory ``root`` (mode 0700): the program (``main.py``), the launcher
    that runs it, its stdin, and ``config.json`` for :mod:`~verl.sandbox.jail_setup` (``settings``: the
    interpreter and the limits; plus the paths, the run's uid/gid and the directories to hide and reveal).

    Returns the path of each file by name, with ``out`` and ``err`` (the program's stdout and stderr, not created
    here)."""
    os.chmod(root, 0o700)
    paths = {n: os.path.join(root, n) for n in ("main.py", "launcher.py", "config.json", "stdin", "out", "err")}
    with open(paths["main.py"], "w", encoding="utf-8") as f:
        f.write(code)
    with open(paths["launcher.py"], "w", encoding="utf-8") as f:
        f.write(_RUN_ONLY_LAUNCHER if allow_network else _LAUNCHER)
    with open(paths["stdin"], "w", encoding="utf-8") as f:
        f.write(stdin)
    uid = _run_uid() if os.geteuid() == 0 else None
    config = {
        "program": paths["main.py"],
        "launcher": paths["launcher.py"],
        "uid": uid,
        "gid": uid,
        **settings,
        "hide": list(HIDDEN_DIRS),
        "reveal": _reveal_paths(settings["python"]),
    }
    with open(paths["config.json"], "w", encoding="utf-8") as f:
        json.dump(config, f)
    return paths


def _start_jail(cmd: list[str], paths: dict[str, str], preexec: Callable[[], None]) -> subprocess.Popen:
    """Start the jail command ``cmd`` on the run's stdin / stdout / stderr files, with a minimal environment, in a
    session of its own (so a time-out kills all of it). Raises OSError when it cannot be started."""
    with open(paths["stdin"], "rb") as fin, open(paths["out"], "wb") as fout, open(paths["err"], "wb") as ferr:
        return subprocess.Popen(
            cmd,
            stdin=fin,
            stdout=fout,
            stderr=ferr,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            start_new_session=True,
            close_fds=True,
            preexec_fn=preexec,
        )


def _wait_jail(proc: subprocess.Popen, timeout_s: float) -> tuple[int, bool]:
    """``(returncode, timed_out)`` of a started jail; past ``timeout_s`` its whole session is killed."""
    try:
        return proc.wait(timeout=timeout_s), False
    except subprocess.TimeoutExpired:
        # unshare dies, its child (PID 1 of the namespace) gets its parent-death SIGKILL, and the kernel
        # kills every other process of the namespace
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(), True
