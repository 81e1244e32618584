"""ProcessPool: per-input errors (SystemExit, crashes), time limits that kill the worker (and what it started),
one batch deadline, restarts, and functions that cannot travel."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

from verl.sandbox.process_pool import PoolTaskError, ProcessPool

# The workers get this module's functions by value, so they need not import the test module (and pytest).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _work(x: int, pid_file: str = "") -> int:
    if x == -1:
        sys.exit(3)
    if x == -2:
        os._exit(7)
    if x == -3:
        raise ZeroDivisionError("bad input")
    if x == -4:  # spins, after starting a grandchild in its own session that would outlive a plain kill
        child = subprocess.Popen(["sleep", "60"], start_new_session=False)
        with open(pid_file, "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        while True:
            pass
    return x * 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_results_in_order_and_per_input_errors():
    pool = ProcessPool(_work, 2, name="t")
    try:
        out = pool.map([{"x": 1}, {"x": -1}, {"x": 2}, {"x": -2}, {"x": -3}, {"x": 3}])
        assert out[0] == 2 and out[2] == 4 and out[5] == 6
        assert isinstance(out[1], PoolTaskError) and out[1].kind == "error" and out[1].error_type == "SystemExit"
        assert "SystemExit(3)" in str(out[1]) and "in _work" in str(out[1])
        assert out[3].kind == "crash" and "status 7" in str(out[3])
        assert out[4].kind == "error" and "ZeroDivisionError: bad input" in str(out[4])
        assert pool.restarts == 1  # the crashed worker was replaced
        assert pool.map([{"x": 5}] * 3) == [10, 10, 10]
    finally:
        pool.close()


def test_timeout_kills_the_worker_and_its_children(tmp_path):
    pool = ProcessPool(_work, 1, name="t")
    pid_file = str(tmp_path / "pids")
    try:
        start = time.monotonic()
        out = pool.map([{"x": -4, "pid_file": pid_file}, {"x": 4}], task_timeout_s=1.0)
        assert out[1] == 8  # the next input ran on a fresh worker
        assert isinstance(out[0], PoolTaskError) and out[0].kind == "timeout"
        assert "did not return within 1s" in str(out[0])
        assert time.monotonic() - start < 20
        worker_pid, child_pid = map(int, open(pid_file).read().split())
        deadline = time.monotonic() + 5
        while (_alive(worker_pid) or _alive(child_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker_pid), "the spinning worker was abandoned, not killed"
        assert not _alive(child_pid), "a process started by the function outlived it"
    finally:
        pool.close()


def test_one_deadline_bounds_a_batch_of_stuck_inputs(tmp_path):
    pool = ProcessPool(_work, 2, name="t")
    try:
        pool.map([{"x": 0}])  # workers started: time the batch alone
        start = time.monotonic()
        out = pool.map([{"x": -4, "pid_file": str(tmp_path / f"p{i}")} for i in range(6)], 30.0, deadline_s=1.0)
        elapsed = time.monotonic() - start
        # batch x timeout would be 6 x 30 s; the deadline ends it at 1 s (plus killing)
        assert elapsed < 8, elapsed
        assert all(isinstance(r, PoolTaskError) and r.kind == "timeout" for r in out)
        assert sum("batch deadline" in str(r) for r in out) == 6
        assert pool.map([{"x": 1}]) == [2]
    finally:
        pool.close()


def test_unpicklable_function_fails_at_construction():
    lock = threading.Lock()

    def holds_lock(x):
        with lock:
            return x

    with pytest.raises(TypeError, match="holds_lock.*cannot be sent to worker processes"):
        ProcessPool(holds_lock, 1, name="reward")
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        ProcessPool(_work, 0)


def test_close_stops_workers():
    pool = ProcessPool(_work, 2, name="t")
    pool.map([{"x": 1}, {"x": 2}])
    pids = pool.worker_pids()
    assert len(pids) == 2
    pool.close()
    assert not any(_alive(p) for p in pids)
    assert pool.map([{"x": 1}]) == [2]  # usable again
    pool.close()


def test_workers_exit_when_the_caller_dies_without_closing_the_pool(tmp_path):
    """A caller killed mid-call (OOM, SIGKILL) leaves no worker behind, even one busy in a long call."""
    import subprocess
    import sys
    import textwrap
    import time

    script = textwrap.dedent(
        f"""
        import json, os, threading, time
        from verl.sandbox.process_pool import ProcessPool

        def slow(x):
            time.sleep(60)
            return x

        pool = ProcessPool(slow, 2, name="orphan-test")
        threading.Thread(target=pool.map, args=([{{"x": 1}}, {{"x": 2}}],), daemon=True).start()
        time.sleep(2.0)  # both workers are now busy in slow()
        with open({str(tmp_path / "pids.json")!r}, "w") as f:
            json.dump(pool.worker_pids(), f)
        os._exit(0)  # no close(), no finalizers: as if killed
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    import json

    pids = json.loads((tmp_path / "pids.json").read_text())
    assert pids, "the pool started no worker"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
