"""Native notices printed straight to file descriptor 2 (torch's C++ NUMA-binding warning) are held back into the
quiet console's summary line; every other line still reaches stderr."""

from __future__ import annotations

import os

from verl.utils import logging_utils
from verl.utils.native_stderr import filtered_native_stderr

NUMA = "[W1127 09:32:59.743361550 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy (function operator())\n"


def test_numa_notice_is_held_back_and_the_rest_passes(capfd, monkeypatch) -> None:
    monkeypatch.setattr(logging_utils, "_FILTER", logging_utils._OncePerMessage())
    with filtered_native_stderr() as hidden:
        os.write(2, NUMA.encode())
        os.write(2, b"a real native error\npartial line without newline")
    err = capfd.readouterr().err
    assert "NUMA binding" not in err
    assert "a real native error\n" in err and err.endswith("partial line without newline")
    assert hidden == [NUMA.strip()]
    line = logging_utils.summarize_hidden_warnings()
    assert line is not None and line.startswith("1 third-party warning hidden (native 1; e.g. '[W1127")


def test_disabled_changes_nothing(capfd) -> None:
    with filtered_native_stderr(enabled=False) as hidden:
        os.write(2, NUMA.encode())
    assert "NUMA binding" in capfd.readouterr().err and hidden == []
