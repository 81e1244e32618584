"""Notices that native code prints straight to the process's stderr (file descriptor 2), past Python's logging.

torch's C++ warnings (``[W1127 09:32:59 utils.cpp:68] Warning: NUMA binding: ...``, printed once when vLLM's CPU
engine binds its OpenMP threads) never reach a Python logger, so :mod:`verl.utils.logging_utils` cannot hold them
back. :func:`filtered_native_stderr` points descriptor 2 at a pipe for the length of a ``with`` block; a thread
forwards every line to the real stderr as it comes, except the lines matching the given notices, which are counted
into the quiet console's one-line summary (:func:`verl.utils.logging_utils.summarize_hidden_warnings`). Nothing is
buffered beyond a line, so a crash inside the block still shows everything printed before it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence

__all__ = ["NATIVE_NOTICES", "filtered_native_stderr"]

# torch's C++ warning when vLLM's CPU worker binds memory to the NUMA node of its cores: what was asked for
NATIVE_NOTICES = (re.compile(r"Warning: NUMA binding: "),)


def _forward(read_fd: int, out_fd: int, notices: Sequence[re.Pattern[str]], hidden: list[str]) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        pending = b""
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                _emit(line + b"\n", out_fd, notices, hidden)
        if pending:
            _emit(pending, out_fd, notices, hidden)


def _emit(raw: bytes, out_fd: int, notices: Sequence[re.Pattern[str]], hidden: list[str]) -> None:
    text = raw.decode("utf-8", "replace")
    if any(p.search(text) for p in notices):
        hidden.append(text.strip())
        return
    view = memoryview(raw)
    while view:
        view = view[os.write(out_fd, view) :]


@contextlib.contextmanager
def filtered_native_stderr(
    notices: Sequence[re.Pattern[str]] = NATIVE_NOTICES, enabled: bool = True
) -> Iterator[list[str]]:
    """Within the block, lines written to file descriptor 2 that match ``notices`` are held back (and counted into
    the quiet console's summary); every other line goes to stderr as it comes. Yields the list of held-back lines
    (filled when the block ends). ``enabled=False`` (a verbose console, or no real descriptor 2) changes nothing."""
    hidden: list[str] = []
    if not enabled:
        yield hidden
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no descriptor 2 to redirect (an embedded interpreter)
        yield hidden
        return
    read_fd, write_fd = os.pipe()
    thread = threading.Thread(target=_forward, args=(read_fd, saved, list(notices), hidden), daemon=True)
    thread.start()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        yield hidden
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # closes the pipe's last write end: the thread reads to the end and stops
        thread.join(timeout=5.0)
        os.close(saved)
        if hidden:
            from verl.utils.logging_utils import count_hidden_native

            count_hidden_native(hidden)
