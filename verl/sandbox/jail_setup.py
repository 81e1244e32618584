"""First stage of a sandboxed run, executed as a standalone script inside fresh namespaces.

:func:`verl.sandbox.jail.run_python_sandboxed` starts ``unshare`` (mount, PID, network, IPC and UTS namespaces,
plus a user namespace when the trainer is not root) with this file as the command; it runs as PID 1 of the new
PID namespace and, still privileged inside the namespaces, builds the view the untrusted program gets:

1. a private mount tree; a fresh ``tmpfs`` at ``/tmp`` (the only writable place, size-limited) and ``/dev/shm``;
2. empty read-only ``tmpfs`` over the directories that hold other people's files and secrets (``/root``, ``/home``,
   ``/run``, ...), with the interpreter's own installation bound back at its original path so Python still starts;
3. every other mount remounted read-only;
4. the program copied into ``/tmp/run`` (its working directory), then: no supplementary groups, an unprivileged
   uid/gid (when the trainer is root), resource limits, the parent-death signal (the whole namespace dies with its
   launcher), and ``exec`` of the Python launcher that runs the program.

It imports nothing from verl (it runs under ``python -I``) and reads its settings from the JSON file named by its
only argument. Any failure exits with status 125 and a message on stderr starting ``sandbox setup:``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_MOVE = 8192
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1
_LOCKED_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC}
SETUP_FAILED = 125

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _mount_points() -> list[tuple[str, str]]:
    """(mount point, per-mount options) of this mount namespace, parents before children."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            # octal escapes (\040 for a space) in mountinfo paths
            point = fields[4].encode().decode("unicode_escape")
            points.append((point, fields[5]))
    return sorted(points, key=lambda p: p[0].count("/") if p[0] != "/" else 0)


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _park_tmp_installs(cfg: dict, hidden: list[str]) -> list[tuple[str, str]]:
    """Interpreter directories under ``/tmp`` (a virtualenv made there) would vanish under the private ``/tmp``:
    bind them onto a scratch tmpfs first (a hidden directory that holds none of them; it is covered later anyway).
    Returns ``(stage, path)`` pairs to move back once the new ``/tmp`` is mounted."""
    paths = [p for p in cfg["reveal"] if _under(p, "/tmp") and os.path.isdir(p)]
    if not paths:
        return []
    scratch = next((d for d in hidden if not any(_under(r, d) for r in cfg["reveal"])), None)
    if scratch is None:
        raise RuntimeError(f"no scratch directory to keep {paths} visible (none of {cfg['hide']} is usable)")
    _mount("tmpfs", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=700")
    parked = []
    for i, path in enumerate(paths):
        stage = os.path.join(scratch, f"tmp-reveal{i}")
        os.mkdir(stage)
        _mount(path, stage, None, _MS_BIND | _MS_REC)
        parked.append((stage, path))
    return parked


def _build_view(cfg: dict) -> None:
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    hidden = [d for d in cfg["hide"] if os.path.isdir(d) and not os.path.islink(d)]
    parked = _park_tmp_installs(cfg, hidden)
    tmp_opts = f"size={int(cfg['tmp_mb'])}m,mode=1777"
    _mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, tmp_opts)
    for stage, path in parked:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(stage, path, None, _MS_MOVE)
    # what must stay visible under a hidden directory (the interpreter) is parked in /tmp, then moved back
    staged = []
    for i, path in enumerate(p for p in cfg["reveal"] if any(_under(p, h) for h in hidden) and os.path.isdir(p)):
        stage = f"/tmp/.reveal{i}"
        os.mkdir(stage)
        _mount(path, stage, None, _MS_BIND | _MS_REC)
        staged.append((stage, path))
    for directory in hidden:
        _mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=755")
    for stage, path in staged:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(stage, path, None, _MS_MOVE)
        os.rmdir(stage)
    writable = {"/tmp", "/dev/shm"}
    for point, options in _mount_points():
        under_writable = point in writable or any(_under(point, w) for w in writable)
        if under_writable and not any(_under(point, path) for _s, path in parked):
            continue  # the private /tmp stays writable; an installation parked inside it does not
        if any(_under(point, h) for h in hidden) and not any(_under(point, r) for _s, r in staged):
            continue  # shadowed by an empty tmpfs: out of reach
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for opt in options.split(","):
            flags |= _LOCKED_FLAGS.get(opt, 0)
        try:
            _mount(None, point, None, flags)
        except OSError as e:
            if point == "/":
                raise
            # a pseudo-filesystem that refuses a remount stays as it was; the root and real disks never do
            print(f"sandbox setup: warning: {e}", file=sys.stderr)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=16m,mode=1777")


def _drop_privileges(cfg: dict) -> None:
    uid = cfg.get("uid")
    limits = {
        resource.RLIMIT_AS: int(cfg["memory_mb"]) * 1024 * 1024,
        resource.RLIMIT_CPU: int(cfg["cpu_s"]),
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_FSIZE: int(cfg["max_output_bytes"]),
        resource.RLIMIT_NPROC: int(cfg["max_processes"]),
    }
    for which, value in limits.items():
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))
    if uid is not None:
        os.setgroups([])
        os.setgid(int(cfg["gid"]))
        os.setuid(int(uid))
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("could not drop root")
    # changing credentials clears the parent-death signal that unshare set: set it again, so killing the launcher
    # (on a timeout) kills this PID 1 and with it the whole namespace
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    with open(cfg["program"], encoding="utf-8") as f:
        program = f.read()
    with open(cfg["launcher"], encoding="utf-8") as f:
        launcher = f.read()
    _build_view(cfg)
    run_dir = "/tmp/run"
    os.mkdir(run_dir, 0o700)
    with open(os.path.join(run_dir, "main.py"), "w", encoding="utf-8") as f:
        f.write(program)
    os.mkdir("/tmp/.verl", 0o755)
    with open("/tmp/.verl/launcher.py", "w", encoding="utf-8") as f:
        f.write(launcher)
    if cfg.get("uid") is not None:
        os.chown(run_dir, int(cfg["uid"]), int(cfg["gid"]))
        os.chown(os.path.join(run_dir, "main.py"), int(cfg["uid"]), int(cfg["gid"]))
    _drop_privileges(cfg)
    os.chdir(run_dir)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": run_dir, "TMPDIR": "/tmp"}
    python = cfg["python"]
    argv = [python, "-I", "/tmp/.verl/launcher.py", os.path.join(run_dir, "main.py")]
    os.execve(python, argv, env)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except BaseException as e:  # noqa: BLE001 - any setup failure must be told apart from the program's own
        print(f"sandbox setup: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        os._exit(SETUP_FAILED)
