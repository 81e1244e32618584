"""A run killed by the kernel (no clean exit) is recorded as killed on the next start and by `verl report`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from verl.reporting.report import RunReporter
from verl.reporting.report.__main__ import main as report_main
from verl.reporting.report.run_files import process_alive, reconcile_killed


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _running_info(run_dir, pid: int, host: str | None = None) -> None:
    info = {"kind": "ppo", "status": "running", "pid": pid, "host": host or socket.gethostname(), "global_step": 6}
    (run_dir / "run_info.json").write_text(json.dumps(info))


def test_the_reporter_records_its_pid_and_a_live_run_stays_running(tmp_path) -> None:
    RunReporter(str(tmp_path), "ppo", report=False).start()
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["status"] == "running" and info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    assert reconcile_killed(str(tmp_path))["status"] == "running"  # this process is alive
    assert process_alive(os.getpid(), info["pid_start"]) and not process_alive(_dead_pid())


def test_verl_report_turns_a_vanished_running_run_into_killed(tmp_path, capsys) -> None:
    _running_info(tmp_path, _dead_pid())
    assert report_main([str(tmp_path)]) == 0
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["status"] == "killed" and "no clean exit" in info["error"] and "step 6" in info["error"]
    page = (tmp_path / "report.html").read_text()
    assert "status-killed" in page and "no clean exit" in page


def test_the_next_start_says_the_previous_run_was_killed(tmp_path, capsys) -> None:
    _running_info(tmp_path, _dead_pid())
    RunReporter(str(tmp_path), "ppo", report=False).start(resumed_step=4)
    assert "the previous run in" in capsys.readouterr().out
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["status"] == "running" and "no clean exit" in info["previous_exit"]


def test_a_run_on_another_host_is_left_alone(tmp_path) -> None:
    _running_info(tmp_path, _dead_pid(), host="another-host")
    assert reconcile_killed(str(tmp_path))["status"] == "running"
