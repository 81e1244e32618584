"""Stop a training loop cleanly on SIGTERM / SIGINT: finish the step, save, flush the loggers, then exit.

A scheduler's SIGTERM (preemption, ``scancel``, ``docker stop``) or a Ctrl-C would otherwise kill the run wherever
it is, losing every step since the last checkpoint (all of them with the default ``save_freq=-1``). Inside
:class:`GracefulStop` the first such signal only sets a flag that the loop checks between steps; a second one
restores the default action and re-sends the signal, so an impatient user still stops the process at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["GracefulStop"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class GracefulStop:
    """Context manager that turns the first SIGTERM/SIGINT into a stop request.

    Attributes:
        signum: the signal received (None while none was).

    Outside the main thread (where Python cannot install handlers) it does nothing and ``requested`` stays False.

    Example::

        with GracefulStop() as stop:
            while training:
                step()
                if stop.requested:
                    save(); break
    """

    def __init__(self, what: str = "training") -> None:
        self.what = what
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """True once a stop signal arrived."""
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        """``"SIGTERM"`` / ``"SIGINT"`` (empty when none arrived)."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def exit_code(self) -> int:
        """The shell convention for a process ended by the signal: ``128 + signum`` (0 when none arrived)."""
        return 128 + self.signum if self.signum is not None else 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            print(
                f"[verl] {signal.Signals(signum).name} received: finishing the current {self.what} step, saving a "
                "checkpoint and stopping (send it again to exit at once)",
                file=sys.stderr,
                flush=True,
            )
            return
        # second signal: the default action, now
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
