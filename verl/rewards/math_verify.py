"""Symbolic MATH grading with Hugging Face's ``math-verify`` (a core dependency of verl).

``compute_score(model_output, ground_truth)`` parses the reference as LaTeX (wrapped in ``\\boxed{}``) and the
response as LaTeX or a plain expression, then checks mathematical equivalence (``1/2`` == ``0.5`` ==
``\\frac{1}{2}``, ``x^2+2x`` == ``x(x+2)``, intervals, sets ...). Same call as verl's ``math_verify`` module.

math-verify bounds its own work with ``signal.alarm``, which only works in the main thread; reward managers score
in worker threads (``reward_model.timeout_s``, async reward), so there its internal timeout is switched off and the
reward manager's time limit is what bounds a pathological expression.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["compute_score", "verify_equivalent"]

# Seconds math-verify may spend parsing / comparing when it runs in the main thread.
_TIMEOUT_S = 5


class _DropTimeoutDisabledNotice(logging.Filter):
    """math-verify logs a warning on every call made with its timeout off; in worker threads that is expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledNotice())


def _timeout() -> int | None:
    return _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def verify_equivalent(answer: str, reference: str) -> bool | None:
    """Whether ``answer`` and ``reference`` (bare LaTeX / expressions) are equivalent; None if either cannot be
    parsed."""
    import math_verify

    timeout = _timeout()
    try:
        gold = math_verify.parse("$" + reference + "$", parsing_timeout=timeout)
        pred = math_verify.parse("$" + answer + "$", parsing_timeout=timeout)
        if not gold or not pred:
            return None
        return bool(math_verify.verify(gold, pred, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - the parser raises many kinds of errors on odd LaTeX: "cannot tell"
        return None


def compute_score(model_output: str, ground_truth: str, timeout_score: float = 0.0, **kwargs: Any) -> float:
    """1.0 if the response's final answer is equivalent to ``ground_truth``, else 0.0.

    The reference is read as LaTeX inside ``\\boxed{}``; the response as an expression or LaTeX (its last boxed
    answer first). ``timeout_score`` is returned when math-verify times out or cannot parse the response.
    """
    import math_verify
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    timeout = _timeout()
    try:
        gold = math_verify.parse(
            "\\boxed{" + str(ground_truth) + "}", extraction_config=(LatexExtractionConfig(),), parsing_timeout=timeout
        )
        pred = math_verify.parse(
            str(model_output),
            extraction_config=(ExprExtractionConfig(), LatexExtractionConfig()),
            parsing_timeout=timeout,
        )
        if not gold or not pred:
            return 0.0
        return 1.0 if math_verify.verify(gold, pred, timeout_seconds=timeout) else 0.0
    except Exception:  # noqa: BLE001 - a timeout or unparsable text is scored, never a crash of the trainer
        return float(timeout_score)
