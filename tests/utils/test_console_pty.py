"""The console of a run in a real terminal: per-step lines, log records and warnings go above the live progress bar,
never into its line; in a pipe there is no bar and no control character at all.

A child process drives the real console backend (``Tracking(..., "console")``), the real ``ProgressBar`` and the run's
logging set-up (``configure_logging``) inside a pseudo-terminal of a known size. Everything it writes is fed to a
terminal model (a small VT100 model here, and the ``pyte`` emulator when it is installed) and the final screen is
checked line by line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

STEPS = 5
COLS, ROWS = 120, 80

# The child: the run's logging set-up, the console logger, a progress bar, and per step (with "logs") a log record
# and a Python warning, then the step line, then the bar moves (the trainers' order: log, then update the bar).
CHILD = r"""
import logging, sys, warnings
from verl.utils.logging_utils import configure_logging
from verl.reporting import ProgressBar, Tracking

configure_logging()
warnings.simplefilter("always")
log = logging.getLogger("verl.console_demo")
steps, with_logs = int(sys.argv[1]), sys.argv[2] == "logs"
tracker = Tracking("p", "e", "console")
bar = ProgressBar(total=steps)
for step in range(1, steps + 1):
    metrics = {"critic/score/mean": step / 10, "perf/throughput": 100.0 * step}
    if with_logs:
        log.warning("log record at step %d", step)
        warnings.warn(f"python warning at step {step}", UserWarning)
    tracker.log(metrics, step=step)
    bar.update(metrics, step=step)
