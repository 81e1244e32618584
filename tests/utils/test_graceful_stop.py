"""GracefulStop: the first SIGTERM/SIGINT is a request the loop sees between steps, a second one kills at once;
the trainer CLI turns a signal-stopped run into exit code 128 + N."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from verl.utils.graceful_stop import GracefulStop


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_is_a_request_and_handlers_are_restored(sig):
    before = signal.getsignal(sig)
    with GracefulStop() as stop:
        assert not stop.requested
        os.kill(os.getpid(), sig)
        assert stop.requested and stop.signal_name == sig.name and stop.exit_code == 128 + sig
    assert signal.getsignal(sig) is before


def test_outside_the_main_thread_it_does_nothing():
    seen = {}

    def body():
        with GracefulStop() as stop:
            seen["requested"] = stop.requested

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == {"requested": False}


def test_second_signal_exits_at_once(tmp_path):
    marker = tmp_path / "steps"
    program = textwrap.dedent(
        f"""
        import time
        from verl.utils.graceful_stop import GracefulStop
        with GracefulStop() as stop:
            for step in range(600):  # a long step loop that ignores the request
                open({str(marker)!r}, "a").write("x")
                time.sleep(0.05)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", program], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None, "the first SIGTERM must not end the process"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert "SIGTERM received: finishing the current training step" in proc.stderr.read()


def test_cli_exit_code_of_a_signal_stopped_run():
    from verl.trainer.config.entrypoint import run_entrypoint
    from verl.trainer.config.schema import PPOConfig

    def run(result):
        return run_entrypoint(
            ["trainer.total_training_steps=1"],
            prog="p",
            description="d",
            config_name=PPOConfig.config_name,
            schema=PPOConfig,
            load_run_fn=lambda: lambda cfg: result,
        )

    assert run({"stopped_by": "SIGTERM"}) == 143
    assert run({"stopped_by": "SIGINT"}) == 130
    assert run({"stopped_by": None}) == 0
