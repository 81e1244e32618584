"""A pool of worker processes that run one function on many inputs, with time limits that really stop the work.

Python cannot stop a thread, so a time limit enforced with threads only abandons a call that keeps running (and
keeps its CPU). Here each call runs in a separate process; a call past its time limit, or still running at the
batch deadline, has its worker process group killed with ``SIGKILL`` and the worker is started again for the next
input. A worker that dies on its own (``os._exit``, a segfault, the OOM killer) fails only the input it was running.

Workers are fresh interpreters started with ``subprocess`` (``python -m verl.sandbox.process_pool``), not forked
copies of the caller: nothing of the trainer's torch/CUDA/thread state is inherited and the caller's ``__main__``
is never re-imported (what ``multiprocessing``'s spawn and forkserver do, re-running an unguarded script). The
function travels by ``cloudpickle`` (closures and functions of ``__main__`` by value, importable ones by
reference, with the caller's ``sys.path``), the inputs and results by ``pickle`` over a private pair of pipes, so
what the function prints still reaches the caller's stdout/stderr.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["PoolTaskError", "ProcessPool", "default_num_workers"]

# How long a new worker may take to import the function before the pool gives up on it.
_START_TIMEOUT_S = 120.0


class PoolTaskError(RuntimeError):
    """One input failed in the pool.

    Attributes:
        kind: ``"error"`` (the function raised, SystemExit included), ``"timeout"`` (killed past its time limit or
            at the batch deadline) or ``"crash"`` (the worker process died while running it).
        error_type: name of the exception class raised in the worker (``kind == "error"``), else ``""``.
    """

    def __init__(self, message: str, kind: str, error_type: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.error_type = error_type


def default_num_workers() -> int:
    """Workers used when none is configured: the CPUs this process may run on, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))


@dataclass
class _Worker:
    proc: subprocess.Popen
    conn: Connection  # parent's end: tasks out, results in


def _kill(worker: _Worker) -> None:
    # The worker leads its own session: killing the group also stops what the function started (subprocesses).
    for target in (lambda: os.killpg(worker.proc.pid, signal.SIGKILL), lambda: worker.proc.kill()):
        try:
            target()
        except (ProcessLookupError, PermissionError, OSError):
            pass
    try:
        worker.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not wait for the process
        logger.warning("worker %d did not exit after SIGKILL", worker.proc.pid)
    worker.conn.close()


def _kill_all(workers: list[_Worker | None]) -> None:
    for w in workers:
        if w is not None:
            _kill(w)


class _Batch:
    """The bookkeeping of one :meth:`ProcessPool.map` call: which inputs wait, which run where since when, which
    workers are idle, the results so far, and the two time limits."""

    def __init__(self, inputs: Sequence[dict[str, Any]], task_timeout_s: float | None, deadline_s: float | None):
        self.inputs = inputs
        self.results: list[Any] = [None] * len(inputs)
        self.deadline_s = deadline_s
        self.end = time.monotonic() + deadline_s if deadline_s and deadline_s > 0 else float("inf")
        self.per_task = task_timeout_s if task_timeout_s and task_timeout_s > 0 else None
        self.pending: deque[int] = deque(range(len(inputs)))
        self.running: dict[int, tuple[int, float]] = {}  # worker index -> (input index, start time)
        self.idle: deque[int] = deque()

    def next_limit(self) -> float:
        """The nearest moment a running input or the batch runs out of time (``inf`` when there is no limit)."""
        limits = [self.end] + ([t0 + self.per_task for _, t0 in self.running.values()] if self.per_task else [])
        return min(limits)


