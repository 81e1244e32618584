"""The progress bar over training steps, fed with the same metrics dict as :class:`~verl.utils.tracking.Tracking`."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import Any

from verl.utils.logging_utils import console_write
from verl.utils.tracking.values import fmt, to_scalar

__all__ = ["ProgressBar"]


def _show_warning_above_bar(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """``warnings.showwarning`` while a :class:`ProgressBar` is shown: the stdlib text, written above the bar."""
    text = warnings.formatwarning(message, category, filename, lineno, line)
    try:
        console_write(text.rstrip("\n"), file if file is not None else sys.stderr)
    except OSError:  # the stdlib ignores a console that cannot be written to
        pass


class ProgressBar:
    """A tqdm bar over training steps showing step/total, ETA, score and tokens/s.

    ``update(metrics, step)`` moves the bar to ``step`` and shows ``critic/score/mean`` and ``perf/throughput``
    from ``metrics`` when present.

    The bar is drawn only when its stream (stderr) is a terminal (``disable=None``, tqdm's rule): CI logs and pipes
    get no carriage returns or escape codes, only the console backend's plain line per step. While the bar is shown,
    everything the run prints goes above it: the console backend's step lines and the trainers' notices through
    :func:`~verl.utils.logging_utils.console_write`, log records through the run's console handlers
    (:class:`~verl.utils.logging_utils.ConsoleHandler`), and Python warnings through ``warnings.showwarning``,
    which the bar routes through ``tqdm.write`` until it closes.
    """

    def __init__(self, total: int, initial: int = 0, desc: str = "Training", disable: bool | None = None) -> None:
        from tqdm.auto import tqdm

        self.total = int(total)
        self.bar = tqdm(total=self.total, initial=int(initial), desc=desc, disable=disable, dynamic_ncols=True)
        self.step = int(initial)
        self._previous_showwarning: Any = None
        if not self.bar.disable and warnings.showwarning is getattr(warnings, "_showwarning_orig", None):
            self._previous_showwarning = warnings.showwarning
            warnings.showwarning = _show_warning_above_bar

    def update(self, metrics: Mapping[str, Any] | None = None, step: int | None = None) -> None:
        """Advance to ``step`` (default: one step further) and refresh the score / throughput fields."""
        target = self.step + 1 if step is None else int(step)
        if target > self.step:
            self.bar.update(target - self.step)
            self.step = target
        postfix: dict[str, str] = {}
        metrics = metrics or {}
        if "critic/score/mean" in metrics:
            postfix["score"] = fmt(to_scalar("critic/score/mean", metrics["critic/score/mean"]))
        if "perf/throughput" in metrics:
            postfix["tok/s"] = f"{to_scalar('perf/throughput', metrics['perf/throughput']):.1f}"
        if postfix:
            self.bar.set_postfix(postfix, refresh=True)

    @property
    def postfix(self) -> str:
        """The text currently shown after the bar (for tests and logs)."""
        return str(self.bar.postfix or "")

    def close(self) -> None:
        """Close the bar (it stays on screen as the last line) and give ``warnings.showwarning`` back."""
        if self._previous_showwarning is not None and warnings.showwarning is _show_warning_above_bar:
            warnings.showwarning = self._previous_showwarning
        self._previous_showwarning = None
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
