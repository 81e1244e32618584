"""What the run is doing right now (its *phase*), and a heartbeat that says so during long phases.

A phase is a named stretch of work: ``generating``, ``scoring``, ``updating actor``, ``validating``, ``saving
checkpoint``, ``starting workers``... :func:`phase` enters one (phases nest; the innermost is the current one) and
:func:`current_phase` reads it from any thread. The trainers' step timers
(:func:`verl.trainer.ppo.metric_utils.marked_timer`) enter the phase of the timer they measure, so every timed
stage of a step is a phase without further code.

:class:`Heartbeat` is a daemon thread that looks at the current phase once a second. On a terminal the caller's
``on_tick`` shows it live (the progress bar's description: ``step 4/12 · generating 12 s``); in a log (stdout not
a terminal) it writes one plain line each ``interval_s`` seconds a phase lasts (``progress: step 4/12 · generating...
30 s``), so a run under load never sits silent for minutes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

from verl.utils.logging_utils import console_write

__all__ = ["HEARTBEAT_INTERVAL_S", "Heartbeat", "current_phase", "phase", "phase_label", "watched"]

# seconds a phase lasts between two heartbeat lines in a log
HEARTBEAT_INTERVAL_S = 30.0

# timer name (verl's timing_s/<name> keys) -> what a person reads
_LABELS = {
    "gen": "generating",
    "gen_max": "generating greedy baselines",
    "reward": "scoring",
    "old_log_prob": "old log-probs",
    "ref": "reference log-probs",
    "teacher": "teacher log-probs",
    "values": "values",
    "adv": "advantages",
    "update_critic": "updating critic",
    "update_actor": "updating actor",
    "testing": "validating",
    "save_checkpoint": "saving checkpoint",
    "step": "training step",
}

_LOCK = threading.Lock()
_STACK: list[tuple[str, float]] = []  # (label, monotonic start), innermost last


def phase_label(name: str) -> str:
    """The words shown for a timer ``name`` (``gen`` -> ``generating``); other names are shown as they are."""
    return _LABELS.get(name, name.replace("_", " "))


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Make ``name`` (a timer name or any words, see :func:`phase_label`) the current phase for the ``with`` body."""
    entry = (phase_label(name), time.monotonic())
    with _LOCK:
        _STACK.append(entry)
    try:
        yield
    finally:
        with _LOCK:
            # remove this entry (not blindly the last: a phase entered on another thread may have nested in)
            for i in range(len(_STACK) - 1, -1, -1):
                if _STACK[i] is entry:
                    del _STACK[i]
                    break


def _innermost() -> tuple[str, float] | None:
    with _LOCK:
        return _STACK[-1] if _STACK else None


def current_phase() -> tuple[str, float] | None:
    """``(label, seconds since it began)`` of the innermost phase, or None outside every phase."""
    entry = _innermost()
    return None if entry is None else (entry[0], time.monotonic() - entry[1])


def _fmt_s(seconds: float) -> str:
    return f"{int(seconds)} s" if seconds < 120 else f"{int(seconds) // 60} min {int(seconds) % 60:02d} s"


class Heartbeat:
    """A daemon thread that reports the current phase while it lasts.

    Args:
        prefix: returns the words before the phase (e.g. ``"step 4/12"``), read at each tick.
        interval_s: in a log, one line each ``interval_s`` seconds of one phase (``progress: step 4/12 ·
            generating... 30 s``); nothing for phases shorter than that.
        on_tick: on a terminal, called once a second with ``(label, seconds)`` of the current phase (or None) instead
            of writing lines (the progress bar shows it in place). None: always write lines.
        stream: where lines go (default: the ``sys.stdout`` of the moment).

    Use as a context manager (``with Heartbeat(...):``) or :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        prefix: Callable[[], str] | None = None,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        on_tick: Callable[[tuple[str, float] | None], None] | None = None,
        stream=None,
        tick_s: float = 1.0,
    ) -> None:
        self.prefix = prefix
        self.interval_s = float(interval_s)
        self.on_tick = on_tick
        self.stream = stream
        self.tick_s = float(tick_s)
        self.lines_written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="verl-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it (at most one tick)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.tick_s + 1.0)
            self._thread = None

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        reported: tuple[float, int] | None = None  # (phase start, last multiple of interval_s reported)
        while not self._stop.wait(self.tick_s):
            try:
                entry = _innermost()
                now = None if entry is None else (entry[0], time.monotonic() - entry[1])
                if self.on_tick is not None:
                    self.on_tick(now)
                    continue
                if entry is None or now is None:
                    continue
                label, seconds = now
                beats = int(seconds // self.interval_s)
                if beats < 1 or reported == (entry[1], beats):
                    continue
                reported = (entry[1], beats)
                head = self.prefix() if self.prefix is not None else ""
                head = f"{head} · " if head else ""
                console_write(f"progress: {head}{label}... {_fmt_s(seconds)}", self.stream or sys.stdout)
                self.lines_written += 1
            except Exception:  # noqa: BLE001 - a heartbeat must never take the run down
                continue


@contextlib.contextmanager
def watched(name: str, prefix: str = "") -> Iterator[None]:
    """:func:`phase` ``name`` with its own :class:`Heartbeat` writing lines while it lasts (for the long stretches
    outside the training loop: starting the workers, the export). ``prefix``: the words before the phase."""
    with phase(name), Heartbeat(prefix=(lambda: prefix) if prefix else None):
        yield