class ProcessPool:
    """Run ``fn(**kwargs)`` for a list of inputs on ``num_workers`` worker processes.

    Args:
        fn: the function; must be picklable by cloudpickle (checked here, so an unsuitable function fails at
            construction, not at the first batch).
        num_workers: worker processes (>= 1), started on first use and kept for later batches.
        name: used in messages (e.g. ``"reward"``).

    Use :meth:`map`; call :meth:`close` (or let the pool be garbage collected) to stop the workers.
    """

    def __init__(self, fn: Callable[..., Any], num_workers: int, name: str = "pool") -> None:
        import cloudpickle

        if int(num_workers) < 1:
            raise ValueError(f"{name} pool: num_workers must be >= 1, got {num_workers}")
        try:
            self._payload = cloudpickle.dumps(fn)
        except Exception as e:
            raise TypeError(
                f"{name} function {getattr(fn, '__qualname__', fn)!r} cannot be sent to worker processes "
                f"({type(e).__name__}: {e}); make it picklable (no open files, locks or sockets in its closure)"
            ) from e
        self.num_workers = int(num_workers)
        self.name = name
        self._workers: list[_Worker | None] = [None] * self.num_workers
        self.restarts = 0  # workers started again after a kill or a crash
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)

    # ------------------------------------------------------------------ workers
    def _start(self, index: int) -> _Worker:
        parent_read, child_write = os.pipe()
        child_read, parent_write = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "verl.sandbox.process_pool", str(child_read), str(child_write)],
                pass_fds=(child_read, child_write),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C at the terminal reaches the trainer, which decides; killpg target
            )
        finally:
            os.close(child_read)
            os.close(child_write)
        conn = _DuplexPipe(parent_read, parent_write)
        worker = _Worker(proc, conn)  # type: ignore[arg-type]
        conn.send_bytes(pickle.dumps((list(sys.path), self._payload)))
        self._workers[index] = worker
        return worker

    def _await_ready(self, index: int) -> None:
        worker = self._workers[index]
        assert worker is not None
        if not worker.conn.poll(_START_TIMEOUT_S):
            _kill(worker)
            self._workers[index] = None
            raise RuntimeError(f"{self.name} worker did not start within {_START_TIMEOUT_S:.0f}s")
        try:
            status, detail = pickle.loads(worker.conn.recv_bytes())
        except (EOFError, OSError):
            code = worker.proc.wait()
            self._workers[index] = None
            raise RuntimeError(f"{self.name} worker exited with status {code} while loading the function") from None
        if status != "ready":
            _kill(worker)
            self._workers[index] = None
            raise RuntimeError(f"{self.name} worker cannot load the function: {detail}")

    def _ensure_started(self, count: int) -> None:
        # Start the missing workers together (each import runs in parallel), then wait for all of them.
        new = [i for i in range(count) if self._workers[i] is None or self._workers[i].proc.poll() is not None]
        for i in new:
            if self._workers[i] is not None:
                _kill(self._workers[i])  # type: ignore[arg-type]
            self._start(i)
        for i in new:
            self._await_ready(i)

    def _replace(self, index: int) -> None:
        _kill(self._workers[index])  # type: ignore[arg-type]
        self._workers[index] = None
        self.restarts += 1

    # ------------------------------------------------------------------ public
    def map(
        self,
        inputs: Sequence[dict[str, Any]],
        task_timeout_s: float | None = None,
        deadline_s: float | None = None,
    ) -> list[Any]:
        """Call ``fn(**kwargs)`` for each ``kwargs`` in ``inputs``; one result per input, in order.

        A failed input's slot holds a :class:`PoolTaskError` (never raised): the function's exception (any
        ``BaseException``, ``SystemExit`` included), ``timeout`` when it ran past ``task_timeout_s`` (counted from
        its own start) or was unfinished at the batch deadline ``deadline_s`` (counted from this call; inputs not
        yet started then fail too), or ``crash`` when its worker died. ``None`` or <= 0 disables either limit.
        Killed or dead workers are replaced before the next input.
        """
        if len(inputs) == 0:
            return []
        batch = _Batch(inputs, task_timeout_s, deadline_s)
        n_workers = min(self.num_workers, len(inputs))
        self._ensure_started(n_workers)
        batch.idle.extend(range(n_workers))
        while batch.pending or batch.running:
            self._hand_out(batch)
            if not batch.running:
                continue
            self._collect(batch)
            self._expire(batch)
        return batch.results

    def _hand_out(self, batch: _Batch) -> None:
        """Give the next pending inputs to the idle workers (starting again any that was replaced)."""
        while batch.pending and batch.idle:
            w = batch.idle.popleft()
            if self._workers[w] is None:
                self._ensure_started(w + 1)
            i = batch.pending.popleft()
            try:
                self._workers[w].conn.send_bytes(pickle.dumps((i, dict(batch.inputs[i]))))  # type: ignore[union-attr]
            except (BrokenPipeError, OSError):
                # died between inputs: the input was never given to it, so it is not this input's failure
                self._replace(w)
                batch.pending.appendleft(i)
                batch.idle.appendleft(w)
                continue
            except Exception as e:  # unpicklable input
                batch.results[i] = PoolTaskError(f"input cannot be sent to a worker: {type(e).__name__}: {e}", "error")
                batch.idle.appendleft(w)
                continue
            batch.running[w] = (i, time.monotonic())

    def _collect(self, batch: _Batch) -> None:
        """Wait for the first results (at most until the nearest time limit) and file them; a worker that died
        fails its input with ``crash`` and is replaced."""
        wait_s = max(0.0, batch.next_limit() - time.monotonic())
        by_conn = {self._workers[w].conn: w for w in batch.running}  # type: ignore[union-attr]
        ready = wait(list(by_conn), timeout=None if wait_s == float("inf") else wait_s)
        for conn in ready:
            w = by_conn[conn]  # type: ignore[index]
            i, _ = batch.running.pop(w)
            try:
                ok, value = pickle.loads(conn.recv_bytes())  # type: ignore[union-attr]
            except (EOFError, OSError):
                code = self._workers[w].proc.wait()  # type: ignore[union-attr]
                how = f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"status {code}"
                batch.results[i] = PoolTaskError(f"{self.name} worker process died ({how})", "crash")
                self._replace(w)
            else:
                batch.results[i] = value if ok else PoolTaskError(value[1], "error", value[0])
            batch.idle.append(w)

    def _expire(self, batch: _Batch) -> None:
        """Kill the workers whose input ran past its time limit or the batch deadline; at the deadline, fail the
        inputs not started."""
        now = time.monotonic()
        per_task, deadline_s = batch.per_task, batch.deadline_s
        for w, (i, t0) in list(batch.running.items()):
            over_task = per_task is not None and now >= t0 + per_task
            if over_task or now >= batch.end:
                batch.running.pop(w)
                what = f"did not return within {per_task:g}s" if over_task else "was still running at the "
                if not over_task:
                    what += f"batch deadline ({deadline_s:g}s)"
                batch.results[i] = PoolTaskError(f"{self.name} function {what}; its worker was killed", "timeout")
                self._replace(w)
                batch.idle.append(w)
        if now >= batch.end:
            for i in batch.pending:
                batch.results[i] = PoolTaskError(
                    f"{self.name} function not started before the batch deadline ({deadline_s:g}s)", "timeout"
                )
            batch.pending.clear()

    def close(self) -> None:
        """Stop all workers (the pool can still be used: workers start again on the next :meth:`map`)."""
        _kill_all(self._workers)
        for i in range(len(self._workers)):
            self._workers[i] = None

    def worker_pids(self) -> list[int]:
        """PIDs of the live workers (for tests and diagnostics)."""
        return [w.proc.pid for w in self._workers if w is not None and w.proc.poll() is None]


