"""A console a person can read: third-party loggers quiet by default, their warnings collapsed into one line.

vLLM's CPU engine alone prints ~160 INFO/WARNING lines in a demo's first minute (thread binding, weight reloads,
dtype casts on every weight sync, NUMA binding). By default (``level=None``) the loggers of the libraries below
keep their errors and hold their warnings back: :func:`summarize_hidden_warnings` says in one line how many there
were, from which library, with the first one's text (the trainers call it when training starts, and it runs at
exit); notices that describe what the trainer does on purpose (a weight sync that skips tied or weight-less
modules) are dropped outright. ``trainer.third_party_log_level=WARNING`` shows each warning,
``INFO``/``DEBUG`` everything at that level, ``trainer.enable_debug_mode`` everything at DEBUG.

Console lines and a live progress bar share the terminal: :func:`console_write` (the trainers' per-step lines and
notices) and the console handlers here (log records) write *above* a live tqdm bar with ``tqdm.write``, which
clears the bar, writes the line and redraws the bar below it; with no live bar they write plainly.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import warnings
from typing import Any, TextIO

THIRD_PARTY_LOGGERS = ("vllm", "transformers", "ray", "torch.distributed", "accelerate", "peft", "datasets")

# Notices that describe intended behaviour, never a failure of the run.
_EXPECTED = (
    # our weight sync passes no LM head for tied embeddings (it is the embedding) and rotary tables have no weights
    re.compile(r"(ParallelLMHead|RotaryEmbedding|LogitsProcessor)\w*: Failed to load weights"),
    # the trainer owns the thread count; vLLM's CPU worker says so on every call
    re.compile(r"doesn't allow to use `torch.set_num_threads`"),
    re.compile(r"Detected the chat template content format"),
    # vLLM's CPU start-up notices about optional accelerations the CPU build runs without (Triton, tcmalloc,
    # inductor), and about settings the trainer chose (in-process engine seed, eager mode)
    re.compile(r"Triton is (installed, but|not installed)|Model Runner V2 requires Triton"),
    re.compile(r"is not found in LD_PRELOAD"),
    re.compile(r"global random seed is set to|Enforce eager set|Inductor compilation was disabled"),
    re.compile(r"Reset SSM cache type"),
)
# Python warnings from inside third-party packages that say nothing to a user of the trainer
_NOISY_WARNING_MODULES = r"(vllm|transformers|torch|ray|trl|peft)(\..*)?"


class _OncePerMessage(logging.Filter):
    """Pass ERROR and above; hold back WARNINGs (counted per library, the distinct ones kept for the summary line,
    digits ignored); drop expected notices and INFO."""

    KEEP = 50  # distinct hidden warnings kept for the summary

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.repeats = 0  # warnings that repeated one already held back
        self.hidden: dict[str, int] = {}  # library (top-level logger name) -> warnings held back, not yet summarised
        self.examples: list[str] = []  # distinct held-back warnings, not yet summarised

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if record.levelno < logging.WARNING:
            return False
        message = record.getMessage()
        if any(p.search(message) for p in _EXPECTED):
            return False
        library = record.name.split(".", 1)[0]
        self.hidden[library] = self.hidden.get(library, 0) + 1
        key = re.sub(r"\d+(\.\d+)?", "#", f"{record.name}:{message}")
        if key in self.seen:
            self.repeats += 1
            if self.examples:  # (a repeat of one said in an earlier summary is still an example of this one)
                return False
        self.seen.add(key)
        if len(self.examples) < self.KEEP:
            self.examples.append(f"{record.name}: {message}")
        return False

    def take_summary(self) -> str | None:
        """One line on the warnings held back since the last call (None when there were none), then forget them."""
        total = sum(self.hidden.values())
        if not total:
            return None
        by_library = ", ".join(f"{name} {n}" for name, n in sorted(self.hidden.items(), key=lambda kv: -kv[1]))
        first = self.examples[0] if self.examples else ""
        if len(first) > 100:
            first = first[:97] + "..."
        self.hidden.clear()
        self.examples.clear()
        example = f"; e.g. {first!r}" if first else ""
        return (
            f"{total} third-party warning{'s' if total != 1 else ''} hidden ({by_library}{example}); "
            "trainer.third_party_log_level=WARNING shows each"
        )


_FILTER = _OncePerMessage()
# an explicit user choice in the environment always wins
_USER_VLLM_ENV = {k: os.environ.get(k) for k in ("VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING")}


def live_progress_bar_class() -> Any:
    """The tqdm class when at least one tqdm bar is live (shown, not closed), else None.

    tqdm keeps its live bars in the class-level ``tqdm._instances`` (a disabled bar, e.g. ``disable=None`` on a
    stream that is not a terminal, never joins it). Looked up through ``sys.modules``: when tqdm was never imported
    there is no bar, and nothing is imported here.
    """
    std = sys.modules.get("tqdm.std")
    if std is None:
        return None
    cls = std.tqdm
    return cls if len(getattr(cls, "_instances", ())) > 0 else None


def console_write(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` and a newline to ``stream`` (default: the current ``sys.stdout``) and flush.

    While a progress bar is live this goes through ``tqdm.write``, which clears the bar, writes the line and redraws
    the bar under it, so the line never lands inside the bar's line (a terminal shows stdout and stderr on one
    screen: a bar on stderr is cleared for a line on stdout too). Without a live bar it is a plain write.
    """
    out = stream if stream is not None else sys.stdout
    bar_cls = live_progress_bar_class()
    if bar_cls is not None:
        bar_cls.write(text, file=out)
    else:
        out.write(text + "\n")
    out.flush()


