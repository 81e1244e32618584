"""Where a run is: the progress bar over training steps, fed with the same metrics dict as
:class:`~verl.reporting.Tracking`, and its heartbeat during long phases."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

from verl.reporting.phase import HEARTBEAT_INTERVAL_S, Heartbeat, phase_label
from verl.reporting.values import fmt, to_scalar
from verl.utils.logging_utils import console_write

__all__ = ["ProgressBar", "format_duration"]


def _show_warning_above_bar(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """``warnings.showwarning`` while a :class:`ProgressBar` is shown: the stdlib text, written above the bar."""
    text = warnings.formatwarning(message, category, filename, lineno, line)
    try:
        console_write(text.rstrip("\n"), file if file is not None else sys.stderr)
    except OSError:  # the stdlib ignores a console that cannot be written to
        pass


def format_duration(seconds: float) -> str:
    """``75`` -> ``"1 min 15 s"``, ``4000`` -> ``"1 h 06 min"``, ``9`` -> ``"9 s"`` (whole seconds)."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class ProgressBar:
    """Progress over training steps: step N/M, the phase of the step, tokens/s, truncation and the time left.

    ``update(metrics, step)`` moves to ``step`` and reads ``critic/score/mean``, ``perf/throughput`` (tokens/s) and
    ``response_length/clip_ratio`` (the share of responses cut at the length limit) from ``metrics`` when present.

    On a terminal (tqdm's rule for ``disable=None``: stderr is a TTY) it is a tqdm bar redrawn in place; its
    description shows the current phase and how long it has run (``Training · generating 12 s``), refreshed each
    second by a :class:`~verl.reporting.phase.Heartbeat`, and tqdm shows the time left. In a log (stderr not a
    terminal: CI, pipes, ``nohup``) there is no bar and no control character: each step writes one plain line
    (``progress: step 3/12 (25%) · 14.2 s/step · mostly generating (9.1 s) · 420 tok/s · 2 min 08 s left``: the
    phase that took most of the step, from its ``timing_s/*`` timers) and a phase that lasts longer
    than ``heartbeat_s`` writes ``progress: step 4/12 · generating... 30 s`` each ``heartbeat_s`` seconds.

    While the bar is shown, everything the run prints goes above it: the console backend's step lines and the
    trainers' notices through :func:`~verl.utils.logging_utils.console_write`, log records through the run's console
    handlers (:class:`~verl.utils.logging_utils.ConsoleHandler`), and Python warnings through
    ``warnings.showwarning``, which the bar routes through ``tqdm.write`` until it closes.
    """

    def __init__(
        self,
        total: int,
        initial: int = 0,
        desc: str = "Training",
        disable: bool | None = None,
        heartbeat_s: float = HEARTBEAT_INTERVAL_S,
        stream: Any = None,
    ) -> None:
        from tqdm.auto import tqdm

        from verl.utils.logging_utils import summarize_hidden_warnings

        summarize_hidden_warnings()  # the start-up's third-party warnings, in one line, before the bar
        self.total = int(total)
        self.desc = desc
        self.bar = tqdm(total=self.total, initial=int(initial), desc=desc, disable=disable, dynamic_ncols=True)
        self.live = not self.bar.disable
        # plain lines only where the bar was left out because its stream is not a terminal (not when a caller
        # switched it off)
        self.plain = not self.live and disable is None
        self.stream = stream
        self.step = int(initial)
        self._start_step = int(initial)
        self._start_time = time.monotonic()
        self._postfix: dict[str, str] = {}
        self._slowest: tuple[str, float] | None = None
        self._previous_showwarning: Any = None
        if self.live and warnings.showwarning is getattr(warnings, "_showwarning_orig", None):
            self._previous_showwarning = warnings.showwarning
            warnings.showwarning = _show_warning_above_bar
        self.heartbeat: Heartbeat | None = None
        if self.live or self.plain:
            self.heartbeat = Heartbeat(
                prefix=self._next_step_words,
                interval_s=heartbeat_s,
                on_tick=self._show_phase if self.live else None,
                stream=stream,
            ).start()

    def _next_step_words(self) -> str:
        return f"step {min(self.step + 1, self.total)}/{self.total}" if self.step < self.total else "finishing"

    def _show_phase(self, now: tuple[str, float] | None) -> None:
        """The live bar's description: the phase and its seconds (called by the heartbeat, once a second)."""
        text = self.desc if now is None else f"{self.desc} · {now[0]} {int(now[1])} s"
        if text != self.bar.desc:
            self.bar.set_description_str(text, refresh=True)

    def seconds_left(self) -> float | None:
        """Estimated seconds to the last step: the mean wall time of the steps this process ran, times the steps
        left (None before the first step)."""
        done = self.step - self._start_step
        if done <= 0:
            return None
        return (time.monotonic() - self._start_time) / done * max(0, self.total - self.step)

    def update(self, metrics: Mapping[str, Any] | None = None, step: int | None = None) -> None:
        """Advance to ``step`` (default: one step further) and refresh the score / throughput / truncation fields;
        in a log, write the step's progress line."""
        target = self.step + 1 if step is None else int(step)
        if target > self.step:
            self.bar.update(target - self.step)
            self.step = target
        metrics = metrics or {}
        postfix: dict[str, str] = {}
        if "critic/score/mean" in metrics:
            postfix["score"] = fmt(to_scalar("critic/score/mean", metrics["critic/score/mean"]))
        if "perf/throughput" in metrics:
            postfix["tok/s"] = f"{to_scalar('perf/throughput', metrics['perf/throughput']):.1f}"
        if "response_length/clip_ratio" in metrics:
            clip = to_scalar("response_length/clip_ratio", metrics["response_length/clip_ratio"])
            postfix["truncated"] = f"{100 * clip:.0f}%"
        self._postfix = postfix
        # the phase that took most of the step (its timers: timing_s/<name>), for the plain line
        timers = {
            k[len("timing_s/") :]: to_scalar(k, v)
            for k, v in metrics.items()
            if k.startswith("timing_s/") and k != "timing_s/step"
        }
        self._slowest = max(timers.items(), key=lambda kv: kv[1]) if timers else None
        if postfix and self.live:
            self.bar.set_postfix(postfix, refresh=True)
        if self.plain:
            console_write(self.line(), self.stream)

    def line(self) -> str:
        """The plain progress line of the last step (what a log gets per step)."""
        done = self.step - self._start_step
        parts = [f"step {self.step}/{self.total} ({100 * self.step / max(1, self.total):.0f}%)"]
        if done > 0:
            parts.append(f"{(time.monotonic() - self._start_time) / done:.1f} s/step")
        if self._slowest is not None:
            parts.append(f"mostly {phase_label(self._slowest[0])} ({self._slowest[1]:.1f} s)")
        if "tok/s" in self._postfix:
            parts.append(f"{self._postfix['tok/s']} tok/s")
        if "truncated" in self._postfix:
            parts.append(f"{self._postfix['truncated']} truncated")
        left = self.seconds_left()
        if left is not None:
            parts.append(f"{format_duration(left)} left" if self.step < self.total else "done")
        return "progress: " + " · ".join(parts)

    @property
    def postfix(self) -> str:
        """The text currently shown after the bar (for tests and logs)."""
        return str(self.bar.postfix or ", ".join(f"{k}={v}" for k, v in self._postfix.items()))

    def close(self) -> None:
        """Stop the heartbeat, close the bar (it stays on screen as the last line), give ``warnings.showwarning``
        back."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None
        if self.live:  # a phase a last tick showed is over: the bar that stays on screen names the run only
            self._show_phase(None)
        if self._previous_showwarning is not None and warnings.showwarning is _show_warning_above_bar:
            warnings.showwarning = self._previous_showwarning
        self._previous_showwarning = None
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