class _DuplexPipe:
    """Two one-way pipes (read fd, write fd) seen as one connection with ``send_bytes`` / ``recv_bytes``."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._r = Connection(read_fd, writable=False)
        self._w = Connection(write_fd, readable=False)

    def send_bytes(self, data: bytes) -> None:
        self._w.send_bytes(data)

    def recv_bytes(self) -> bytes:
        return self._r.recv_bytes()

    def poll(self, timeout: float) -> bool:
        return self._r.poll(timeout)

    def fileno(self) -> int:  # multiprocessing.connection.wait selects on it
        return self._r.fileno()

    def close(self) -> None:
        self._r.close()
        self._w.close()


def _error_payload(e: BaseException) -> tuple[str, str]:
    what = f"SystemExit({e.code!r}) (sys.exit called)" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
    frames = traceback.extract_tb(e.__traceback__)[1:]  # the first frame is this worker loop
    if frames:
        last = frames[-1]
        what += f" (at {last.filename}:{last.lineno} in {last.name})"
    return type(e).__name__, what


def _exit_when_orphaned(parent: int, period_s: float = 1.0) -> None:
    """End this worker when its caller dies without closing the pool. A closed pipe is not enough: a process the
    caller started later (a test's subprocess, a Ray worker) may hold the pipe's other end open, and a worker busy in
    a long call never reads it. A daemon thread checks the parent pid and exits the process once it changed."""
    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(period_s)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _worker_main(read_fd: int, write_fd: int) -> None:
    """Worker loop: load the function, then answer ``(index, kwargs)`` with ``(True, result)`` or
    ``(False, (type name, message))`` until the caller closes the pipe."""
    import cloudpickle

    _exit_when_orphaned(os.getppid())
    conn_in = Connection(read_fd, writable=False)
    conn_out = Connection(write_fd, readable=False)
    try:
        sys_path, payload = pickle.loads(conn_in.recv_bytes())
        sys.path[:] = sys_path
        fn = cloudpickle.loads(payload)
    except BaseException as e:  # noqa: BLE001 - reported to the caller, which raises
        conn_out.send_bytes(pickle.dumps(("error", f"{type(e).__name__}: {e}")))
        return
    conn_out.send_bytes(pickle.dumps(("ready", "")))
    while True:
        try:
            index, kwargs = pickle.loads(conn_in.recv_bytes())
        except (EOFError, OSError):  # the caller closed the pool or died
            return
        try:
            reply = pickle.dumps((True, fn(**kwargs)))
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are per-input errors here
            reply = pickle.dumps((False, _error_payload(e)))
        conn_out.send_bytes(reply)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the caller decides when a worker stops
    _worker_main(int(sys.argv[1]), int(sys.argv[2]))