bar.close()
tracker.finish()
print("run finished")
"""


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_") and k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    env.pop("PYTHONWARNINGS", None)
    return env


def _run_in_pty(args: list[str], timeout_s: float = 120.0) -> bytes:
    """Run ``args`` with stdin/stdout/stderr on the slave side of a new pseudo-terminal of COLS x ROWS; return every
    byte it wrote (the line discipline's output processing included: ``\\n`` arrives as ``\\r\\n``)."""
    try:
        master, slave = os.openpty()
    except OSError as e:  # a sandbox without /dev/ptmx: no terminal to test in
        pytest.skip(f"no pseudo-terminal available: {e}")
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=_child_env(), start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise AssertionError(f"child still running after {timeout_s}s; output so far: {b''.join(chunks)!r}")
            ready, _, _ = select.select([master], [], [], min(left, 1.0))
            if not ready:
                if proc.poll() is not None and not select.select([master], [], [], 0.2)[0]:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as e:  # Linux: EIO once the child closed its side
                if e.errno == errno.EIO:
                    break
                raise
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        proc.wait(timeout=30)
    assert proc.returncode == 0, b"".join(chunks).decode("utf-8", "replace")
    return b"".join(chunks)


class VT100Screen:
    """A minimal terminal: printable text with deferred auto-wrap at the right margin, CR, LF, BS, TAB, and the CSI
    sequences cursor up/down/forward/back (``A B C D``), column (``G``) and erase in line (``K``); other escape
    sequences are consumed and ignored. Rows never scroll off (the whole history is the screen)."""

    def __init__(self, cols: int) -> None:
        self.cols = cols
        self.lines: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def _line(self) -> list[str]:
        while len(self.lines) <= self.row:
            self.lines.append([])
        return self.lines[self.row]

    def _put(self, ch: str) -> None:
        if self.col >= self.cols:  # the wrap deferred from the last column happens now
            self.row, self.col = self.row + 1, 0
        line = self._line()
        line.extend(" " * (self.col - len(line)))
        if self.col < len(line):
            line[self.col] = ch
        else:
            line.append(ch)
        self.col += 1

    def _csi(self, params: str, final: str) -> None:
        nums = [int(p) if p.isdigit() else 0 for p in params.lstrip("?").split(";")] if params else []
        n = max(nums[0], 1) if nums else 1
        col = min(self.col, self.cols - 1)
        if final == "A":
            self.row, self.col = max(0, self.row - n), col
        elif final == "B":
            self.row, self.col = self.row + n, col
        elif final == "C":
            self.col = min(self.cols - 1, col + n)
        elif final == "D":
            self.col = max(0, col - n)
        elif final == "G":
            self.col = min(self.cols - 1, n - 1)
        elif final == "K":
            mode, line = (nums[0] if nums else 0), self._line()
            if mode == 0:
                del line[col:]
            elif mode == 1:
                line[: col + 1] = " " * min(len(line), col + 1)
            else:
                line.clear()

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\x1b":
                if text[i + 1 : i + 2] == "[":
                    j = i + 2
                    while j < len(text) and not ("@" <= text[j] <= "~"):
                        j += 1
                    self._csi(text[i + 2 : j], text[j : j + 1])
                    i = j + 1
                else:  # a two-character escape
                    i += 2
                continue
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row += 1
            elif ch == "\b":
                self.col = max(0, min(self.col, self.cols - 1) - 1)
            elif ch == "\t":
                self.col = min(self.cols - 1, (self.col // 8 + 1) * 8)
            elif ch >= " ":
                self._put(ch)
            i += 1

    def display(self) -> list[str]:
        return ["".join(line).rstrip() for line in self.lines]


def _vt100_lines(raw: bytes) -> list[str]:
    screen = VT100Screen(COLS)
    screen.feed(raw.decode("utf-8", "replace"))
    return screen.display()


def _pyte_lines(raw: bytes) -> list[str]:
    pyte = pytest.importorskip("pyte")
    screen = pyte.Screen(COLS, ROWS)
    pyte.ByteStream(screen).feed(raw)
    return [line.rstrip() for line in screen.display]


def _check_screen(lines: list[str], with_logs: bool) -> None:
    """Every step line (and log record and warning) whole on its own line; one bar line, at 100%, after them all."""
    shown = [line for line in lines if line.strip()]
    text = "\n".join(shown)
    expected_kinds = [re.compile(r"^Training: 100%\|.*\| 5/5 \[.*\]$"), re.compile(r"^run finished$")]
    for step in range(1, STEPS + 1):
        step_line = f"step {step} | score {step / 10:.4g} | tok/s {100 * step}"
        record = f"verl WARNING: log record at step {step}"
        warning = re.compile(rf"^<string>:\d+: UserWarning: python warning at step {step}$")
        assert shown.count(step_line) == 1, f"step line {step_line!r} not whole on its own line in:\n{text}"
        expected_kinds.append(re.compile("^" + re.escape(step_line) + "$"))
        if with_logs:
            assert shown.count(record) == 1, f"log record {record!r} not whole on its own line in:\n{text}"
            assert sum(bool(warning.match(line)) for line in shown) == 1, f"warning {step} broken in:\n{text}"
            expected_kinds += [re.compile("^" + re.escape(record) + "$"), warning]
    # nothing else on screen: no bar fragments glued to a line, no half-cleared bar left behind
    stray = [line for line in shown if not any(k.match(line) for k in expected_kinds)]
    assert not stray, f"unexpected lines on screen: {stray}\nwhole screen:\n{text}"
    bars = [i for i, line in enumerate(shown) if "Training" in line]
    assert len(bars) == 1, f"expected one bar line, got {len(bars)}:\n{text}"
    assert bars[0] == len(shown) - 2 and shown[-1] == "run finished", text
    # the step lines keep their order
    order = [shown.index(f"step {s} | score {s / 10:.4g} | tok/s {100 * s}") for s in range(1, STEPS + 1)]
    assert order == sorted(order)


_OUTPUTS: dict[str, bytes] = {}


def _terminal_output(mode: str) -> bytes:
    """The child's bytes in a terminal, run once per mode (``steps``: step lines only; ``logs``: with log records
    and warnings) and shared by the tests below."""
    if mode not in _OUTPUTS:
        _OUTPUTS[mode] = _run_in_pty([sys.executable, "-c", CHILD, str(STEPS), mode])
    return _OUTPUTS[mode]


@pytest.mark.parametrize("mode", ["steps", "logs"])
def test_the_bar_is_drawn_in_a_terminal(mode: str) -> None:
    # guards the test itself: in a terminal tqdm draws (carriage returns), so the screen checks below mean something
    out = _terminal_output(mode)
    assert b"\r" in out and b"Training:" in out


@pytest.mark.parametrize("mode", ["steps", "logs"])
def test_terminal_screen_has_every_line_whole_above_the_bar(mode: str) -> None:
    _check_screen(_vt100_lines(_terminal_output(mode)), with_logs=mode == "logs")


@pytest.mark.parametrize("mode", ["steps", "logs"])
def test_terminal_screen_with_pyte(mode: str) -> None:
    _check_screen(_pyte_lines(_terminal_output(mode)), with_logs=mode == "logs")


def test_vt100_model_overwrites_like_a_terminal() -> None:
    """The screen model itself: CR returns to column 0 and overwrites, erase-in-line clears, the right margin wraps."""
    lines = _vt100_lines(b"abcdef\rXY\r\n12345\x1b[3D\x1b[K\r\n" + b"z" * (COLS + 3))
    assert lines == ["XYcdef", "12", "z" * COLS, "zzz"]


def test_pipe_has_plain_lines_and_no_control_characters() -> None:
    """CI logs and pipes: no bar (stderr is not a terminal), no carriage return or escape code, one line per step."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(STEPS), "logs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_child_env(),
        timeout=120,
        check=True,
    )
    out = proc.stdout.decode()
    assert "\r" not in out and "\x1b" not in out, repr(out)
    lines = out.splitlines()
    for step in range(1, STEPS + 1):
        assert lines.count(f"step {step} | score {step / 10:.4g} | tok/s {100 * step}") == 1, out
        assert lines.count(f"verl WARNING: log record at step {step}") == 1, out
    assert "Training" not in out


def test_a_real_sft_run_in_a_terminal_keeps_its_step_lines_whole(tiny_model_dir, tmp_path) -> None:
    """The offline trainer's own loop (console logger, its progress bar, the run's logging) in a terminal."""
    import pandas as pd

    rows = [{"prompt": f"What is {i} + {i}?", "response": f"#### {2 * i}"} for i in range(6)]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    raw = _run_in_pty(
        [sys.executable, "-m", "verl.trainer.fsdp_sft_trainer", f"data.train_files={tmp_path / 'train.parquet'}"]
        + ["data.prompt_key=prompt", "data.response_key=response", "data.train_batch_size=2"]
        + ["data.micro_batch_size_per_gpu=1", f"model.partial_pretrain={tiny_model_dir}", "trainer.device=cpu"]
        + [f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.total_epochs=1", "trainer.logger=[console]"]
    )
    assert b"\r" in raw  # the bar was drawn
    shown = [line for line in _vt100_lines(raw) if line.strip()]
    text = "\n".join(shown)
    for step in (1, 2, 3):
        # the step line whole on its own line (other notices may come and go around it)
        whole = [line for line in shown if re.fullmatch(rf"step {step} \| loss [-+.\deinf]+( \| .*)?", line)]
        assert len(whole) == 1 and sum(f"step {step} |" in line for line in shown) == 1, text
    bars = [i for i, line in enumerate(shown) if "%|" in line]
    assert len(bars) == 1 and re.match(r"^SFTTrainer: 100%\|.*\| 3/3 \[", shown[bars[0]]), text
    assert max(i for i, line in enumerate(shown) if line.startswith("step ")) < bars[0], text