class ConsoleHandler(logging.StreamHandler):
    """A logging handler for the console of a run: writes to whatever ``sys.stderr`` is at emit time (test runners
    and notebooks swap it; a stream captured at set-up could be closed by then), above a live progress bar
    (``tqdm.write``) when one is shown, so log records never land inside the bar's line.

    Example (your own loggers next to the trainer's progress bar)::

        logging.getLogger("my_reward").addHandler(ConsoleHandler())
    """

    @property  # type: ignore[override]
    def stream(self):  # noqa: D102
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; the live sys.stderr always wins
        pass

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102
        if live_progress_bar_class() is None:
            super().emit(record)
            return
        try:
            console_write(self.format(record), self.stream)
        except RecursionError:  # the stdlib handlers re-raise it too
            raise
        except Exception:  # noqa: BLE001 - a failing console must not fail the run (stdlib behaviour)
            self.handleError(record)


_StderrHandler = ConsoleHandler  # the name the rest of this module grew up with


class _QuietHandler(ConsoleHandler):
    """The one console handler of a quiet third-party logger (filters act per handler, so children are covered)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        self.addFilter(_FILTER)


_STATE: dict[str, object] = {"level": "unset"}


def count_hidden_native(lines: list[str]) -> None:
    """Count notices that native code printed to stderr and :mod:`verl.utils.native_stderr` held back into the
    next summary line (as library ``native``)."""
    for line in lines:
        _FILTER.hidden["native"] = _FILTER.hidden.get("native", 0) + 1
        if len(_FILTER.examples) < _FILTER.KEEP:
            _FILTER.examples.append(line)


def summarize_hidden_warnings() -> str | None:
    """Log (``verl INFO``) one line on the third-party warnings the quiet console held back since the last summary,
    and return it; None (and nothing logged) when none were. The trainers call it when training starts (the
    start-up's warnings: vLLM's dtype casts, NUMA binding, ...) and it runs again at exit for later ones."""
    line = _FILTER.take_summary()
    if line is not None:
        logging.getLogger("verl").info(line)
    return line


def _summary() -> None:
    summarize_hidden_warnings()


def _console_handlers(lg: logging.Logger) -> list[logging.Handler]:
    """The library's own console handlers: capture handlers of test runners (pytest attaches its session-wide ones
    to loggers) are left alone, or the once-per-message filter would outlive the run in them."""
    return [
        h
        for h in lg.handlers
        if isinstance(h, logging.StreamHandler) and not type(h).__module__.startswith(("_pytest", "pytest"))
    ]


def quiet_third_party_logs(level: str | int | None = None) -> None:
    """Set the third-party loggers' verbosity: ``None`` quiet (see module doc), or a logging level to show all.

    Safe to call again (e.g. after ``import vllm``, which installs its own handler); the last call wins.
    """
    if level is None:
        level = os.environ.get("VERL_THIRD_PARTY_LOG_LEVEL") or None
    _STATE["level"] = level
    # vLLM reads these when an engine starts; in-process engines and spawned workers inherit the environment
    if _USER_VLLM_ENV["VLLM_LOGGING_LEVEL"] is None:
        os.environ["VLLM_LOGGING_LEVEL"] = "WARNING" if level is None else str(logging.getLevelName(level))
    if _USER_VLLM_ENV["VLLM_CONFIGURE_LOGGING"] is None:
        # quiet: vLLM must not install its own handler (it would replace ours when an engine starts)
        os.environ["VLLM_CONFIGURE_LOGGING"] = "0" if level is None else "1"
    for name in THIRD_PARTY_LOGGERS:
        lg = logging.getLogger(name)
        ours = [h for h in lg.handlers if isinstance(h, _QuietHandler)]
        if level is None:
            lg.setLevel(logging.WARNING)
            for handler in _console_handlers(lg):
                if _FILTER not in handler.filters:
                    handler.addFilter(_FILTER)
            if not _console_handlers(lg):
                lg.addHandler(_QuietHandler())
            lg.propagate = False
        else:
            lg.setLevel(level)
            for handler in ours:
                lg.removeHandler(handler)
            for handler in lg.handlers:
                handler.removeFilter(_FILTER)
            lg.propagate = not lg.handlers
    if level is None:
        warnings.filterwarnings("ignore", category=FutureWarning, module=_NOISY_WARNING_MODULES)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"(vllm|ray)(\..*)?")
        try:  # transformers' per-load progress bars ("Loading weights: 100%|...") on every model load
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass
        if not _STATE.get("atexit"):
            atexit.register(_summary)
            _STATE["atexit"] = True
    else:
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.enable_progress_bar()
        except ImportError:
            pass


def configure_logging(debug: bool = False, third_party_level: str | int | None = None) -> None:
    """The console of a run: verl's own INFO lines (``verl: ...``) on stderr, third-party loggers as
    :func:`quiet_third_party_logs` says (all of them at DEBUG when ``debug``)."""
    verl_logger = logging.getLogger("verl")
    if not any(getattr(h, "_verl_console", False) for h in verl_logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("verl %(levelname)s: %(message)s"))
        handler._verl_console = True  # type: ignore[attr-defined]
        verl_logger.addHandler(handler)
    verl_logger.setLevel(logging.DEBUG if debug else logging.INFO)
    quiet_third_party_logs(logging.DEBUG if debug else third_party_level)


def current_third_party_level() -> str | int | None:
    """The level last set by :func:`quiet_third_party_logs` (``None``: quiet), or ``"unset"``."""
    return _STATE["level"]  # type: ignore[return-value]
